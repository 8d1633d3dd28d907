"""ACProp: AdaBelief's centred second moment, used one step late."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from .. import tree as gtree
from .._core.declarations import DECAY, NONNEGATIVE, hyper
from .._core.numerics import safe_increment
from .._core.protocol import GradientTransformation, LearningRateAlias
from .._core.pytree import Module
from ..optimizers.adabelief import ScaleByBeliefState
from ..optimizers.adam import zero_moments
from ..transforms.cautious import DecoupledWeightDecay


class _AcpropOptions(Module):
    """The options of scale_by_acprop and acprop."""

    _abstract = True

    b1: Any = hyper(default=0.9, valid=DECAY)
    b2: Any = hyper(default=0.999, valid=DECAY)
    eps: Any = hyper(default=1e-16, valid=NONNEGATIVE)
    eps_root: Any = hyper(default=1e-16, valid=NONNEGATIVE)


class scale_by_acprop(_AcpropOptions, GradientTransformation):
    """The ACProp direction, without learning rate. See :class:`acprop`.

    Args:
      b1: decay of the first moment, in [0, 1).
      b2: decay of the second central moment, in [0, 1).
      eps: added to the denominator outside the square root, >= 0.
      eps_root: added to the second central moment at every step, >= 0
        (must be positive to differentiate through the update).
    """

    def init_state(self, params):
        return zero_moments(ScaleByBeliefState, params)

    def update_state(self, updates, state, params=None, **extra_args):
        b2, eps, eps_root = self.b2, self.eps, self.eps_root
        mu = gtree.update_moment(updates, state.mu, self.b1, 1)
        # The deviation from the *previous* mean, as in the authors' code.
        deviation = gtree.sub(updates, state.mu)
        nu = gtree.update_moment_per_elem_norm(deviation, state.nu, b2, 2)
        nu = jax.tree.map(lambda v: v + eps_root, nu)
        count = safe_increment(state.count)
        # The denominator uses s_{t-1}; at the first step there is none, and
        # the gradient is divided by 1 + eps.
        first = state.count == 0
        nu_hat = gtree.bias_correction(
            state.nu, b2, jnp.where(first, count, state.count)
        )
        direction = jax.tree.map(
            lambda g, v: g / (jnp.sqrt(jnp.where(first, 1, v)) + eps),
            updates,
            nu_hat,
        )
        return direction, ScaleByBeliefState(count=count, mu=mu, nu=nu)


class acprop(DecoupledWeightDecay, _AcpropOptions, LearningRateAlias):
    r"""ACProp: momentum centring with an asynchronous (one-step-late) update.

    With gradient :math:`g_t`, step :math:`t \ge 1`, :math:`m_0 = s_0 = 0`:

    .. math::
      m_t = b_1 m_{t-1} + (1 - b_1) g_t,\quad
      s_t = b_2 s_{t-1} + (1 - b_2) |g_t - m_{t-1}|^2 + \bar\epsilon,\\
      u_t = -\eta_t \left(\frac{g_t}{\sqrt{s_{t-1} / (1 - b_2^{t-1})}
      + \epsilon} + \lambda \theta_{t-1}\right),

    with the fraction replaced by :math:`g_1 / (1 + \epsilon)` at
    :math:`t = 1`. The numerator is the raw gradient and the denominator
    uses only past gradients, which is what makes the update asynchronous.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule.
      b1: decay of the first moment, in [0, 1).
      b2: decay of the second central moment, in [0, 1).
      eps: :math:`\epsilon`, >= 0.
      eps_root: :math:`\bar\epsilon`, >= 0.
      weight_decay: :math:`\lambda >= 0` (multiplied by the learning rate).
      mask: a tree of booleans like the params (or a function of the params
        returning one) selecting the leaves that decay.

    Returns:
      The optimizer, a gradient transformation; `update` needs `params` for
      the weight decay.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.contrib.acprop(0.1)
      >>> g, p = jnp.array([2.0, -4.0]), jnp.zeros(2)
      >>> first, state = tx.update(g, tx.init(p), p)
      >>> second, state = tx.update(g, state, p)
      >>> print(first, second)  # no past gradient to divide by at the first step
      [-0.2  0.4] [-0.099999  0.099999]

    References:
      Zhuang et al., Momentum Centering and Asynchronous Update for Adaptive
      Gradient Methods, NeurIPS 2021 (arXiv:2110.05454).
    """

    _direction = scale_by_acprop

    weight_decay: Any = 0.0
