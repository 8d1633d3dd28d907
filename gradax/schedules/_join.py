"""Schedules run one after another, and warmups in front of a schedule."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from .._core.declarations import ANY, hyper
from .._core.hyper import Schedule, as_hyperparameter
from .._core.pytree import field, static_field
from ._basic import (
    exponential_bounds,
    exponential_value,
    polynomial_bounds,
    polynomial_value,
)
from ._util import (
    DECAY_RATE,
    STEPS,
    WARMUP_STEPS,
    ScheduleBase,
    hull,
    hull_of_bounds,
    join,
    known_numbers,
    step_number,
)


def _as_schedules(value: Any, name: str) -> tuple:
    """Converter of `schedules`: a tuple of schedules (gradax ones kept as trees)."""
    if not isinstance(value, Sequence) or isinstance(value, str):
        raise ValueError(f"{name} must be a sequence of schedules, got {value!r}")
    schedules = tuple(as_hyperparameter(s) for s in value)
    for i, schedule in enumerate(schedules):
        if not isinstance(schedule, Schedule):
            raise ValueError(
                f"{name}[{i}] must be a schedule (a callable of the step "
                f"count), got {schedule!r}"
            )
    return schedules


def _as_steps(value: Any, name: str) -> tuple:
    """Converter of `boundaries`: a tuple of plain step numbers.

    A sequence, or a one-dimensional NumPy or JAX array (read once, here:
    the boundaries are static), as optax iterates over either.
    """
    if isinstance(value, (np.ndarray, jax.Array)) and np.ndim(value) == 1:
        value = list(np.asarray(value))
    if not isinstance(value, Sequence) or isinstance(value, str):
        raise ValueError(f"{name} must be a sequence of steps, got {value!r}")
    return tuple(step_number(f"{name}[{i}]", b) for i, b in enumerate(value))


class join_schedules(ScheduleBase):
    """Runs schedules one after another, switching at given steps.

    With boundaries :math:`b_1 < \\dots < b_{n-1}` (and :math:`b_0 = 0`),

    .. math:: f(t) = f_i(t - b_i) \\quad \\text{for } b_i \\le t < b_{i+1}

    (and :math:`f_0(t)` before :math:`b_1`): each schedule counts steps from
    its own start.

    Args:
      schedules: the :math:`n` schedules, in order. gradax schedules stay
        pytrees (their numbers are leaves); other callables (optax schedules,
        functions) are wrapped as static functions.
      boundaries: the :math:`n - 1` steps at which the next schedule takes
        over. They are static. As in optax, `boundaries[i]` starts
        `schedules[i + 1]`: a boundary beyond the last schedule is ignored
        (`n` boundaries, as some training stacks pass, work) and a
        schedule without a boundary never runs; either warns.

    Returns:
      A schedule, called with the step count.

    Example:
      >>> import gradax
      >>> schedule = gradax.join_schedules(
      ...     [gradax.linear_schedule(0.0, 1.0, 10), gradax.constant_schedule(1.0)],
      ...     boundaries=[10])
      >>> [float(schedule(t)) for t in (0, 5, 10, 100)]
      [0.0, 0.5, 1.0, 1.0]
    """

    schedules: Sequence[Callable[[Any], Any]] = field(converter=_as_schedules)
    boundaries: Sequence[int] = static_field(converter=_as_steps)

    def __check_init__(self):
        if not self.schedules:
            raise ValueError("schedules must hold at least one schedule, got none")

    def _used(self) -> tuple[tuple, tuple]:
        """The schedules that run and their boundaries (optax's pairing)."""
        n = min(len(self.boundaries), len(self.schedules) - 1)
        return tuple(self.schedules[: n + 1]), tuple(self.boundaries[:n])

    def _unusual_values(self) -> list[tuple[str, str]]:
        notes = super()._unusual_values()
        extra = len(self.boundaries) - (len(self.schedules) - 1)
        if extra > 0:
            ignored = list(self.boundaries[len(self.boundaries) - extra :])
            notes.append(
                (
                    f"boundaries={list(self.boundaries)!r} for "
                    f"{len(self.schedules)} schedules",
                    f"boundaries[i] starts schedules[i + 1], so {ignored!r} "
                    "(beyond the last schedule) is ignored, as in optax; "
                    "pass one boundary fewer than schedules",
                )
            )
        elif extra < 0:
            notes.append(
                (
                    f"boundaries={list(self.boundaries)!r} for "
                    f"{len(self.schedules)} schedules",
                    f"schedules[{len(self.boundaries) + 1}:] never run (no "
                    "boundary starts them), as in optax; pass one boundary "
                    "per schedule after the first",
                )
            )
        return notes

    def _evaluate(self, count):
        schedules, boundaries = self._used()
        return join(count, schedules, boundaries)

    def bounds(self):
        # Each part's bounds hold whatever stretch of it runs.
        return hull_of_bounds(self._used()[0])


class warmup_constant_schedule(ScheduleBase):
    """Linear warmup from `init_value` to `peak_value`, then constant.

    With :math:`W` = `warmup_steps`,

    .. math:: f(t) = v_0 + (v_p - v_0) \\, \\mathrm{clip}(t, 0, W) / W

    (the constant `init_value` when :math:`W \\le 0`, as in optax).

    Args:
      init_value: the value :math:`v_0` at step 0.
      peak_value: the value :math:`v_p` from `warmup_steps` on.
      warmup_steps: the length :math:`W` of the warmup, an integer >= 0.

    Returns:
      A schedule, called with the step count.

    Example:
      >>> import gradax
      >>> schedule = gradax.warmup_constant_schedule(0.0, 1.0, warmup_steps=4)
      >>> [float(schedule(t)) for t in (0, 1, 4, 100)]
      [0.0, 0.25, 1.0, 1.0]
    """

    init_value: Any = hyper(valid=ANY, schedule=False)
    peak_value: Any = hyper(valid=ANY, schedule=False)
    warmup_steps: int = hyper(valid=WARMUP_STEPS, static=True)

    def _evaluate(self, count):
        return polynomial_value(
            count, self.init_value, self.peak_value, 1, self.warmup_steps, 0
        )

    def bounds(self):
        known = known_numbers(self.init_value, self.peak_value)
        if known is None:
            return None
        init, peak = known
        return polynomial_bounds(init, peak, 1.0, self.warmup_steps)


class warmup_exponential_decay_schedule(ScheduleBase):
    """Linear warmup to `peak_value`, then :class:`exponential_decay` from it.

    With :math:`W` = `warmup_steps`, :math:`s` = `transition_steps`,
    :math:`b` = `transition_begin` and :math:`r` = `decay_rate`,

    .. math::
        f(t) = \\begin{cases}
            v_0 + (v_p - v_0)\\, \\max(t, 0) / W & t < W \\\\
            v_p \\, r^{(t - W - b) / s} & t \\ge W
        \\end{cases}

    where the decay is delayed, rounded and bounded exactly as in
    :class:`exponential_decay`, counting steps from the end of the warmup.

    Args:
      init_value: the value :math:`v_0` at step 0.
      peak_value: the value :math:`v_p` at the end of the warmup.
      warmup_steps: the length :math:`W` of the warmup, an integer >= 0.
      transition_steps: the number of steps per factor of `decay_rate`, an
        integer.
      decay_rate: the factor :math:`r` per `transition_steps` steps, >= 0.
      transition_begin: steps after the warmup before the decay starts, an
        integer.
      staircase: decay in whole factors only.
      end_value: a bound the decaying value does not pass, or None.

    Returns:
      A schedule, called with the step count.

    Example:
      >>> import gradax
      >>> schedule = gradax.warmup_exponential_decay_schedule(
      ...     0.0, 1.0, warmup_steps=10, transition_steps=10, decay_rate=0.5,
      ...     staircase=True)
      >>> [float(schedule(t)) for t in (0, 5, 10, 15, 20, 25)]
      [0.0, 0.5, 1.0, 1.0, 0.5, 0.5]
    """

    init_value: Any = hyper(valid=ANY, schedule=False)
    peak_value: Any = hyper(valid=ANY, schedule=False)
    warmup_steps: int = hyper(valid=WARMUP_STEPS, static=True)
    transition_steps: int = hyper(valid=STEPS, static=True)
    decay_rate: Any = hyper(valid=DECAY_RATE, schedule=False)
    transition_begin: int = hyper(default=0, valid=STEPS, static=True)
    staircase: bool = static_field(default=False)
    end_value: Any = hyper(default=None, valid=ANY, schedule=False)

    def _evaluate(self, count):
        def warmup(t):
            return polynomial_value(
                t, self.init_value, self.peak_value, 1, self.warmup_steps, 0
            )

        def decay(t):
            return exponential_value(
                t,
                self.peak_value,
                self.transition_steps,
                self.decay_rate,
                self.transition_begin,
                self.staircase,
                self.end_value,
            )

        return join(count, (warmup, decay), (self.warmup_steps,))

    def bounds(self):
        decay = exponential_bounds(
            self.peak_value, self.transition_steps, self.decay_rate, self.end_value
        )
        if decay is None or self.warmup_steps <= 0:
            return decay
        known = known_numbers(self.init_value, self.peak_value)
        if known is None:
            return None
        init, peak = known
        return hull(*decay, *polynomial_bounds(init, peak, 1.0, 1))
