"""Warmup-stable-decay (WSD): warmup, a long plateau, then a short decay."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from .._core.declarations import ANY, NONNEGATIVE_INT, POSITIVE_INT, UNIT, OneOf, hyper
from ._util import ScheduleBase, hull, known_numbers

DECAY_TYPES = ("linear", "cosine", "1-sqrt")


def decay_steps_of(total_steps: int, decay_fraction: float) -> int:
    """The number of decay steps: `decay_fraction * total_steps`, rounded."""
    return int(round(decay_fraction * total_steps))


def _shape(progress: Any, decay_type: str) -> Any:
    """The decay's factor, from 1 at progress 0 to 0 at progress 1."""
    if decay_type == "linear":
        return 1 - progress
    if decay_type == "cosine":
        return 0.5 * (1 + jnp.cos(jnp.pi * progress))
    # 1-sqrt (Hägele et al.): falls fast at first, then flattens.
    return 1 - jnp.sqrt(progress)


class warmup_stable_decay_schedule(ScheduleBase):
    r"""Linear warmup, a constant plateau, then a decay over the last steps.

    With :math:`W` = `warmup_steps`, :math:`T` = `total_steps`,
    :math:`D = \mathrm{round}(\text{decay\_fraction} \cdot T)` decay steps
    starting at :math:`S = T - D`, and :math:`p = (t - S) / D`:

    .. math::
        f(t) = \begin{cases}
            v_0 + (v_p - v_0)\, \max(t, 0) / W & t < W \\
            v_p & W \le t < S \\
            v_1 + (v_p - v_1)\, \phi(\min(p, 1)) & t \ge S
        \end{cases}

    with :math:`\phi(p) = 1 - p` ("linear"), :math:`\tfrac12(1 + \cos \pi p)`
    ("cosine") or :math:`1 - \sqrt{p}` ("1-sqrt"). It reaches `end_value`
    at :math:`T` and stays there. The plateau can be cut short or extended
    without touching the warmup, which is why long pretraining runs use it.

    Args:
      init_value: the value :math:`v_0` at step 0.
      peak_value: the plateau's value :math:`v_p`.
      warmup_steps: the length :math:`W` of the warmup, an integer >= 0.
      total_steps: the length :math:`T` of the schedule, an integer >= 1.
      decay_fraction: the fraction of `total_steps` the decay takes, in
        [0, 1] (0: no decay; MiniCPM and levanter use 0.1 to 0.2).
      end_value: the value :math:`v_1` at the end of the decay.
      decay_type: the decay's shape, "linear", "cosine" or "1-sqrt".

    Returns:
      A schedule, called with the step count.

    Raises:
      ValueError: the warmup and the decay do not fit in `total_steps`.

    Example:
      >>> import gradax
      >>> schedule = gradax.warmup_stable_decay_schedule(
      ...     0.0, 1.0, warmup_steps=10, total_steps=100, decay_fraction=0.2)
      >>> [round(float(schedule(t)), 4) for t in (0, 5, 10, 80, 90, 100, 200)]
      [0.0, 0.5, 1.0, 1.0, 0.5, 0.0, 0.0]

    References:
      Hu et al., MiniCPM: Unveiling the Potential of Small Language Models
      with Scalable Training Strategies, 2024 (arXiv:2404.06395); Hägele et
      al., Scaling Laws and Compute-Optimal Training beyond Fixed Training
      Durations, 2024 (arXiv:2405.18392) for the 1-sqrt decay.
    """

    init_value: Any = hyper(valid=ANY, schedule=False)
    peak_value: Any = hyper(valid=ANY, schedule=False)
    warmup_steps: int = hyper(valid=NONNEGATIVE_INT, static=True)
    total_steps: int = hyper(valid=POSITIVE_INT, static=True)
    decay_fraction: float = hyper(default=0.1, valid=UNIT, static=True)
    end_value: Any = hyper(default=0.0, valid=ANY, schedule=False)
    decay_type: str = hyper(default="linear", valid=OneOf(DECAY_TYPES), static=True)

    def _decay_steps(self) -> int:
        return decay_steps_of(self.total_steps, self.decay_fraction)

    def __check_init__(self):
        decay = self._decay_steps()
        if self.warmup_steps + decay > self.total_steps:
            raise ValueError(
                f"warmup_steps + decay steps must be at most total_steps: "
                f"warmup_steps={self.warmup_steps!r} and decay_fraction="
                f"{self.decay_fraction!r} (round({self.decay_fraction!r} * "
                f"{self.total_steps!r}) = {decay} decay steps) exceed "
                f"total_steps={self.total_steps!r}"
            )

    def _evaluate(self, count):
        # Python integers become floats so that large counts do not overflow.
        t = float(count) if isinstance(count, int) else count
        t = jnp.maximum(t, 0)
        warmup, decay = self.warmup_steps, self._decay_steps()
        start = self.total_steps - decay
        out = jnp.asarray(self.peak_value)
        if warmup > 0:
            ramp = self.init_value + (self.peak_value - self.init_value) * (
                jnp.minimum(t, warmup) / warmup
            )
            out = jnp.where(t < warmup, ramp, out)
        if decay > 0:
            progress = jnp.clip((t - start) / decay, 0, 1)
            # Exactly end_value from the last step on (no rounding past it).
            factor = jnp.where(progress >= 1, 0.0, _shape(progress, self.decay_type))
            decayed = self.end_value + (self.peak_value - self.end_value) * factor
            out = jnp.where(t >= start, decayed, out)
        return out

    def bounds(self):
        known = known_numbers(self.init_value, self.peak_value, self.end_value)
        if known is None:
            return None
        init, peak, end = known
        values = [peak]
        if self.warmup_steps > 0:
            values.append(init)
        if self._decay_steps() > 0:
            values.append(end)
        return hull(*values)
