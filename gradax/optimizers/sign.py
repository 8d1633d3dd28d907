"""Sign-based descent: sign_sgd and signum (sign of a momentum)."""

from __future__ import annotations

from typing import Any

from .._core.declarations import LEARNING_RATE, UNIT, hyper
from .._core.protocol import Alias
from .._core.pytree import static_field
from ..combinators.chain import chain
from ..transforms.direction import scale_by_sign
from ..transforms.momentum import ema
from ..transforms.scaling import scale_by_learning_rate


class sign_sgd(Alias):
    r"""signSGD: steps of fixed size along the sign of the gradient.

    .. math::
      u_t = -\eta_t \operatorname{sign}(g_t).

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule.

    Returns:
      The optimizer: `chain(scale_by_sign(), scale_by_learning_rate(lr))`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.sign_sgd(0.1)
      >>> tx.update(jnp.array([1e-3, -50.0]), tx.init(jnp.zeros(2)))[0]  # sizes ignored
      Array([-0.1,  0.1], dtype=float32)

    References:
      Bernstein et al., signSGD: Compressed Optimisation for Non-Convex
      Problems, ICML 2018 (arXiv:1802.04434).
    """

    learning_rate: Any = hyper(valid=LEARNING_RATE)

    def build(self):
        return chain(scale_by_sign(), scale_by_learning_rate(self.learning_rate))


class signum(Alias):
    r"""Signum: signSGD on an exponential moving average of the gradients.

    With :math:`m_0 = 0`,

    .. math::
      m_t = \beta\, m_{t-1} + (1 - \beta)\, g_t,\qquad
      u_t = -\eta_t \operatorname{sign}(m_t).

    The average is not debiased: that would not change its sign.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule.
      beta: :math:`\beta`, the decay of the average, in [0, 1].
      accumulator_dtype: dtype of the stored average (default: the params').

    Returns:
      The optimizer: `chain(ema(beta, debias=False), scale_by_sign(),
      scale_by_learning_rate(lr))`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.signum(0.1, beta=0.9)
      >>> _, state = tx.update(jnp.array([1.0]), tx.init(jnp.zeros(1)))
      >>> tx.update(jnp.array([-0.5]), state)[0]  # the momentum's sign, still +
      Array([-0.1], dtype=float32)

    References:
      Bernstein et al., signSGD: Compressed Optimisation for Non-Convex
      Problems, ICML 2018 (arXiv:1802.04434).
    """

    learning_rate: Any = hyper(valid=LEARNING_RATE)
    beta: Any = hyper(default=0.9, valid=UNIT)
    accumulator_dtype: Any = static_field(default=None)

    def build(self):
        return chain(
            ema(self.beta, debias=False, accumulator_dtype=self.accumulator_dtype),
            scale_by_sign(),
            scale_by_learning_rate(self.learning_rate),
        )
