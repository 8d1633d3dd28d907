"""Constant, polynomial, piecewise and exponential schedules."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp

from .._declare import hyper
from .._hyper import check_nonnegative
from .._pytree import static_field
from ._util import ScheduleBase, concrete_scalar, logger, select, step_number

# --------------------------------------------------------------------------
# Formulas, shared with the composite schedules of the other files.
# --------------------------------------------------------------------------


def polynomial_value(count, init_value, end_value, power, steps, begin):
    """Polynomial interpolation from ``init_value`` to ``end_value``."""
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
    """``init_value * rate ** ((count - begin) / steps)``, optionally bounded."""
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


def _linear_between(start, end, pct):
    return (end - start) * pct + start


def _cosine_between(start, end, pct):
    return end + (start - end) / 2.0 * (jnp.cos(jnp.pi * pct) + 1)


def piecewise_interpolate_value(count, kind, init_value, boundaries, scales):
    """Interpolates between the running products of ``scales`` at ``boundaries``.

    ``boundaries`` is sorted; ``scales[i]`` multiplies the value reached at
    ``boundaries[i]``. Before step 0 the value is 0, after the last boundary it
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


def boundaries_dict(name: str, mapping: Any) -> dict | None:
    """A copy of a ``{step: scale}`` mapping with plain-number keys, sorted."""
    if mapping is None:
        return None
    if not isinstance(mapping, Mapping):
        raise ValueError(
            f"{name} must be a dict from step to scale or None, got {mapping!r}"
        )
    items = [(step_number(f"{name} key", k), v) for k, v in mapping.items()]
    return dict(sorted(items, key=lambda item: item[0]))


def check_scales(name: str, mapping: dict | None) -> None:
    for step, scale in (mapping or {}).items():
        check_nonnegative(f"{name}[{step!r}]", scale)


# --------------------------------------------------------------------------
# Public schedules.
# --------------------------------------------------------------------------


class constant_schedule(ScheduleBase):
    """The same value at every step.

    .. math:: f(t) = v

    Args:
      value: the value.

    Returns:
      A schedule, called with the step count.

    Example:
      >>> import gradax
      >>> schedule = gradax.constant_schedule(0.1)
      >>> schedule(0), schedule(1000)
      (0.1, 0.1)
    """

    value: Any = hyper(schedule=False)

    def _evaluate(self, count):
        return self.value


class polynomial_schedule(ScheduleBase):
    """Goes from ``init_value`` to ``end_value`` along a power of the progress.

    With :math:`s` = ``transition_steps``, :math:`b` = ``transition_begin``
    and :math:`\\tau = \\mathrm{clip}(t - b, 0, s)`,

    .. math:: f(t) = (v_0 - v_1) (1 - \\tau / s)^p + v_1

    A non-positive ``transition_steps`` gives the constant ``init_value``; a
    negative ``transition_begin`` counts as 0 (both as in optax).

    Args:
      init_value: the value :math:`v_0` up to ``transition_begin``.
      end_value: the value :math:`v_1` from ``transition_begin +
        transition_steps`` on.
      power: the exponent :math:`p` (1 is linear).
      transition_steps: how many steps the transition takes.
      transition_begin: the step where the transition starts.

    Returns:
      A schedule, called with the step count.

    Example:
      >>> import gradax
      >>> schedule = gradax.polynomial_schedule(1.0, 0.0, power=2,
      ...                                       transition_steps=10)
      >>> float(schedule(5)), float(schedule(20))
      (0.25, 0.0)
    """

    init_value: Any = hyper(schedule=False)
    end_value: Any = hyper(schedule=False)
    power: Any = hyper(schedule=False)
    transition_steps: int = static_field()
    transition_begin: int = static_field(0)

    _static_numbers = ("transition_steps", "transition_begin")

    def _check(self):
        _note_polynomial_fallbacks(self.transition_steps, self.transition_begin)

    def _evaluate(self, count):
        return polynomial_value(
            count,
            self.init_value,
            self.end_value,
            self.power,
            self.transition_steps,
            self.transition_begin,
        )


