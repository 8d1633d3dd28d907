"""What runs inside one child process of ``framework_suite.py``.

A child runs one configuration of one framework with one library: it points
``optax`` at gradax when asked to, stands in for the framework's heavy imports,
builds the optimizer with the framework's own code, trains a small fixed
parameter tree for ``STEPS`` steps and describes what it saw (state tree with
node types, leaves, parameters after every step) for the parent to compare.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Callable, Iterable
from typing import Any

STEPS = 5

# ------------------------------------------------------------ optax -> gradax


class _ExistingModule(importlib.abc.Loader):
    """Hands back a module that is already loaded, under another name."""

    def __init__(self, module: types.ModuleType):
        self.module = module

    def create_module(self, spec):
        return self.module

    def exec_module(self, module):
        pass


class _OptaxIsGradax(importlib.abc.MetaPathFinder):
    """Resolves ``optax`` and every ``optax.X.Y`` to ``gradax`` and ``gradax.X.Y``.

    This is what a user's ``import gradax as optax`` does for code the user
    cannot edit: ``from optax._src import base`` finds ``gradax._src.base``, and
    a path gradax does not have fails with gradax's ``No module named`` error.
    """

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "optax" and not fullname.startswith("optax."):
            return None
        module = importlib.import_module("gradax" + fullname[len("optax") :])
        return importlib.machinery.ModuleSpec(fullname, _ExistingModule(module))


def use_gradax_for_optax() -> None:
    """From now on ``import optax`` (and ``optax.X``) in this process is gradax."""
    if "optax" in sys.modules:
        raise RuntimeError("optax was imported before the switch to gradax")
    sys.meta_path.insert(0, _OptaxIsGradax())


# ------------------------------------------------------------ stand-ins


class _StandInType(type):
    """Class of stand-ins: any attribute is another stand-in class."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _StandInType(name, (StandIn,), {})

    def __call__(cls, *args, **kwargs):
        # Used as a decorator (``@max_logging.something``): keep the function.
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]
        return super().__call__()

    def __getitem__(cls, item):
        return cls


class StandIn(metaclass=_StandInType):
    """Whatever a heavy module's name is used as: a callable that does nothing."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return StandIn()

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]
        return StandIn()

    def __iter__(self):
        return iter(())


class _StandInModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = _StandInType(name, (StandIn,), {})
        setattr(self, name, value)
        return value


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves a stand-in module for each listed name and everything below it."""

    def __init__(self, names: Iterable[str]):
        self.names = tuple(names)

    def find_spec(self, fullname, path=None, target=None):
        if any(fullname == n or fullname.startswith(n + ".") for n in self.names):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StandInModule(spec.name)
        module.__path__ = []  # a package, so its submodules import too
        return module

    def exec_module(self, module):
        pass


def stand_in(names: Iterable[str]) -> None:
    """Do-nothing modules for ``names`` (and their submodules), found before
    any installed module of that name."""
    sys.meta_path.insert(0, _StandInFinder(names))


# ------------------------------------------------------------ the training run

# A few matrices (one embedding-like, taller than wide, one wider than tall), a
# bias and a norm scale, named as flax names them.
SHAPES = {
    "embed": {"embedding": (32, 8)},
    "dense": {"kernel": (8, 12), "bias": (12,)},
    "head": {"kernel": (12, 6)},
    "norm": {"scale": (8,)},
}


def tree_from_shapes(shapes, seed: int, scale: float = 1.0):
    import jax
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(seed)
    is_shape = lambda x: isinstance(x, tuple)  # noqa: E731
    leaves, treedef = jax.tree.flatten(shapes, is_leaf=is_shape)
    arrays = [
        jnp.asarray(scale * rng.standard_normal(s), dtype=jnp.float32) for s in leaves
    ]
    return jax.tree.unflatten(treedef, arrays)


def params(shapes=None):
    return tree_from_shapes(SHAPES if shapes is None else shapes, seed=0)


def gradients(step: int, params_like):
    """The fixed gradient of ``step`` (1-based), one seed per step."""
    import jax

    shapes = jax.tree.map(lambda x: tuple(x.shape), params_like)
    return tree_from_shapes(shapes, seed=1000 + step, scale=0.1)


@dataclasses.dataclass
class Case:
    """One configuration: the framework's optimizer and how a step runs.

    ``tx`` alone trains with ``tx.init``, ``tx.update`` and ``apply_updates``.
    ``init``/``step`` replace those where the framework drives the optimizer
    itself (a flax TrainState, t5x's Optimizer). ``grads`` replaces the fixed
    gradients (a spike, a NaN); ``probe`` records more per step (what the
    framework reads back from the state).
    """

    tx: Any = None
    params: Any = None
    init: Callable | None = None
    step: Callable | None = None
    grads: Callable | None = None
    probe: Callable | None = None
    jit: bool = True
    context: Callable | None = None  # e.g. a device mesh the framework expects


def _default_step(tx):
    def step(params, grads, state):
        import optax

        updates, state = tx.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    return step


def run(case: Case) -> dict:
    with case.context() if case.context else contextlib.nullcontext():
        return _run(case)


def _run(case: Case) -> dict:
    import jax

    p = case.params if case.params is not None else params()
    init = case.init or case.tx.init
    step = case.step or _default_step(case.tx)
    if case.jit:
        step = jax.jit(step)
    grads = case.grads or gradients
    state = init(p)
    # Which library ``optax`` named in this process, for the parent to check.
    optax = sys.modules["optax"]
    record = {"optax is": optax.__name__, "optax file": optax.__file__}
    record.update({"state 0": describe(state), "steps": []})
    for i in range(1, STEPS + 1):
        p, state = step(p, grads(i, p), state)
        seen = {"params": describe(p), "state": describe(state)}
        if case.probe is not None:
            seen["probe"] = describe(case.probe(state))
        record["steps"].append(seen)
    return record


# ------------------------------------------------------------ describing trees


def describe(tree) -> Any:
    """A tree as plain data: ``("node", type name, [(key, child)])`` for every
    pytree node (a NamedTuple, dict, OrderedDict, None, a registered class),
    ``("leaf", kind, dtype, shape, value)`` for arrays and numbers, and
    ``("object", type name)`` for any other leaf."""
    import jax
    import numpy as np

    children = jax.tree_util.tree_flatten_with_path(
        tree, is_leaf=lambda x: x is not tree
    )
    pairs, treedef = children
    if treedef.num_nodes > 1 or treedef.num_leaves == 0:
        items = [(jax.tree_util.keystr(path), describe(child)) for path, child in pairs]
        return ("node", type(tree).__name__, items)
    if isinstance(tree, jax.Array | np.ndarray | np.generic | int | float | bool):
        kind = "jax" if isinstance(tree, jax.Array) else type(tree).__name__
        value = np.asarray(tree)
        return ("leaf", kind, str(value.dtype), value.shape, value)
    if isinstance(tree, str):
        return ("object", f"str {tree!r}")
    return ("object", type(tree).__name__)
