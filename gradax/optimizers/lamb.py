"""Layer-wise trust-ratio optimizers: LARS (momentum) and LAMB (Adam)."""

from __future__ import annotations

from typing import Any

from .._core.declarations import DECAY, LEARNING_RATE, NONNEGATIVE, hyper
from .._core.protocol import Alias
from .._core.pytree import static_field
from ..combinators.chain import chain
from ..combinators.masked import masked
from ..transforms.momentum import trace
from ..transforms.scaling import scale_by_learning_rate
from ..transforms.trust_ratio import scale_by_trust_ratio
from ..transforms.weight_decay import add_decayed_weights
from .adam import _ADAM, scale_by_adam


class lamb(Alias):
    r"""LAMB: Adam steps rescaled layer by layer by a trust ratio.

    For each leaf with parameters :math:`\theta_{t-1}`, the AdamW direction
    :math:`r_t = \hat m_t / (\sqrt{\hat v_t + \bar\epsilon} + \epsilon) +
    \lambda \theta_{t-1}` (see :class:`adamw`) becomes

    .. math::
      u_t = -\eta_t \frac{\|\theta_{t-1}\|}{\|r_t\|}\, r_t

    (the ratio is 1 where either norm is zero).

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule.
      b1: decay of the first moment, in [0, 1).
      b2: decay of the second moment, in [0, 1).
      eps: :math:`\epsilon`, >= 0.
      eps_root: :math:`\bar\epsilon`, >= 0.
      weight_decay: :math:`\lambda >= 0`, a number or a schedule.
      mask: a tree of booleans like the params (or a function of the params
        returning one) selecting the leaves that decay.

    Returns:
      The optimizer, a gradient transformation; `update` needs `params`: the
      trust ratio divides their norm by the step's.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.lamb(0.1)
      >>> p = jnp.array([3.0, 4.0])
      >>> u, _ = tx.update(jnp.array([1.0, -1.0]), tx.init(p), p)
      >>> u.round(4)
      Array([-0.3536,  0.3536], dtype=float32)

    References:
      You et al., Large Batch Optimization for Deep Learning: Training BERT
      in 76 minutes, ICLR 2020 (arXiv:1904.00962).
    """

    learning_rate: Any = hyper(valid=LEARNING_RATE)
    b1: Any = _ADAM.field()  # Adam's options, passed on with self.part
    b2: Any = _ADAM.field()
    eps: Any = _ADAM.field(default=1e-6)
    eps_root: Any = _ADAM.field()
    weight_decay: Any = hyper(default=0.0, valid=NONNEGATIVE)
    mask: Any = static_field(default=None)

    def build(self):
        return chain(
            self.part(scale_by_adam),
            add_decayed_weights(self.weight_decay, self.mask),
            scale_by_trust_ratio(),
            scale_by_learning_rate(self.learning_rate),
        )


class lars(Alias):
    r"""LARS: SGD with momentum whose steps are rescaled layer by layer.

    For each leaf with parameters :math:`\theta_{t-1}` and gradient
    :math:`g_t`, with :math:`r_t = g_t + \lambda \theta_{t-1}`:

    .. math::
      s_t = \eta_t\, \frac{c\, \|\theta_{t-1}\|}{\|r_t\| + \epsilon}\, r_t,\quad
      m_t = s_t + \mu\, m_{t-1},\quad u_t = -m_t

    (the ratio is 1 where either norm is zero; Nesterov gives
    :math:`u_t = -(s_t + \mu m_t)`).

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule.
      weight_decay: :math:`\lambda >= 0`, a number or a schedule.
      weight_decay_mask: a tree of booleans like the params (or a function of
        the params returning one, or True for all) selecting the leaves that
        decay.
      trust_coefficient: :math:`c`, >= 0.
      eps: :math:`\epsilon`, >= 0.
      trust_ratio_mask: like `weight_decay_mask`, selecting the leaves whose
        step is rescaled.
      momentum: :math:`\mu`, in [0, 1).
      nesterov: Nesterov momentum.

    Returns:
      The optimizer, a gradient transformation; `update` needs `params`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.lars(1.0)
      >>> p = jnp.array([3.0, 4.0])
      >>> u, _ = tx.update(jnp.array([0.6, -0.8]), tx.init(p), p)
      >>> u
      Array([-0.003,  0.004], dtype=float32)

    References:
      You et al., Large Batch Training of Convolutional Networks, 2017
      (arXiv:1708.03888).
    """

    learning_rate: Any = hyper(valid=LEARNING_RATE)
    weight_decay: Any = hyper(default=0.0, valid=NONNEGATIVE)
    weight_decay_mask: Any = static_field(default=True)
    trust_coefficient: Any = hyper(default=0.001, valid=NONNEGATIVE)
    eps: Any = hyper(default=0.0, valid=NONNEGATIVE)
    trust_ratio_mask: Any = static_field(default=True)
    momentum: Any = hyper(default=0.9, valid=DECAY)
    nesterov: bool = static_field(default=False)

    def build(self):
        return chain(
            add_decayed_weights(self.weight_decay, self.weight_decay_mask),
            masked(
                scale_by_trust_ratio(
                    trust_coefficient=self.trust_coefficient, eps=self.eps
                ),
                self.trust_ratio_mask,
            ),
            scale_by_learning_rate(self.learning_rate),
            trace(self.momentum, self.nesterov),
        )