class linear_schedule(ScheduleBase):
    """Goes linearly from ``init_value`` to ``end_value``.

    With :math:`s` = ``transition_steps`` and :math:`b` = ``transition_begin``,

    .. math:: f(t) = v_0 + (v_1 - v_0) \\, \\mathrm{clip}(t - b, 0, s) / s

    This is :class:`polynomial_schedule` with ``power=1``, with the same
    handling of non-positive ``transition_steps`` and negative
    ``transition_begin``.

    Args:
      init_value: the value :math:`v_0` up to ``transition_begin``.
      end_value: the value :math:`v_1` from ``transition_begin +
        transition_steps`` on.
      transition_steps: how many steps the transition takes.
      transition_begin: the step where the transition starts.

    Returns:
      A schedule, called with the step count.

    Example:
      >>> import gradax
      >>> schedule = gradax.linear_schedule(1.0, 0.0, transition_steps=10)
      >>> [float(schedule(t)) for t in (0, 5, 10, 15)]
      [1.0, 0.5, 0.0, 0.0]
    """

    init_value: Any = hyper(schedule=False)
    end_value: Any = hyper(schedule=False)
    transition_steps: int = static_field()
    transition_begin: int = static_field(0)

    _static_numbers = ("transition_steps", "transition_begin")

    def _check(self):
        _note_polynomial_fallbacks(self.transition_steps, self.transition_begin)

    def _evaluate(self, count):
        return polynomial_value(
            count,
            self.init_value,
            self.end_value,
            1,
            self.transition_steps,
            self.transition_begin,
        )


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

    for the pairs :math:`(b_i, c_i)` of ``boundaries_and_scales``. The value
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

    init_value: Any = hyper(schedule=False)
    boundaries_and_scales: dict[int, float] | None = None

    def __post_init__(self):
        object.__setattr__(
            self,
            "boundaries_and_scales",
            boundaries_dict("boundaries_and_scales", self.boundaries_and_scales),
        )
        super().__post_init__()

    def _check(self):
        check_scales("boundaries_and_scales", self.boundaries_and_scales)

    def _evaluate(self, count):
        value = self.init_value
        for boundary, scale in (self.boundaries_and_scales or {}).items():
            # 1 strictly before the boundary, 0 from it on.
            before = jnp.maximum(0.0, jnp.sign(boundary - count))
            value = value * before + (1 - before) * scale * value
        return value


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
      interpolate_type: ``'linear'`` or ``'cosine'``.
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

    interpolate_type: str = static_field()
    init_value: Any = hyper(schedule=False)
    boundaries_and_scales: dict[int, float] | None = None

    def __post_init__(self):
        object.__setattr__(
            self,
            "boundaries_and_scales",
            boundaries_dict("boundaries_and_scales", self.boundaries_and_scales),
        )
        super().__post_init__()

    def _check(self):
        if self.interpolate_type not in ("linear", "cosine"):
            raise ValueError(
                "interpolate_type must be 'linear' or 'cosine', got "
                f"{self.interpolate_type!r}"
            )
        check_scales("boundaries_and_scales", self.boundaries_and_scales)

    def _evaluate(self, count):
        pairs = self.boundaries_and_scales or {}
        return piecewise_interpolate_value(
            count,
            self.interpolate_type,
            self.init_value,
            tuple(pairs.keys()),
            tuple(pairs.values()),
        )


class exponential_decay(ScheduleBase):
    """Multiplies a value by ``decay_rate`` every ``transition_steps`` steps.

    With :math:`s` = ``transition_steps``, :math:`b` = ``transition_begin``
    and :math:`r` = ``decay_rate``,

    .. math:: f(t) = v_0 \\, r^{(t - b) / s} \\quad (t > b), \\qquad
        f(t) = v_0 \\quad (t \\le b)

    where the exponent is rounded down when ``staircase`` is set. With an
    ``end_value``, the value stops there: it is a lower bound when
    :math:`r < 1` and an upper bound otherwise.

    As in optax, a non-positive ``transition_steps`` or a zero ``decay_rate``
    gives the constant ``init_value``, and a negative ``transition_begin``
    counts as 0.

    Args:
      init_value: the value :math:`v_0` up to ``transition_begin``.
      transition_steps: the number of steps :math:`s` per factor of ``decay_rate``.
      decay_rate: the factor :math:`r` per ``transition_steps`` steps.
      transition_begin: the step :math:`b` where the decay starts.
      staircase: decay in whole factors only, once every ``transition_steps``.
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

    init_value: Any = hyper(schedule=False)
    transition_steps: int = static_field()
    decay_rate: Any = hyper(schedule=False)
    transition_begin: int = static_field(0)
    staircase: bool = static_field(False)
    end_value: Any = hyper(None, schedule=False)

    _static_numbers = ("transition_steps", "transition_begin")

    def _check(self):
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
