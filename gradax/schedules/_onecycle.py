"""One-cycle schedules: up from a low value to a peak, then down far below it."""

from __future__ import annotations

from typing import Any

from .._core.declarations import ANY, POSITIVE, hyper
from .._core.pytree import Module
from ._basic import piecewise_interpolate_bounds, piecewise_interpolate_value
from ._util import FRACTION, PERIOD_STEPS, ScheduleBase, known_numbers


def _merged(pairs):
    """`pairs` (step, scale) as sorted steps and scales, the later pair winning.

    A dict, like the user-facing piecewise_interpolate_schedule: when two
    boundaries round to the same step, the later scale replaces the earlier.
    """
    merged = {}
    for step, scale in pairs:
        merged[step] = scale
    steps = tuple(sorted(merged))
    return steps, tuple(merged[s] for s in steps)


class _OneCycle(ScheduleBase):
    """What the two one-cycle schedules share: all but their ramps and steps.

    The value starts at `peak_value / div_factor` and reaches `peak_value`
    at step `int(pct_start * transition_steps)`; each schedule's
    `_descent(div, final_div)` gives the later (step, scale) pairs that
    multiply the start, all joined by ramps of kind `_kind` ("linear" or
    "cosine").
    """

    _abstract = True

    transition_steps: int = hyper(valid=PERIOD_STEPS, static=True)
    peak_value: Any = hyper(valid=ANY, schedule=False)
    pct_start: float = hyper(default=0.3, valid=FRACTION, static=True)

    # The divisors (see `_Divisors`) and `_descent`/`_kind` are each schedule's.
    def _pairs(self, div, final_div):
        this: Any = self
        peak = (int(self.pct_start * self.transition_steps), div)
        return _merged((peak, *this._descent(div, final_div)))

    def _evaluate(self, count):
        this: Any = self
        init_value = this.peak_value / this.div_factor
        steps, scales = self._pairs(this.div_factor, this.final_div_factor)
        return piecewise_interpolate_value(count, this._kind, init_value, steps, scales)

    def bounds(self):
        this: Any = self
        known = known_numbers(this.peak_value, this.div_factor, this.final_div_factor)
        if known is None:
            return None
        peak, div, final_div = known
        return piecewise_interpolate_bounds(peak / div, *self._pairs(div, final_div))


class _PctFinal(Module):
    """The field of linear_onecycle_schedule alone, between the shared ones."""

    _abstract = True

    pct_final: float = hyper(default=0.85, valid=FRACTION, static=True)


class _Divisors(Module):
    """The last two fields of both one-cycle schedules.

    The fields of a class come from its bases, the last base first, so a
    schedule's bases `(_Divisors, ..., _OneCycle)` put these after the others.
    """

    _abstract = True

    div_factor: Any = hyper(default=25.0, valid=POSITIVE, schedule=False)
    final_div_factor: Any = hyper(default=10000.0, valid=POSITIVE, schedule=False)


class linear_onecycle_schedule(_Divisors, _PctFinal, _OneCycle):
    """One cycle of linear ramps: up to `peak_value`, back down, then lower.

    With :math:`T` = `transition_steps`, the value goes linearly through

    ============================  ======================================
    step                          value
    ============================  ======================================
    0                             `peak_value / div_factor`
    `int(pct_start * T)`        `peak_value`
    `int(pct_final * T)`        `peak_value / div_factor`
    :math:`T` and after           `peak_value / div_factor / final_div_factor`
    ============================  ======================================

    Args:
      transition_steps: the length :math:`T` of the cycle, an integer >= 1.
      peak_value: the highest value.
      pct_start: the fraction of the cycle spent going up, in [0, 1].
      pct_final: the fraction of the cycle at which the way down ends, in
        [0, 1].
      div_factor: the initial value is `peak_value / div_factor`; > 0.
      final_div_factor: the value from step :math:`T` on is the initial one
        divided by this, reached by a last ramp from `int(pct_final * T)`; > 0.

    Returns:
      A schedule, called with the step count.

    Example:
      >>> import gradax
      >>> schedule = gradax.linear_onecycle_schedule(
      ...     100, 1.0, pct_final=0.6, div_factor=10.0)
      >>> [round(float(schedule(t)), 4) for t in (0, 30, 60, 80, 100)]
      [0.1, 1.0, 0.1, 0.05, 0.0]

    References:
      Smith and Topin, Super-Convergence: Very Fast Training of Neural
      Networks Using Large Learning Rates, 2017 (arXiv:1708.07120).
    """

    _kind = "linear"

    def _descent(self, div, final_div):
        steps = self.transition_steps
        return ((int(self.pct_final * steps), 1.0 / div), (steps, 1.0 / final_div))


class cosine_onecycle_schedule(_Divisors, _OneCycle):
    """One cycle of half cosines: up to `peak_value`, then far below it.

    With :math:`T` = `transition_steps`, the value follows a half cosine from
    `peak_value / div_factor` at step 0 up to `peak_value` at step
    `int(pct_start * T)`, then another down to
    `peak_value / (div_factor * final_div_factor)` at step :math:`T`, where
    it stays.

    Args:
      transition_steps: the length :math:`T` of the cycle, an integer >= 1.
      peak_value: the highest value.
      pct_start: the fraction of the cycle spent going up, in [0, 1].
      div_factor: the initial value is `peak_value / div_factor`; > 0.
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

    _kind = "cosine"

    def _descent(self, div, final_div):
        return ((int(self.transition_steps), 1.0 / (div * final_div)),)
