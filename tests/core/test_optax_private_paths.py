"""optax's private module paths outside ``optax._src`` resolve in gradax.

For every private module of optax 0.2.8's ``contrib``, ``transforms``,
``schedules``, ``tree_utils`` and ``losses`` (``optax.contrib._muon``, ...),
the gradax path (``gradax.contrib._muon``) imports three ways (a ``from``
import, an ``import`` statement, the attribute path after a bare ``import
gradax``) and offers exactly optax's names less the ones listed in
``LEFT_OUT``, each gradax's own object. See docs/optax-private-paths.md.
"""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
import types

import pytest

import gradax
from gradax._optax import paths as _optax_paths

PACKAGES = ("contrib", "transforms", "schedules", "tree_utils", "losses")


def _optax_private_modules() -> list[str]:
    found = []
    for package in PACKAGES:
        optax_package = importlib.import_module(f"optax.{package}")
        for info in pkgutil.iter_modules(optax_package.__path__):
            if info.name.startswith("_") and not info.name.endswith("_test"):
                found.append(f"{package}.{info.name}")
    return sorted(found)


MODULES = _optax_private_modules()

# What optax's modules import for their own annotations: not optax's API.
TYPING_HELPERS = {
    "Any",
    "Callable",
    "Hashable",
    "Iterable",
    "Literal",
    "Mapping",
    "NamedTuple",
    "Optional",
    "Protocol",
    "Sequence",
    "Tuple",
    "TypeVar",
    "Union",
    "cast",
}

# optax's names that gradax has no counterpart for (docs/optax-private-paths.md
# says why for each).
LEFT_OUT = {
    "contrib._ademamix": {"lerp"},
    "contrib._galore": {"GaLoreDimNumsOrFn", "ReshapeFn"},
    "contrib._muon": {"ReshapeFn", "WeightDimNumOrFn"},
    "tree_utils._casting": {"T"},
    "tree_utils._state_utils": {"Initable"},
    "losses._classification": {
        "binary_logistic_loss",
        "binary_sparsemax_loss",
        "multiclass_logistic_loss",
        "canonicalize_axes",
        "canonicalize_axis",
        "warn_deprecated_function",
        "weighted_logsoftmax",
    },
    "losses._fenchel_young": {"MaxFun"},
}

# Mapped names that the module's public package does not offer.
ELSEWHERE = {
    "scale_by_shape": "gradax.scale_by_shape",
    "WeightDecaySchedule": "gradax.WeightDecaySchedule",
    "WrappedScheduleState": "gradax.schedules.wrapped.WrappedScheduleState",
    "SplitRealAndImaginaryArrays": (
        "gradax.contrib._complex.SplitRealAndImaginaryArrays"
    ),
}


def _names(module: types.ModuleType) -> set[str]:
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and name not in TYPING_HELPERS
        and not isinstance(value, types.ModuleType)
    }


def _expected_names(path: str) -> set[str]:
    return _names(importlib.import_module(f"optax.{path}")) - LEFT_OUT.get(path, set())


def _public(path: str, name: str) -> object:
    if name in ELSEWHERE:
        owner, _, attr = ELSEWHERE[name].rpartition(".")
        return getattr(importlib.import_module(owner), attr)
    return getattr(importlib.import_module(f"gradax.{path.split('.')[0]}"), name)


def test_the_modules_are_optax_0_2_8s():
    assert len(MODULES) == 42  # 18 + 10 + 3 + 4 + 7
    for path, left_out in LEFT_OUT.items():
        assert left_out <= _names(importlib.import_module(f"optax.{path}")), path


def _has_file(dotted: str) -> bool:
    package, _, name = dotted.rpartition(".")
    folder = importlib.import_module(package).__path__
    return any(info.name == name for info in pkgutil.iter_modules(folder))


def test_every_path_is_a_real_module_or_a_shim():
    real = {f"gradax.{path}" for path in MODULES if _has_file(f"gradax.{path}")}
    assert len(real) == 24  # 16 of contrib, 6 of losses, schedules._join, _inject
    assert set(_optax_paths.PATHS) == {f"gradax.{path}" for path in MODULES} - real
    for shim in _optax_paths.PATHS:
        path = shim.removeprefix("gradax.")
        assert set(_optax_paths.names(shim)) == _expected_names(path), path


