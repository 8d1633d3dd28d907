"""Hyperparameters: schedules, the one resolver, and construction-time checks.

Every numeric hyperparameter of a gradax transformation may be a number, an
array or a schedule. Transformations never do arithmetic on the raw field:
the base class resolves schedules once per update (see ``_core``), and the
checks here validate plain numbers when the object is built.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from ._pytree import Module, static_field


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
    """Wraps a plain callable ``count -> value`` so it can live in a pytree.

    The function is static: two wrappers are equal only when they hold the same
    function object.
    """

    fn: Callable[[Any], Any] = static_field()

    def __call__(self, count: Any) -> Any:
        return self.fn(count)

    def __repr__(self) -> str:
        return f"FunctionSchedule({getattr(self.fn, '__name__', self.fn)!s})"


class StatefulSchedule(Module):
    """A schedule with its own state (for ``inject_stateful_hyperparams``).

    Subclasses implement ``init() -> state``, ``update(state, **extra_args) ->
    state`` and ``__call__(state, **extra_args) -> value``, as in optax.
    """

    def init(self) -> Any:
        raise NotImplementedError

    def update(self, state: Any, **extra_args: Any) -> Any:
        raise NotImplementedError

    def __call__(self, state: Any, **extra_args: Any) -> Any:
        raise NotImplementedError


def is_schedule(value: Any) -> bool:
    """Whether ``value`` is a step-count schedule (as opposed to a number)."""
    return isinstance(value, Schedule)


def as_hyperparameter(value: Any) -> Any:
    """Canonical form of a hyperparameter: plain callables become schedules."""
    if isinstance(value, Module) or not callable(value):
        return value
    return FunctionSchedule(value)


def resolve(value: Any, count: Any) -> Any:
    """The value of a hyperparameter at step ``count``."""
    if isinstance(value, Schedule):
        return value(count)
    return value


def _concrete_values(value: Any) -> np.ndarray | None:
    """The numbers in ``value`` if they are known now, else None."""
    if value is None or isinstance(value, (Module, jax.core.Tracer)):
        return None
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float, np.number, np.ndarray)):
        return np.asarray(value)
    # JAX arrays are not read back: that would sync with the device, and they
    # are how inject_hyperparams passes values already rounded to a dtype.
    return None


def check_range(
    name: str,
    value: Any,
    low: float = -math.inf,
    high: float = math.inf,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> None:
    """Raise ValueError naming ``name`` if a concrete ``value`` is out of range.

    Schedules, tracers and None are not checked (they are not known yet).
    """
    numbers = _concrete_values(value)
    if numbers is None:
        return
    if np.iscomplexobj(numbers):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    too_low = numbers <= low if low_open else numbers < low
    too_high = numbers >= high if high_open else numbers > high
    if np.any(np.isnan(numbers)) or np.any(too_low) or np.any(too_high):
        left = "(" if low_open else "["
        right = ")" if high_open else "]"
        raise ValueError(
            f"{name} must be in {left}{low:g}, {high:g}{right}, got {value!r}"
        )


def check_nonnegative(name: str, value: Any) -> None:
    """``value >= 0``."""
    check_range(name, value, 0.0)


def check_positive(name: str, value: Any) -> None:
    """``value > 0``."""
    check_range(name, value, 0.0, low_open=True)


def check_decay(name: str, value: Any) -> None:
    """A decay rate in ``[0, 1)``, like Adam's b1 or a momentum."""
    check_range(name, value, 0.0, 1.0, high_open=True)


def check_positive_int(name: str, value: Any, *, allow_zero: bool = False) -> None:
    """A Python integer that is >= 1 (or >= 0)."""
    low = 0 if allow_zero else 1
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    if value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
