"""Adagrad: steps divided by the root of all past squared gradients."""

from __future__ import annotations

from typing import Any

from .._core.declarations import LEARNING_RATE, NONNEGATIVE, hyper
from .._core.protocol import Alias
from ..combinators.chain import chain
from ..transforms.rms import scale_by_rss
from ..transforms.scaling import scale_by_learning_rate


class adagrad(Alias):
    r"""Adagrad: per-coordinate steps that shrink with the gradients seen.

    With gradient :math:`g_t` and :math:`s_0` = `initial_accumulator_value`:

    .. math::
      s_t = s_{t-1} + |g_t|^2,\quad
      u_t = -\eta_t \frac{g_t}{\sqrt{s_t + \epsilon}}
      \quad (0 \text{ where } s_t = 0).

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule.
      initial_accumulator_value: :math:`s_0`, >= 0.
      eps: :math:`\epsilon`, >= 0.

    Returns:
      The optimizer, a gradient transformation.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.adagrad(0.1, initial_accumulator_value=0.0, eps=0.0)
      >>> u, _ = tx.update(jnp.array([2.0, -4.0]), tx.init(jnp.zeros(2)))
      >>> u
      Array([-0.1,  0.1], dtype=float32)

    References:
      Duchi et al., Adaptive Subgradient Methods for Online Learning and
      Stochastic Optimization, JMLR 2011.
    """

    learning_rate: Any = hyper(valid=LEARNING_RATE)
    initial_accumulator_value: Any = hyper(default=0.1, valid=NONNEGATIVE)
    eps: Any = hyper(default=1e-7, valid=NONNEGATIVE)

    def build(self):
        return chain(
            self.part(scale_by_rss),
            scale_by_learning_rate(self.learning_rate),
        )