@pytest.mark.parametrize("path", MODULES)
def test_import_statement_gives_optax_names_bound_to_gradax_objects(path):
    namespace: dict[str, object] = {}
    exec(f"import gradax.{path} as module", namespace)
    module = namespace["module"]
    assert isinstance(module, types.ModuleType)
    assert module is sys.modules[f"gradax.{path}"]
    expected = _expected_names(path)
    if f"gradax.{path}" in _optax_paths.PATHS:
        assert _names(module) == expected
        assert sorted(module.__all__) == sorted(expected)
        assert (module.__doc__ or "").startswith(
            f"Compatibility shim for ``optax.{path}``"
        )
    else:  # gradax's own module at optax's path: it has optax's names
        assert expected <= _names(module), sorted(expected - _names(module))
    for name in sorted(expected):
        assert getattr(module, name) is _public(path, name), name
    for name in sorted(LEFT_OUT.get(path, ())):
        assert not hasattr(module, name), name


@pytest.mark.parametrize("path", MODULES)
def test_from_import_of_each_name(path):
    names = sorted(_expected_names(path))
    namespace: dict[str, object] = {}
    exec(f"from gradax.{path} import {', '.join(names)}", namespace)
    for name in names:
        assert namespace[name] is _public(path, name), name
    for name in sorted(LEFT_OUT.get(path, ())):
        with pytest.raises(ImportError):
            exec(f"from gradax.{path} import {name}", {})


def test_attribute_paths_after_a_bare_import_and_nothing_loaded_eagerly():
    """``optax.contrib._muon.muon`` after ``import optax``, switched to gradax.

    A fresh interpreter: ``import gradax`` builds no shim; each attribute path
    then resolves (loading its shim) to gradax's object.
    """
    checks = {path: sorted(_expected_names(path)) for path in MODULES}
    shims = sorted(_optax_paths.PATHS)
    code = (
        "import functools, importlib, sys, gradax as optax\n"
        f"print(sorted(m for m in {shims!r} if m in sys.modules))\n"
        f"elsewhere = {ELSEWHERE!r}\n"
        f"for path, names in {checks!r}.items():\n"
        "    package = getattr(optax, path.split('.')[0])\n"
        "    module = functools.reduce(getattr, path.split('.'), optax)\n"
        "    for name in names:\n"
        "        owner, _, attr = elsewhere.get(name, '.').rpartition('.')\n"
        "        theirs = (\n"
        "            getattr(importlib.import_module(owner), attr)\n"
        "            if owner else getattr(package, name)\n"
        "        )\n"
        "        if getattr(module, name) is not theirs:\n"
        "            print('differs', path, name)\n"
        "print('done')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out == ["[]", "done"]


def test_missing_paths_and_names_fail_as_missing_ones_do():
    with pytest.raises(AttributeError):
        gradax.contrib._not_an_optax_module  # noqa: B018
    with pytest.raises(AttributeError):
        gradax.tree_utils._not_an_optax_module  # noqa: B018
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("gradax.contrib._not_an_optax_module")
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("gradax.losses._not_an_optax_module")
    muon = importlib.import_module("gradax.contrib._muon")
    with pytest.raises(AttributeError):
        muon.WeightDimNumOrFn  # noqa: B018
    # The packages' own lazy names still resolve through the merged __getattr__.
    assert gradax.transforms.masked is gradax.masked
    assert gradax.schedules.inject_hyperparams is gradax.inject_hyperparams
    with pytest.raises(AttributeError):
        gradax.transforms.not_a_name  # noqa: B018


def test_real_files_win_over_the_finder():
    finders = [f for f in sys.meta_path if isinstance(f, _optax_paths.OptaxPathFinder)]
    assert len(finders) == 1
    # The finder serves only the listed paths; gradax's own modules load from
    # their files.
    assert finders[0].find_spec("gradax.contrib._adopt", None) is None
    adopt = importlib.import_module("gradax.contrib._adopt")
    assert (adopt.__file__ or "").endswith("_adopt.py")
    muon = importlib.import_module("gradax.contrib._muon")
    assert getattr(muon, "__file__", None) is None
    assert muon.__spec__.name == "gradax.contrib._muon"


def test_the_idioms_real_code_uses():
    # MaxText: `from optax.contrib._muon import muon, MuonDimensionNumbers`.
    namespace: dict[str, object] = {}
    exec(
        "from gradax.contrib._muon import muon, MuonDimensionNumbers\n"
        "tx = muon(learning_rate=0.02)\n"
        "dims = MuonDimensionNumbers(reduction_axis=0, output_axis=1)\n",
        namespace,
    )
    assert isinstance(namespace["tx"], gradax.GradientTransformation)
    # rollfast: `from optax.transforms import _masking`, `_masking.MaskedNode`.
    exec("from gradax.transforms import _masking", namespace)
    masking = namespace["_masking"]
    assert isinstance(masking, types.ModuleType)
    assert isinstance(gradax.MaskedNode(), masking.MaskedNode)
    # `from optax.tree_utils._state_utils import NamedTupleKey`.
    exec("from gradax.tree_utils._state_utils import NamedTupleKey", namespace)
    assert namespace["NamedTupleKey"] is gradax.tree.NamedTupleKey
