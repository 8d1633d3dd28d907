"""The gradient-transformation protocol and the guarantees every one keeps.

A transformation is an immutable pytree (:class:`GradientTransformation`) with
``init(params)`` and ``update(updates, state, params=None, **extra_args)``, the
protocol optax speaks. The base class wraps every subclass's ``init`` and
``update`` once, at class creation, so that all transformations share:

- schedule resolution: a hyperparameter field holding a schedule is replaced by
  its value at the current step before the subclass's code runs, with the step
  count kept in a :class:`ScheduleState` around the subclass's own state;
- state stability: ``update`` returns state with exactly the tree structure,
  shapes, dtypes and weak types it was given, and updates with the dtypes of
  the incoming gradients;
- clear errors when ``updates`` and ``params`` have different trees.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from . import _hyper
from ._pytree import Module, static_field
from ._sharding import shard_state_like_params

Params = Any
"""A pytree of parameters (arrays at the leaves)."""
Updates = Any
"""A pytree of gradients or updates with the same structure as the parameters."""
OptState = Any
"""A transformation's state: any pytree that ``init`` returns."""

_INT32_MAX = np.iinfo(np.int32).max


class EmptyState(NamedTuple):
    """State of a transformation that keeps none."""


class ScheduleState(NamedTuple):
    """Wraps a transformation's state when some hyperparameter is a schedule."""

    count: jax.Array  # int32 scalar: number of updates done
    inner_state: Any


def safe_increment(count: jax.Array) -> jax.Array:
    """``count + 1`` that saturates instead of overflowing its integer dtype."""
    count = jnp.asarray(count)
    top = jnp.iinfo(count.dtype).max
    return jnp.where(count < top, count + 1, top).astype(count.dtype)


def zero_count() -> jax.Array:
    """A fresh int32 step counter."""
    return jnp.zeros([], jnp.int32)


# ----------------------------------------------------------------------------
# Tree checks with errors that name a path.


def tree_difference(a: Any, b: Any, name_a: str, name_b: str) -> str | None:
    """Describe where two trees differ in structure, or None if they match."""
    leaves_a, def_a = jax.tree_util.tree_flatten_with_path(a)
    leaves_b, def_b = jax.tree_util.tree_flatten_with_path(b)
    if def_a == def_b:
        return None
    paths_a = [jax.tree_util.keystr(p) for p, _ in leaves_a]
    paths_b = [jax.tree_util.keystr(p) for p, _ in leaves_b]
    set_a, set_b = set(paths_a), set(paths_b)
    for path in paths_a:
        if path not in set_b:
            return f"{name_a} has a leaf at {path or '<root>'} that {name_b} lacks"
    for path in paths_b:
        if path not in set_a:
            return f"{name_b} has a leaf at {path or '<root>'} that {name_a} lacks"
    return (
        f"{name_a} and {name_b} have the same leaf paths but different container "
        f"types: {def_a} vs {def_b}"
    )


def check_same_structure(a: Any, b: Any, name_a: str, name_b: str) -> None:
    """Raise ValueError naming the first differing path of two trees."""
    message = tree_difference(a, b, name_a, name_b)
    if message is not None:
        raise ValueError(f"Tree mismatch: {message}.")


def _cast(x: Any, dtype: np.dtype, weak_type: bool) -> jax.Array:
    """Cast ``x`` to ``dtype`` with the given weak type."""
    if weak_type:
        try:  # JAX has no public way to make a weakly typed array of a dtype.
            from jax._src.lax.lax import _convert_element_type

            return _convert_element_type(x, np.dtype(dtype), weak_type=True)
        except (ImportError, TypeError, AssertionError):
            pass
    return jax.lax.convert_element_type(x, dtype)


def is_weakly_typed(x: Any) -> bool:
    """Whether an array or tracer is weakly typed (came from a Python scalar)."""
    return bool(getattr(x, "weak_type", False))


def _aval(x: Any) -> tuple[tuple[int, ...], Any, bool] | None:
    if not hasattr(x, "dtype") or not hasattr(x, "shape"):
        return None
    return tuple(x.shape), x.dtype, is_weakly_typed(x)


def match_state(new_state: Any, old_state: Any, owner: str) -> Any:
    """Return ``new_state`` cast to the structure/dtypes/weak types of the old."""
    new_leaves, new_def = jax.tree_util.tree_flatten_with_path(new_state)
    old_leaves, old_def = jax.tree_util.tree_flatten(old_state)
    if new_def != old_def:
        message = tree_difference(new_state, old_state, "new state", "old state")
        raise TypeError(f"{owner}.update changed the structure of its state: {message}")
    out = []
    for (path, new), old in zip(new_leaves, old_leaves, strict=True):
        want, have = _aval(old), _aval(new)
        if want is None or have is None or want == have:
            out.append(new)
            continue
        if want[0] != have[0]:
            raise TypeError(
                f"{owner}.update changed the shape of state leaf "
                f"{jax.tree_util.keystr(path)} from {want[0]} to {have[0]}"
            )
        out.append(_cast(new, want[1], want[2]))
    return jax.tree_util.tree_unflatten(new_def, out)


