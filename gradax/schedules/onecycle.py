"""One-cycle schedules: up from a low value to a peak, then down far below it."""

from __future__ import annotations

from typing import Any

from .._declare import POSITIVE, hyper
from .._pytree import static_field
from ._util import ScheduleBase
from .basic import piecewise_interpolate_value


def _check_onecycle(schedule) -> None:
    if not schedule.transition_steps > 0:
        raise ValueError(
            f"transition_steps must be > 0, got {schedule.transition_steps!r}"
        )


def _interpolate(count, kind, init_value, pairs):
    """Interpolates through ``pairs`` (step, scale), the later pair winning."""
    # A dict, like the user-facing piecewise_interpolate_schedule: when two
    # boundaries round to the same step, the later scale replaces the earlier.
    merged = {}
    for step, scale in pairs:
        merged[step] = scale
    steps = sorted(merged)
    return piecewise_interpolate_value(
        count, kind, init_value, tuple(steps), tuple(merged[s] for s in steps)
    )


class linear_onecycle_schedule(ScheduleBase):
    """One cycle of linear ramps: up to ``peak_value``, back down, then lower.

    With :math:`T` = ``transition_steps``, the value goes linearly through

    ============================  ======================================
    step                          value
    ============================  ======================================
    0                             ``peak_value / div_factor``
    ``int(pct_start * T)``        ``peak_value``
    ``int(pct_final * T)``        ``peak_value / div_factor``
    :math:`T` and after           ``peak_value / div_factor / final_div_factor``
    ============================  ======================================

    Args:
      transition_steps: the length :math:`T` of the cycle; must be > 0.
      peak_value: the highest value.
      pct_start: the fraction of the cycle spent going up.
      pct_final: the fraction of the cycle at which the way down ends.
      div_factor: the initial value is ``peak_value / div_factor``; > 0.
      final_div_factor: the last value is the initial one divided by this; > 0.

    Returns:
      A schedule, called with the step count.

    Example:
      >>> import gradax
      >>> schedule = gradax.linear_onecycle_schedule(100, 1.0, div_factor=10.0)
      >>> [round(float(schedule(t)), 4) for t in (0, 30, 85, 100)]
      [0.1, 1.0, 0.1, 0.0]

    References:
      Smith and Topin, Super-Convergence: Very Fast Training of Neural
      Networks Using Large Learning Rates, 2017 (arXiv:1708.07120).
    """

    transition_steps: int = static_field()
    peak_value: Any = hyper(schedule=False)
    pct_start: float = static_field(0.3)
    pct_final: float = static_field(0.85)
    div_factor: Any = hyper(25.0, POSITIVE, schedule=False)
    final_div_factor: Any = hyper(10000.0, POSITIVE, schedule=False)

    _static_numbers = ("transition_steps", "pct_start", "pct_final")

    def _check(self):
        _check_onecycle(self)

    def _evaluate(self, count):
        steps = self.transition_steps
        return _interpolate(
            count,
            "linear",
            self.peak_value / self.div_factor,
            (
                (int(self.pct_start * steps), self.div_factor),
                (int(self.pct_final * steps), 1.0 / self.div_factor),
                (steps, 1.0 / self.final_div_factor),
            ),
        )


class cosine_onecycle_schedule(ScheduleBase):
    """One cycle of half cosines: up to ``peak_value``, then far below it.

    With :math:`T` = ``transition_steps``, the value follows a half cosine from
    ``peak_value / div_factor`` at step 0 up to ``peak_value`` at step
    ``int(pct_start * T)``, then another down to
    ``peak_value / (div_factor * final_div_factor)`` at step :math:`T`, where
    it stays.

    Args:
      transition_steps: the length :math:`T` of the cycle; must be > 0.
      peak_value: the highest value.
      pct_start: the fraction of the cycle spent going up.
      div_factor: the initial value is ``peak_value / div_factor``; > 0.
      final_div_factor: the last value is the initial one divided by this; > 0.

    Returns:
      A schedule, called with the step count.

    Example:
      >>> import gradax
      >>> schedule = gradax.cosine_onecycle_schedule(100, 1.0, div_factor=10.0)
      >>> [round(float(schedule(t)), 4) for t in (0, 15, 30, 100)]
      [0.1, 0.55, 1.0, 0.0]

    References:
      Smith and Topin, Super-Convergence: Very Fast Training of Neural
      Networks Using Large Learning Rates, 2017 (arXiv:1708.07120).
    """

    transition_steps: int = static_field()
    peak_value: Any = hyper(schedule=False)
    pct_start: float = static_field(0.3)
    div_factor: Any = hyper(25.0, POSITIVE, schedule=False)
    final_div_factor: Any = hyper(10000.0, POSITIVE, schedule=False)

    _static_numbers = ("transition_steps", "pct_start")

    def _check(self):
        _check_onecycle(self)

    def _evaluate(self, count):
        steps = self.transition_steps
        return _interpolate(
            count,
            "cosine",
            self.peak_value / self.div_factor,
            (
                (int(self.pct_start * steps), self.div_factor),
                (int(steps), 1.0 / (self.div_factor * self.final_div_factor)),
            ),
        )
