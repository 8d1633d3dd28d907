"""Hyperparameters: schedules, the one resolver, and construction-time checks.

Every numeric hyperparameter of a gradax transformation may be a number, an
array or a schedule. Transformations never do arithmetic on the raw field:
the base class resolves schedules once per update (see `_protocol`), and the
checks here validate plain numbers when the object is built.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from .pytree import Module, static_field


class Schedule(Module):
    """A function of the step count that is also a pytree of its numbers."""

    def __call__(self, count: Any) -> Any:
        raise NotImplementedError

    def bounds(self) -> tuple[float, float] | None:
        """The smallest and largest value over all steps, or None if unknown.

        Read from the schedule's arguments, without evaluating it (nothing
        touches a device at construction); a declared hyperparameter holding
        the schedule checks these against its valid range.
        """
        return None


class FunctionSchedule(Schedule):
    """Wraps a plain callable `count -> value` so it can live in a pytree.

    The function is static: two wrappers are equal only when they hold the same
    function object.

    Args:
      fn: the schedule, a callable of the step count.
    """

    fn: Callable[[Any], Any] = static_field()

    def __call__(self, count: Any) -> Any:
        return self.fn(count)

    def __repr__(self) -> str:
        return f"FunctionSchedule({getattr(self.fn, '__name__', self.fn)!s})"


class TreeFunctionSchedule(FunctionSchedule):
    """A schedule that is itself a pytree of arrays, held as a pytree child.

    `jax.tree_util.Partial(fn, peak=jnp.asarray(0.1))` and an equinox
    module with array fields are callables whose numbers are leaves. Held
    static, as a plain function is, those arrays would be hashed by identity
    (a new array recompiles a `jit` taking the optimizer), never reached by
    `jax.tree.map`, and left behind as tracers by an optimizer built under
    `jit`. Here they are the optimizer's leaves, as a number given directly is.

    Args:
      fn: the schedule, a callable of the step count whose pytree leaves are
        arrays and numbers.
    """

    fn: Callable[[Any], Any]


def _is_function_of_arrays(value: Any) -> bool:
    """Whether callable `value` is a pytree node holding an array, and only
    numbers: what JAX can trace as a `jit` argument. A Python bool keeps it
    static: a flag the function may branch on in Python."""
    leaves, treedef = jax.tree_util.tree_flatten(value)
    if jax.tree_util.treedef_is_leaf(treedef):
        return False
    numeric = (jax.Array, np.ndarray, np.generic, int, float)
    return any(isinstance(x, (jax.Array, np.ndarray)) for x in leaves) and all(
        isinstance(x, numeric) and not isinstance(x, bool) for x in leaves
    )


class StatefulSchedule(Module):
    """A schedule with its own state (for `inject_stateful_hyperparams`).

    Subclasses implement `init() -> state`, `update(state, **extra_args) ->
    state` and `__call__(state, **extra_args) -> value`, as in optax.
    """

    def init(self) -> Any:
        raise NotImplementedError

    def update(self, state: Any, **extra_args: Any) -> Any:
        raise NotImplementedError

    def __call__(self, state: Any, **extra_args: Any) -> Any:
        raise NotImplementedError


def is_schedule(value: Any) -> bool:
    """Whether `value` is a step-count schedule (as opposed to a number)."""
    return isinstance(value, Schedule)


def as_hyperparameter(value: Any) -> Any:
    """Canonical form of a hyperparameter: plain callables become schedules."""
    if isinstance(value, Module) or not callable(value):
        return value
    if _is_function_of_arrays(value):
        return TreeFunctionSchedule(value)
    return FunctionSchedule(value)


def resolve(value: Any, count: Any) -> Any:
    """The value of a hyperparameter at step `count`."""
    if isinstance(value, Schedule):
        return value(count)
    return value