def match_dtypes(new_updates: Any, old_updates: Any) -> Any:
    """Cast updates back to the dtypes of the gradients they came from."""
    new_leaves, new_def = jax.tree_util.tree_flatten(new_updates)
    old_leaves, old_def = jax.tree_util.tree_flatten(old_updates)
    if new_def != old_def:
        return new_updates
    out = []
    for new, old in zip(new_leaves, old_leaves, strict=True):
        old_dtype = getattr(old, "dtype", None)
        if old_dtype is None or getattr(new, "dtype", old_dtype) == old_dtype:
            out.append(new)
        elif jnp.iscomplexobj(new) and not jnp.iscomplexobj(old):
            # A real gradient must not get an imaginary part; keep it visible.
            out.append(new)
        else:
            out.append(jax.lax.convert_element_type(new, old_dtype))
    return jax.tree_util.tree_unflatten(new_def, out)


# ----------------------------------------------------------------------------
# The base class.


def _scheduled_fields(tx: GradientTransformation) -> tuple[str, ...]:
    return tuple(
        name
        for name in tx._hyperparameter_fields()
        if _hyper.is_schedule(getattr(tx, name))
    )


def _resolved(tx: GradientTransformation, names: tuple[str, ...], count: Any):
    values = {name: _hyper.resolve(getattr(tx, name), count) for name in names}
    return tx._with_fields(**values)


# How many guarded ``init`` calls are running on this thread: only the
# outermost one ties the state's shardings to the parameters'.
_init_depth = threading.local()


def _wrap_init(raw_init: Callable) -> Callable:
    @functools.wraps(raw_init)
    def init(self, params):
        depth = getattr(_init_depth, "value", 0)
        _init_depth.value = depth + 1
        try:
            scheduled = _scheduled_fields(self)
            if not scheduled:
                state = raw_init(self, params)
            else:
                count = zero_count()
                inner = raw_init(_resolved(self, scheduled, count), params)
                state = ScheduleState(count=count, inner_state=inner)
        finally:
            _init_depth.value = depth
        if depth == 0:
            state = shard_state_like_params(state, params)
        return state

    init._gradax_guarded = True
    return init


def _wrap_update(raw_update: Callable) -> Callable:
    @functools.wraps(raw_update)
    def update(self, updates, state, params=None, **extra_args):
        if params is not None:
            check_same_structure(
                updates, self._params_like_updates(params), "updates", "params"
            )
        scheduled = _scheduled_fields(self)
        if scheduled:
            if not isinstance(state, ScheduleState):
                raise TypeError(
                    f"{self._public_name()} has scheduled hyperparameters "
                    f"{scheduled} but was given a state not made by its init."
                )
            resolved = _resolved(self, scheduled, state.count)
            new_updates, inner = raw_update(
                resolved, updates, state.inner_state, params, **extra_args
            )
            new_state = ScheduleState(safe_increment(state.count), inner)
        else:
            new_updates, new_state = raw_update(
                self, updates, state, params, **extra_args
            )
        new_state = match_state(new_state, state, self._public_name())
        return match_dtypes(new_updates, updates), new_state

    update._gradax_guarded = True
    return update


class GradientTransformation(Module):
    """Base class of gradax transformations (the optax init/update protocol).

    Subclasses are frozen dataclasses. Fields are numeric hyperparameters
    (pytree leaves; each may also be a schedule) unless declared with
    ``static_field()``. Subclasses implement ``init`` and ``update``; the
    base class wraps both to resolve schedules and keep state stable.
    """

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        for name, wrap in (("init", _wrap_init), ("update", _wrap_update)):
            method = cls.__dict__.get(name)
            if method is not None and not getattr(method, "_gradax_guarded", False):
                setattr(cls, name, wrap(method))

    def __post_init__(self) -> None:
        for name in self._data_fields:
            value = getattr(self, name)
            if _is_foreign_transformation(value):
                object.__setattr__(self, name, Foreign(value))
            else:
                object.__setattr__(self, name, _hyper.as_hyperparameter(value))
        super().__post_init__()

    # Fields holding schedules the subclass evaluates itself, at a step count
    # of its own (e.g. MultiSteps' every_k_schedule of the gradient step).
    _self_resolved = ()

    @classmethod
    def _hyperparameter_fields(cls) -> tuple[str, ...]:
        """Data fields resolved centrally at the update count."""
        return tuple(n for n in cls._data_fields if n not in cls._self_resolved)

    def _params_like_updates(self, params: Params) -> Params:
        """The part of ``params`` that must have the updates' tree."""
        return params

    def init(self, params: Params) -> OptState:
        raise NotImplementedError

    def update(
        self,
        updates: Updates,
        state: OptState,
        params: Params | None = None,
        **extra_args: Any,
    ) -> tuple[Updates, OptState]:
        raise NotImplementedError


GradientTransformationExtraArgs = GradientTransformation


