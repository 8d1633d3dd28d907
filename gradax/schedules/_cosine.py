"""Cosine decay, with linear warmup, and its warm restarts (SGDR)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import jax.numpy as jnp

from .._core.declarations import ANY, hyper
from .._core.pytree import field
from ._basic import polynomial_bounds, polynomial_value
from ._util import (
    PERIOD_STEPS,
    POWER,
    WARMUP_STEPS,
    ScheduleBase,
    concrete_scalar,
    hull,
    hull_of_bounds,
    join,
    known_numbers,
)


def cosine_value(count, init_value, decay_steps, alpha, exponent):
    """Half-cosine decay from `init_value` to `alpha * init_value`."""
    # Python integers become floats so that large counts do not overflow int32.
    if isinstance(decay_steps, int):
        decay_steps = float(decay_steps)
    if isinstance(count, int):
        count = float(count)
    count = jnp.minimum(count, decay_steps)
    cosine = 0.5 * (1 + jnp.cos(jnp.pi * count / decay_steps))
    return init_value * ((1 - alpha) * cosine**exponent + alpha)


def _end_fraction(peak_value, end_value):
    """`end_value / peak_value`, taken as 0 when `peak_value` is 0."""
    known_peak = concrete_scalar(peak_value)
    if known_peak is not None:
        return 0.0 if known_peak == 0.0 else end_value / peak_value
    is_zero = peak_value == 0.0
    safe_peak = jnp.where(is_zero, 1.0, peak_value)
    return jnp.where(is_zero, 0.0, end_value / safe_peak)


def cosine_bounds(init_value, alpha, exponent) -> tuple[float, float]:
    """Bounds of :func:`cosine_value`: it goes from `init_value` to
    `alpha * init_value` (or stays at `init_value` when `exponent` is 0,
    since `0 ** 0 = 1`)."""
    if exponent == 0:
        return hull(init_value)
    return hull(init_value, alpha * init_value)


class cosine_decay_schedule(ScheduleBase):
    """Decays a value along a half cosine over `decay_steps` steps.

    With :math:`D` = `decay_steps`, :math:`\\alpha` = `alpha` and
    :math:`p` = `exponent`,

    .. math::
        f(t) = v_0 \\left[(1 - \\alpha) \\left(\\tfrac{1}{2}\\left(
            1 + \\cos \\frac{\\pi \\min(t, D)}{D}\\right)\\right)^p
            + \\alpha\\right]

    so it starts at :math:`v_0` and stays at :math:`\\alpha v_0` from step
    :math:`D` on.

    Args:
      init_value: the value :math:`v_0` at step 0.
      decay_steps: the number of steps :math:`D` of the decay, an integer
        >= 1.
      alpha: the final value as a fraction of `init_value`, any real number.
      exponent: the power :math:`p` of the cosine factor, >= 0.

    Returns:
      A schedule, called with the step count.

    Example:
      >>> import gradax
      >>> schedule = gradax.cosine_decay_schedule(1.0, decay_steps=100, alpha=0.1)
      >>> [round(float(schedule(t)), 4) for t in (0, 50, 100, 200)]
      [1.0, 0.55, 0.1, 0.1]
    """

    init_value: Any = hyper(valid=ANY, schedule=False)
    decay_steps: int = hyper(valid=PERIOD_STEPS, static=True)
    alpha: Any = hyper(default=0.0, valid=ANY, schedule=False)
    # The cosine factor is in [0, 1]; a negative power would divide by 0.
    exponent: Any = hyper(default=1.0, valid=POWER, schedule=False)

    def _evaluate(self, count):
        return cosine_value(
            count, self.init_value, self.decay_steps, self.alpha, self.exponent
        )

    def bounds(self):
        known = known_numbers(self.init_value, self.alpha, self.exponent)
        if known is None or known[2] < 0:
            return None  # a negative exponent grows without bound
        return cosine_bounds(*known)


class warmup_cosine_decay_schedule(ScheduleBase):
    """Linear warmup to a peak, then cosine decay to `end_value`.

    With :math:`W` = `warmup_steps` and :math:`D` = `decay_steps` (the
    total length, warmup included),

    .. math::
        f(t) = \\begin{cases}
            v_0 + (v_p - v_0)\\, \\max(t, 0) / W & t < W \\\\
            v_1 + (v_p - v_1) \\left(\\tfrac{1}{2}\\left(1 + \\cos
                \\frac{\\pi \\min(t - W, D - W)}{D - W}\\right)\\right)^p
                & t \\ge W
        \\end{cases}

    It is continuous at :math:`W` and equals `end_value` from :math:`D` on.

    Args:
      init_value: the value :math:`v_0` at step 0.
      peak_value: the value :math:`v_p` at the end of the warmup.
      warmup_steps: the length :math:`W` of the warmup, an integer >= 0 (0
        for none).
      decay_steps: the total length :math:`D` of the schedule, warmup
        included; an integer greater than `warmup_steps`.
      end_value: the value :math:`v_1` at the end.
      exponent: the power :math:`p` of the cosine factor, >= 0.

    Returns:
      A schedule, called with the step count.

    Example:
      >>> import gradax
      >>> schedule = gradax.warmup_cosine_decay_schedule(
      ...     0.0, 1.0, warmup_steps=10, decay_steps=110, end_value=0.1)
      >>> [round(float(schedule(t)), 4) for t in (0, 5, 10, 60, 110, 200)]
      [0.0, 0.5, 1.0, 0.55, 0.1, 0.1]
    """

    init_value: Any = hyper(valid=ANY, schedule=False)
    peak_value: Any = hyper(valid=ANY, schedule=False)
    warmup_steps: int = hyper(valid=WARMUP_STEPS, static=True)
    decay_steps: int = hyper(valid=PERIOD_STEPS, static=True)
    end_value: Any = hyper(default=0.0, valid=ANY, schedule=False)
    exponent: Any = hyper(default=1.0, valid=POWER, schedule=False)

    def __check_init__(self):
        if not self.decay_steps - self.warmup_steps > 0:
            raise ValueError(
                "decay_steps must be greater than warmup_steps (it counts the "
                f"warmup), got decay_steps={self.decay_steps!r} and "
                f"warmup_steps={self.warmup_steps!r}"
            )

    def _evaluate(self, count):
        alpha = _end_fraction(self.peak_value, self.end_value)
        warmup_steps = self.warmup_steps

        def warmup(t):
            return polynomial_value(
                t, self.init_value, self.peak_value, 1, warmup_steps, 0
            )

        def decay(t):
            return cosine_value(
                t,
                self.peak_value,
                self.decay_steps - warmup_steps,
                alpha,
                self.exponent,
            )

        return join(count, (warmup, decay), (warmup_steps,))

    def bounds(self):
        known = known_numbers(
            self.init_value, self.peak_value, self.end_value, self.exponent
        )
        if known is None:
            return None
        init, peak, end, exponent = known
        if exponent < 0:
            return None  # grows without bound
        # The decay runs from peak_value to alpha * peak_value (all 0 when
        # peak_value is 0, see _end_fraction); the warmup only when W > 0.
        alpha = 0.0 if peak == 0 else end / peak
        low, high = cosine_bounds(peak, alpha, exponent)
        if self.warmup_steps > 0:
            low, high = hull(low, high, *polynomial_bounds(init, peak, 1.0, 1))
        return low, high


def _as_cycles(value: Any, name: str) -> tuple:
    """Converter of `cosine_kwargs`: a tuple of warmup-cosine schedules."""
    if isinstance(value, Mapping) or not isinstance(value, Iterable):
        raise ValueError(
            f"{name} must be a sequence of dicts of arguments of "
            f"warmup_cosine_decay_schedule, got {value!r}"
        )
    cycles = []
    for i, kwargs in enumerate(value):
        if isinstance(kwargs, warmup_cosine_decay_schedule):
            cycles.append(kwargs)
        elif isinstance(kwargs, Mapping):
            cycles.append(warmup_cosine_decay_schedule(**kwargs))
        else:
            raise ValueError(
                f"{name}[{i}] must be a dict of arguments of "
                f"warmup_cosine_decay_schedule, got {kwargs!r}"
            )
    return tuple(cycles)


class sgdr_schedule(ScheduleBase):
    """Cosine decay with warm restarts: cycles of warmup and cosine decay.

    Each cycle is a :class:`warmup_cosine_decay_schedule`; cycle :math:`k`
    starts when the ones before it have run their `decay_steps` and sees the
    step count from its own start.

    Args:
      cosine_kwargs: the cycles, in order: each a dict of arguments of
        :class:`warmup_cosine_decay_schedule` (or such a schedule itself).
        They are kept as a tuple of schedules, whose numbers are the leaves.

    Returns:
      A schedule, called with the step count.

    Example:
      >>> import gradax
      >>> cycle = dict(init_value=0.0, peak_value=1.0, warmup_steps=5,
      ...              decay_steps=20)
      >>> schedule = gradax.sgdr_schedule([cycle, cycle])
      >>> [round(float(schedule(t)), 4) for t in (0, 5, 19, 20, 25)]
      [0.0, 1.0, 0.0109, 0.0, 1.0]

    References:
      Loshchilov and Hutter, SGDR: Stochastic Gradient Descent with Warm
      Restarts, 2017 (arXiv:1608.03983).
    """

    cosine_kwargs: tuple[warmup_cosine_decay_schedule, ...] = field(
        converter=_as_cycles
    )

    def __check_init__(self):
        if not self.cosine_kwargs:
            raise ValueError("cosine_kwargs must hold at least one cycle, got none")

    def _evaluate(self, count):
        starts = []
        step = 0
        for cycle in self.cosine_kwargs[:-1]:
            step += cycle.decay_steps
            starts.append(step)
        return join(count, self.cosine_kwargs, starts)

    def bounds(self):
        return hull_of_bounds(self.cosine_kwargs)
