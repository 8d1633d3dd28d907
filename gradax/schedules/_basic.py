"""Constant, polynomial, piecewise and exponential schedules."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp

from .._core.declarations import (
    ANY,
    NONNEGATIVE,
    OneOf,
    Spec,
    hyper,
    validate,
)
from .._core.pytree import Module, field, static_field
from ._util import (
    DECAY_RATE,
    POWER,
    STEPS,
    ScheduleBase,
    concrete_scalar,
    hull,
    known_numbers,
    logger,
    select,
    step_number,
)

# --------------------------------------------------------------------------
# Formulas, shared with the composite schedules of the other files.
# --------------------------------------------------------------------------


def polynomial_value(count, init_value, end_value, power, steps, begin):
    """Polynomial interpolation from `init_value` to `end_value`."""
    if steps <= 0:
        return init_value
    begin = max(begin, 0)
    done = jnp.clip(count - begin, 0, steps)
    # Exactly 0 at the end: under jit XLA divides by multiplying with
    # 1 / steps, and ``1 - done / steps`` alone can then come out just below
    # 0 (overshooting end_value, or NaN for a fractional power) or above it.
    remaining = jnp.where(done >= steps, 0.0, 1 - done / steps)
    return (init_value - end_value) * (remaining**power) + end_value


def exponential_value(count, init_value, steps, rate, begin, staircase, end_value):
    """`init_value * rate ** ((count - begin) / steps)`, optionally bounded."""
    if steps <= 0:
        return init_value
    known_rate = concrete_scalar(rate)
    if known_rate is not None and known_rate == 0:
        return init_value
    begin = max(begin, 0)
    elapsed = count - begin
    exponent = elapsed / steps
    if staircase:
        exponent = jnp.floor(exponent)
    out = jnp.where(elapsed <= 0, init_value, init_value * jnp.power(rate, exponent))
    if end_value is not None:
        # A decaying schedule stops at end_value from above, a growing one
        # from below.
        out = select(
            rate < 1.0, jnp.maximum(out, end_value), jnp.minimum(out, end_value)
        )
    if known_rate is None:
        out = jnp.where(rate == 0, init_value, out)
    return out


def exponential_bounds(init_value, steps, rate, end_value):
    """Bounds of :func:`exponential_value`, or None if unknown or unbounded.

    Without `end_value` a rate above 1 grows without bound (None: nothing
    is known to check against). Decaying, the value tends to 0, which float
    arithmetic reaches.
    """
    known = known_numbers(init_value, rate)
    end = None if end_value is None else known_numbers(end_value)
    if known is None or (end_value is not None and end is None):
        return None
    init, rate = known
    if rate < 0 and steps > 0:
        return None  # alternates in sign, or is NaN between whole periods
    if steps <= 0 or rate == 0:
        return hull(init)  # constant (end_value is not applied, as in optax)
    if rate == 1:
        low = high = init
    elif rate < 1:
        low, high = hull(init, 0.0)
    else:
        low, high = (init, math.inf) if init > 0 else (-math.inf, init)
        if init == 0:
            low = high = 0.0
    if end is not None:
        # A bound from below when decaying, from above otherwise.
        if rate < 1:
            low, high = max(low, end[0]), max(high, end[0])
        else:
            low, high = min(low, end[0]), min(high, end[0])
    if math.isinf(low) or math.isinf(high):
        return None
    return low, high


def _linear_between(start, end, pct):
    return (end - start) * pct + start


def _cosine_between(start, end, pct):
    return end + (start - end) / 2.0 * (jnp.cos(jnp.pi * pct) + 1)


def piecewise_interpolate_value(count, kind, init_value, boundaries, scales):
    """Interpolates between the running products of `scales` at `boundaries`.

    `boundaries` is sorted; `scales[i]` multiplies the value reached at
    `boundaries[i]`. Before step 0 the value is 0, after the last boundary it
    is the last product.
    """
    between = _linear_between if kind == "linear" else _cosine_between
    bounds = jnp.stack((0, *boundaries))
    levels = jnp.cumprod(jnp.stack((init_value, *scales)))
    starts, ends = bounds[:-1], bounds[1:]
    lengths = jnp.maximum(ends - starts, 1)
    inside = jnp.logical_and(starts <= count, count < ends)
    pct = (count - starts) / lengths
    pieces = between(levels[:-1], levels[1:], pct)
    return inside.dot(pieces) + (bounds[-1] <= count) * levels[-1]


def piecewise_interpolate_bounds(init_value, boundaries, scales):
    """Bounds of :func:`piecewise_interpolate_value` over the steps >= 0.

    Both interpolations stay between the two levels they join, so the bounds
    are those of the levels in use from step 0 on: the level of the last
    boundary <= 0 (`init_value` if none) and every later one.
    """
    known = known_numbers(init_value, *scales)
    if known is None:
        return None
    level, levels = known[0], [known[0]]
    for boundary, scale in zip(boundaries, known[1:], strict=True):
        level = level * scale
        levels = [level] if boundary <= 0 else [*levels, level]
    return hull(*levels)


def boundaries_dict(name: str, mapping: Any) -> dict | None:
    """A copy of a `{step: scale}` mapping with plain-number keys, sorted."""
    if mapping is None:
        return None
    if not isinstance(mapping, Mapping):
        raise ValueError(
            f"{name} must be a dict from step to scale or None, got {mapping!r}"
        )
    items = [(step_number(f"{name} key", k), v) for k, v in mapping.items()]
    return dict(sorted(items, key=lambda item: item[0]))


# Each factor of a ``{step: factor}`` mapping: the declaration of a field,
# applied to the entries of a dict (which a field's declaration cannot reach).
_SCALE = Spec(NONNEGATIVE, schedule=False, array=True, allow_none=False)


def scales_by_step(mapping: Any, name: str) -> dict | None:
    """Converter of a `{step: scale}` argument: sorted, checked, plain keys."""
    pairs = boundaries_dict(name, mapping)
    validate_scales(name, pairs)
    return pairs


def validate_scales(name: str, mapping: dict | None) -> None:
    """Each factor of `mapping` must be >= 0 (as optax requires)."""
    for step, scale in (mapping or {}).items():
        validate(f"{name}[{step!r}]", scale, _SCALE)


# --------------------------------------------------------------------------
# Public schedules.
# --------------------------------------------------------------------------


class constant_schedule(ScheduleBase):
    """The same value at every step.

    .. math:: f(t) = v

    Args:
      value: the value, any real number.

    Returns:
      A schedule, called with the step count.

    Example:
      >>> import gradax
      >>> schedule = gradax.constant_schedule(0.1)
      >>> schedule(0), schedule(1000)
      (0.1, 0.1)
    """

    value: Any = hyper(valid=ANY, schedule=False)

    def _evaluate(self, count):
        return self.value

    def bounds(self):
        known = known_numbers(self.value)
        return None if known is None else hull(*known)


class _Ramp(ScheduleBase):
    """What polynomial_schedule and linear_schedule share: all but the power.

    Each gives the exponent of its ramp as `_power()`.
    """

    _abstract = True

    init_value: Any = hyper(valid=ANY, schedule=False)
    end_value: Any = hyper(valid=ANY, schedule=False)

    # The steps (see `_RampSteps`) and `_power` are each schedule's.
    def __check_init__(self):
        this: Any = self
        # Accepted, as in optax, with a note on how they are read.
        _note_polynomial_fallbacks(this.transition_steps, this.transition_begin)

    def _evaluate(self, count):
        this: Any = self
        return polynomial_value(
            count,
            self.init_value,
            self.end_value,
            this._power(),
            this.transition_steps,
            this.transition_begin,
        )


class _RampSteps(Module):
    """The last two fields of both ramps.

    The fields of a class come from its bases, the last base first, so a
    ramp's bases `(_RampSteps, ..., _Ramp)` put these after the others.
    """

    _abstract = True

    transition_steps: int = hyper(valid=STEPS, static=True)
    transition_begin: int = hyper(default=0, valid=STEPS, static=True)


class _RampPower(Module):
    """The field of polynomial_schedule alone, between the shared ones."""

    _abstract = True

    # (1 - progress) ** power stays in [0, 1]: the values stay between the two.
    power: Any = hyper(valid=POWER, schedule=False)

    def _power(self):
        return self.power


class polynomial_schedule(_RampSteps, _RampPower, _Ramp):
    """Goes from `init_value` to `end_value` along a power of the progress.

    With :math:`s` = `transition_steps`, :math:`b` = `transition_begin`
    and :math:`\\tau = \\mathrm{clip}(t - b, 0, s)`,

    .. math:: f(t) = (v_0 - v_1) (1 - \\tau / s)^p + v_1

    A non-positive `transition_steps` gives the constant `init_value`; a
    negative `transition_begin` counts as 0 (both as in optax).

    Args:
      init_value: the value :math:`v_0` up to `transition_begin`.
      end_value: the value :math:`v_1` from `transition_begin +
        transition_steps` on.
      power: the exponent :math:`p` (1 is linear), >= 0.
      transition_steps: how many steps the transition takes, an integer.
      transition_begin: the step where the transition starts, an integer.

    Returns:
      A schedule, called with the step count.

    Example:
      >>> import gradax
      >>> schedule = gradax.polynomial_schedule(1.0, 0.0, power=2,
      ...                                       transition_steps=10)
      >>> float(schedule(5)), float(schedule(20))
      (0.25, 0.0)
    """

    def bounds(self):
        known = known_numbers(self.init_value, self.end_value, self.power)
        if known is None:
            return None
        init, end, power = known
        if power < 0 and self.transition_steps > 0:
            return None  # grows without bound towards the end
        return polynomial_bounds(init, end, power, self.transition_steps)


class linear_schedule(_RampSteps, _Ramp):
    """Goes linearly from `init_value` to `end_value`.

    With :math:`s` = `transition_steps` and :math:`b` = `transition_begin`,

    .. math:: f(t) = v_0 + (v_1 - v_0) \\, \\mathrm{clip}(t - b, 0, s) / s

    This is :class:`polynomial_schedule` with `power=1`.

    Args:
      init_value: the value :math:`v_0` up to `transition_begin`.
      end_value: the value :math:`v_1` from `transition_begin +
        transition_steps` on.
      transition_steps: how many steps the transition takes, an integer; a
        non-positive one gives the constant `init_value` (as in optax).
      transition_begin: the step where the transition starts, an integer; a
        negative one counts as 0 (as in optax).

    Returns:
      A schedule, called with the step count.

    Example:
      >>> import gradax
      >>> schedule = gradax.linear_schedule(1.0, 0.0, 10, transition_begin=5)
      >>> [float(schedule(t)) for t in (0, 5, 10, 15, 20)]
      [1.0, 1.0, 0.5, 0.0, 0.0]
    """

    def _power(self):
        return 1

    def bounds(self):
        known = known_numbers(self.init_value, self.end_value)
        if known is None:
            return None
        init, end = known
        return polynomial_bounds(init, end, 1.0, self.transition_steps)


def polynomial_bounds(init, end, power, steps) -> tuple[float, float]:
    """Bounds of :func:`polynomial_value` over the steps >= 0."""
    if steps <= 0 or power == 0:
        # Constant: ``0 ** 0 = 1`` keeps init_value even at the end.
        return hull(init)
    return hull(init, end)


def _note_polynomial_fallbacks(steps, begin) -> None:
    if steps <= 0:
        logger.info(
            "transition_steps=%r is not positive: the schedule is the constant "
            "init_value.",
            steps,
        )
    elif begin < 0:
        logger.info("transition_begin=%r is negative: using 0.", begin)


class piecewise_constant_schedule(ScheduleBase):
    """A value multiplied by a factor at each of some steps.

    .. math:: f(t) = v_0 \\prod_{b_i \\le t} c_i

    for the pairs :math:`(b_i, c_i)` of `boundaries_and_scales`. The value
    changes exactly at each boundary: step :math:`b_i` already has the new
    value.

    Args:
      init_value: the value :math:`v_0` before the first boundary.
      boundaries_and_scales: a dict from step :math:`b_i` to a non-negative
        factor :math:`c_i`, or None for a constant. The steps are static; the
        factors are pytree leaves.

    Returns:
      A schedule, called with the step count.

    Example:
      >>> import gradax
      >>> schedule = gradax.piecewise_constant_schedule(1.0, {10: 0.5, 20: 0.1})
      >>> [float(schedule(t)) for t in (9, 10, 19, 20)]
      [1.0, 0.5, 0.5, 0.05000000074505806]
    """

    init_value: Any = hyper(valid=ANY, schedule=False)
    boundaries_and_scales: dict[int, float] | None = field(
        default=None, converter=scales_by_step
    )

    def _evaluate(self, count):
        value = self.init_value
        for boundary, scale in (self.boundaries_and_scales or {}).items():
            # 1 strictly before the boundary, 0 from it on.
            before = jnp.maximum(0.0, jnp.sign(boundary - count))
            value = value * before + (1 - before) * scale * value
        return value

    def bounds(self):
        pairs = self.boundaries_and_scales or {}
        known = known_numbers(self.init_value, *pairs.values())
        if known is None:
            return None
        init, scales = known[0], known[1:]
        # The value at step t >= 0 is init times the factors of the
        # boundaries <= t: those <= 0 apply from the start.
        value, values = init, []
        for boundary, scale in zip(pairs, scales, strict=True):
            if boundary > 0:
                values.append(value)
            value = value * scale
        return hull(*values, value)


class piecewise_interpolate_schedule(ScheduleBase):
    """Interpolates between levels that change by a factor at given steps.

    The levels are :math:`v_0` at step 0 and :math:`v_i = v_{i-1} c_i` at the
    boundary :math:`b_i`; between two boundaries the value goes from one level
    to the next, linearly or along a half cosine:

    .. math::
        f(t) = v_{i-1} + (v_i - v_{i-1}) \\, g\\!\\left(
            \\frac{t - b_{i-1}}{b_i - b_{i-1}}\\right),
        \\quad g(x) = x \\text{ or } \\tfrac{1}{2}(1 - \\cos \\pi x)

    with :math:`b_0 = 0`. After the last boundary the value is the last level;
    before step 0 it is 0 (as in optax).

    Args:
      interpolate_type: `'linear'` or `'cosine'`.
      init_value: the value :math:`v_0` at step 0.
      boundaries_and_scales: a dict from step :math:`b_i` to a non-negative
        factor :math:`c_i`, or None. The steps are static; the factors are
        pytree leaves.

    Returns:
      A schedule, called with the step count.

    Example:
      >>> import gradax
      >>> schedule = gradax.piecewise_interpolate_schedule(
      ...     "linear", 1.0, {10: 3.0, 20: 0.5})
      >>> [float(schedule(t)) for t in (0, 5, 10, 15, 20, 30)]
      [1.0, 2.0, 3.0, 2.25, 1.5, 1.5]
    """

    interpolate_type: str = hyper(valid=OneOf(("linear", "cosine")), static=True)
    init_value: Any = hyper(valid=ANY, schedule=False)
    boundaries_and_scales: dict[int, float] | None = field(
        default=None, converter=scales_by_step
    )

    def _evaluate(self, count):
        pairs = self.boundaries_and_scales or {}
        return piecewise_interpolate_value(
            count,
            self.interpolate_type,
            self.init_value,
            tuple(pairs.keys()),
            tuple(pairs.values()),
        )

    def bounds(self):
        pairs = self.boundaries_and_scales or {}
        return piecewise_interpolate_bounds(
            self.init_value, tuple(pairs.keys()), tuple(pairs.values())
        )


class exponential_decay(ScheduleBase):
    """Multiplies a value by `decay_rate` every `transition_steps` steps.

    With :math:`s` = `transition_steps`, :math:`b` = `transition_begin`
    and :math:`r` = `decay_rate`,

    .. math:: f(t) = v_0 \\, r^{(t - b) / s} \\quad (t > b), \\qquad
        f(t) = v_0 \\quad (t \\le b)

    where the exponent is rounded down when `staircase` is set. With an
    `end_value`, the value stops there: it is a lower bound when
    :math:`r < 1` and an upper bound otherwise.

    As in optax, a non-positive `transition_steps` or a zero `decay_rate`
    gives the constant `init_value`, and a negative `transition_begin`
    counts as 0.

    Args:
      init_value: the value :math:`v_0` up to `transition_begin`.
      transition_steps: the number of steps :math:`s` per factor of
        `decay_rate`, an integer.
      decay_rate: the factor :math:`r` per `transition_steps` steps, >= 0
        (above 1 the value grows).
      transition_begin: the step :math:`b` where the decay starts, an integer.
      staircase: decay in whole factors only, once every `transition_steps`.
      end_value: a bound the value does not pass, or None.

    Returns:
      A schedule, called with the step count.

    Example:
      >>> import gradax
      >>> schedule = gradax.exponential_decay(1.0, transition_steps=10,
      ...                                     decay_rate=0.5, end_value=0.2)
      >>> [float(schedule(t)) for t in (0, 10, 20, 30)]
      [1.0, 0.5, 0.25, 0.20000000298023224]
    """

    init_value: Any = hyper(valid=ANY, schedule=False)
    transition_steps: int = hyper(valid=STEPS, static=True)
    # A negative rate has no real fractional powers.
    decay_rate: Any = hyper(valid=DECAY_RATE, schedule=False)
    transition_begin: int = hyper(default=0, valid=STEPS, static=True)
    staircase: bool = static_field(default=False)
    end_value: Any = hyper(default=None, valid=ANY, schedule=False)

    def __check_init__(self):
        # Accepted, as in optax, with a note on how they are read.
        if self.transition_steps <= 0:
            logger.info(
                "transition_steps=%r is not positive: the schedule is the "
                "constant init_value.",
                self.transition_steps,
            )
        elif concrete_scalar(self.decay_rate) == 0:
            logger.info("decay_rate is 0: the schedule is the constant init_value.")
        elif self.transition_begin < 0:
            logger.info(
                "transition_begin=%r is negative: using 0.", self.transition_begin
            )

    def _evaluate(self, count):
        return exponential_value(
            count,
            self.init_value,
            self.transition_steps,
            self.decay_rate,
            self.transition_begin,
            self.staircase,
            self.end_value,
        )

    def bounds(self):
        return exponential_bounds(
            self.init_value, self.transition_steps, self.decay_rate, self.end_value
        )