class Alias(GradientTransformation):
    """A transformation defined as a composition of others (e.g. ``adamw``).

    It keeps the user's hyperparameters as its own fields, so ``repr`` and
    equality show them, and builds the composition at each init/update.
    """

    def build(self) -> GradientTransformation:
        raise NotImplementedError

    def init(self, params):
        return self.build().init(params)

    def update(self, updates, state, params=None, **extra_args):
        return self.build().update(updates, state, params, **extra_args)


# ----------------------------------------------------------------------------
# Transformations from other libraries (optax) inside gradax.


def _is_foreign_transformation(value: Any) -> bool:
    return (
        not isinstance(value, Module)
        and callable(getattr(value, "init", None))
        and callable(getattr(value, "update", None))
    )


def _accepts_extra_args(fn: Callable) -> bool:
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


class Foreign(GradientTransformation):
    """Wraps a transformation from another library (e.g. optax) for gradax.

    The wrapped object is static: its hyperparameters are closed over, as in
    the library it came from. Extra keyword arguments are dropped when its
    update does not accept them.
    """

    tx: Any = static_field()

    def init(self, params):
        return self.tx.init(params)

    def update(self, updates, state, params=None, **extra_args):
        if extra_args and not _accepts_extra_args(self.tx.update):
            extra_args = {}
        return self.tx.update(updates, state, params, **extra_args)


def as_transformation(value: Any, name: str = "transformation") -> Any:
    """``value`` as a gradax transformation; optax ones are wrapped."""
    if isinstance(value, GradientTransformation):
        return value
    if _is_foreign_transformation(value):
        return Foreign(value)
    raise TypeError(
        f"{name} must be a gradient transformation (an object with init and "
        f"update), got {type(value).__name__}: {value!r}"
    )


def with_extra_args_support(tx: Any) -> GradientTransformation:
    """Make ``tx`` accept (and ignore) extra keyword arguments in ``update``."""
    return as_transformation(tx, "tx")


# ----------------------------------------------------------------------------
# Small transformations and parameter updates.


class identity(GradientTransformation):
    """Leaves updates unchanged."""

    def init(self, params):
        del params
        return EmptyState()

    def update(self, updates, state, params=None, **extra_args):
        return updates, state


class set_to_zero(GradientTransformation):
    """Replaces every update with zeros (used to freeze parameters)."""

    def init(self, params):
        del params
        return EmptyState()

    def update(self, updates, state, params=None, **extra_args):
        return jax.tree.map(jnp.zeros_like, updates), state


class stateless(GradientTransformation):
    """A transformation from a function ``f(updates, params) -> updates``.

    Args:
      f: called with the whole updates tree and the params (or None).
    """

    f: Callable[[Updates, Params | None], Updates] = static_field()

    def init(self, params):
        del params
        return EmptyState()

    def update(self, updates, state, params=None, **extra_args):
        return self.f(updates, params), state


class stateless_with_tree_map(GradientTransformation):
    """A transformation applying ``f(g, p) -> u`` to each leaf.

    Args:
      f: called per leaf with the gradient and the parameter (or None).
    """

    f: Callable[[jax.Array, jax.Array | None], jax.Array] = static_field()

    def init(self, params):
        del params
        return EmptyState()

    def update(self, updates, state, params=None, **extra_args):
        if params is None:
            return jax.tree.map(lambda g: self.f(g, None), updates), state
        return jax.tree.map(self.f, updates, params), state


def apply_updates(params: Params, updates: Updates) -> Params:
    """Add updates to parameters, keeping each parameter's dtype.

    Args:
      params: the parameters.
      updates: a tree with the same structure (None leaves are skipped).

    Returns:
      ``params + updates``, leaf by leaf, cast to the parameters' dtypes (and
      weak types).

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> gradax.apply_updates({"w": jnp.ones(2)}, {"w": jnp.ones(2)})["w"]
      Array([2., 2.], dtype=float32)
    """
    check_same_structure(updates, params, "updates", "params")

    def add(p, u):
        if p is None:
            return None
        p = jnp.asarray(p)
        # Keep a weakly typed parameter weak, so a jitted step taking the
        # result does not retrace on its second call.
        return _cast(jnp.asarray(p + u), p.dtype, is_weakly_typed(p))

    return jax.tree.map(add, params, updates, is_leaf=lambda x: x is None)


def incremental_update(new_tensors: Any, old_tensors: Any, step_size: Any) -> Any:
    """Polyak averaging: ``step_size * new + (1 - step_size) * old``."""
    check_same_structure(new_tensors, old_tensors, "new_tensors", "old_tensors")
    return jax.tree.map(
        lambda new, old: (
            None if new is None else step_size * new + (1.0 - step_size) * old
        ),
        new_tensors,
        old_tensors,
        is_leaf=lambda x: x is None,
    )


def periodic_update(
    new_tensors: Any, old_tensors: Any, steps: Any, update_period: int
) -> Any:
    """``new_tensors`` every ``update_period`` steps, else ``old_tensors``."""
    check_same_structure(new_tensors, old_tensors, "new_tensors", "old_tensors")
    return jax.lax.cond(
        jnp.mod(steps, update_period) == 0,
        lambda _: new_tensors,
        lambda _: old_tensors,
        None,
    )
