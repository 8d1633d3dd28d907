"""PSGD's schedule of the probability of updating the preconditioner."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from .._core.declarations import NONNEGATIVE, NONNEGATIVE_INT, UNIT, hyper
from ._util import ScheduleBase


class precond_update_prob_schedule(ScheduleBase):
    r"""PSGD's probability of updating the preconditioner: flat, then annealed.

    .. math::
      p(t) = \min\big(\max(p_{\max} e^{-\lambda (t - t_0)}, p_{\min}),
        p_{\max}\big)

    With the defaults, every step updates the preconditioner for the first
    250 steps, then the probability decays to 0.03 by about step 3800.

    Args:
      max_prob: :math:`p_{\max}`, in [0, 1].
      min_prob: :math:`p_{\min}`, in [0, 1].
      decay: :math:`\lambda`, >= 0.
      flat_start: :math:`t_0`, an integer >= 0.

    Returns:
      A schedule, called with the step count.

    Example:
      >>> import gradax
      >>> p = gradax.precond_update_prob_schedule()
      >>> [round(float(p(t)), 3) for t in (0, 250, 1000, 10000)]
      [1.0, 1.0, 0.472, 0.03]

    References:
      psgd-jax (Evan Walters), `kron.py`'s schedule of the same name.
    """

    max_prob: Any = hyper(default=1.0, valid=UNIT, schedule=False)
    min_prob: Any = hyper(default=0.03, valid=UNIT, schedule=False)
    decay: Any = hyper(default=0.001, valid=NONNEGATIVE, schedule=False)
    flat_start: int = hyper(default=250, valid=NONNEGATIVE_INT, static=True)

    def _evaluate(self, count):
        decayed = self.max_prob * jnp.exp(-self.decay * (count - self.flat_start))
        return jnp.minimum(jnp.maximum(decayed, self.min_prob), self.max_prob)

    def bounds(self):
        low, high = self.min_prob, self.max_prob
        if not all(isinstance(v, (int, float)) for v in (low, high)):
            return None
        return min(low, high), high
