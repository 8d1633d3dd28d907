"""The conformance registry: every public transformation, with small kwargs.

Each entry gets every check in ``conformance/test_conformance.py`` (and the
other suites in ``conformance/``). The entries live with their package's
tests: ``tests/<package>/registry_<package>.py`` holds the entries of the
transformations whose class is defined in ``gradax/<package>/`` (the
``gradax/_core/`` modules are ``core``), each as one module-level
``ENTRIES: list[Entry] = [...]``. Adding a transformation to gradax means
adding one entry there; the constants and helpers the files share are in
``registry_base.py``.

This module loads every ``tests/*/registry_*.py`` by its path (the test
folders are not packages and not on ``sys.path`` when it is imported),
registers it in ``sys.modules`` under its file name, and concatenates the
lists in the order of the folders' names.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from registry_base import Entry, ExtraArgCase, entry_id

__all__ = [
    "CANONICAL",
    "ENTRIES",
    "EXTRA_ARG_CASES",
    "NOT_IN_REGISTRY",
    "VARIANTS",
    "Entry",
    "entry_id",
    "is_variant",
]

TESTS = Path(__file__).resolve().parent


def _load(path: Path) -> ModuleType:
    """The registry module at ``path``, imported once under its file name."""
    name = path.stem
    module = sys.modules.get(name)
    if module is not None:
        if Path(module.__file__ or "").resolve() != path:
            raise ImportError(f"two registry files named {name}: {path}, {module}")
        return module
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


MODULES = [_load(path) for path in sorted(TESTS.glob("*/registry_*.py"))]

ENTRIES: list[Entry] = [entry for m in MODULES for entry in m.ENTRIES]


# The first entry of each name is its canonical configuration; the entries
# after it vary its kwargs (a dtype, nesterov, a mask). CI runs every check
# on the canonical entries, and on the variants the checks whose outcome the
# kwargs decide: the numbers against optax and the state types under control
# flow. The checks of a mechanism the kwargs pass through (no recompile,
# sharding, fault guards, resume) and convergence run on the variants with
# -m slow: each is a compile per entry.
def _first_of_each_name(entries: list[Entry]) -> list[Entry]:
    seen: set[str] = set()
    first = []
    for entry in entries:
        if entry.name not in seen:
            seen.add(entry.name)
            first.append(entry)
    return first


CANONICAL: list[Entry] = _first_of_each_name(ENTRIES)
_CANONICAL_IDS = {id(e) for e in CANONICAL}
VARIANTS: list[Entry] = [e for e in ENTRIES if id(e) not in _CANONICAL_IDS]


def is_variant(entry: Entry) -> bool:
    return id(entry) not in _CANONICAL_IDS


# Entries whose update needs the objective's value, function or gradient
# (contrib/test_contrib_extra_args.py runs the checks on them with it).
EXTRA_ARG_CASES: list[ExtraArgCase] = [
    case for m in MODULES for case in getattr(m, "EXTRA_ARG_CASES", [])
]

# Public transformations that the conformance registry cannot run, and why.
# Each has tests of its own (the paths are under tests/).
NOT_IN_REGISTRY = {
    "GradientTransformation": "the base class (FunctionTransformation is tested)",
    "GradientTransformationExtraArgs": "optax's name for the base class",
    "Alias": "a base class for compositions",
    "FunctionTransformation": "wraps user functions; core/test_protocol.py",
    "NamedTupleTransformation": (
        "the base of optax-style user subclasses, a NamedTuple of two user "
        "functions with no guarantees of its own; core/test_optax_subclasses.py"
    ),
    "lbfgs": "needs value, grad and value_fn; linesearch/test_lbfgs.py",
    "scale_by_lbfgs": "as lbfgs; linesearch/test_lbfgs.py",
    "scale_by_zoom_linesearch": "as lbfgs; linesearch/test_linesearch.py",
    "scale_by_backtracking_linesearch": "needs value_fn; linesearch/test_linesearch.py",
    "lookahead": "params are a LookaheadParams pair; test_combinators_wrappers.py",
    "polyak_sgd": "needs the objective's value; optimizers/test_polyak_noisy_sgd.py",
    "scale_by_polyak": "as polyak_sgd; optimizers/test_polyak_noisy_sgd.py",
    "momo": "needs the objective's value; contrib/test_contrib.py",
    "momo_adam": "needs the objective's value; contrib/test_contrib.py",
    "reduce_on_plateau": "needs the loss as value; contrib/test_contrib.py",
    "hutchinson_estimator_diag_hessian": "needs obj_fn; contrib/test_contrib.py",
    "stateless": "wraps a user function; transforms/test_transforms.py",
    "stateless_with_tree_map": "wraps a user function; transforms/test_transforms.py",
    "master_weights": (
        "float32 updates for bfloat16 params, which the suite's dtype checks "
        "refuse, and float16 refused; precision/test_master_weights.py"
    ),
    "shard_state": (
        "needs a mesh; sharding/test_zero1_registry.py wraps every entry in it"
    ),
}
