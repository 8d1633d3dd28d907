"""MADGRAD: momentumized, adaptive, dual averaged gradient method."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .. import tree as gtree
from .._core.declarations import DECAY, LEARNING_RATE, NONNEGATIVE, Shared, hyper
from .._core.numerics import safe_increment
from .._core.protocol import Alias, GradientTransformation, zero_count
from .._core.treecheck import require_params
from ..combinators.chain import chain
from ..transforms.weight_decay import add_decayed_weights


class MadgradState(NamedTuple):
    """State of :class:`scale_by_madgrad`."""

    count: jax.Array  # int32 scalar
    grad_sum_sq: Any  # weighted sum of squared gradients, like params
    s: Any  # weighted sum of gradients, like params
    x0: Any  # the parameters at init


# scale_by_madgrad's options, declared once: it and the optimizers that
# build it take each field from here and pass the values on with Alias.part.
_MADGRAD = Shared(
    learning_rate=hyper(valid=LEARNING_RATE),
    momentum=hyper(default=0.9, valid=DECAY),
    eps=hyper(default=1e-6, valid=NONNEGATIVE),
)


class scale_by_madgrad(GradientTransformation):
    """The MADGRAD step, learning rate included. See :class:`madgrad`.

    The learning rate weighs the dual average, so it is part of this
    transformation (as in optax); the returned updates are the full step.

    Args:
      learning_rate: :math:`\\eta`, a number, an array or a schedule.
      momentum: :math:`\\mu`, in [0, 1).
      eps: :math:`\\epsilon`, >= 0.
    """

    learning_rate: Any = _MADGRAD.field()
    momentum: Any = _MADGRAD.field()
    eps: Any = _MADGRAD.field()

    def init_state(self, params):
        return MadgradState(
            count=zero_count(),
            grad_sum_sq=gtree.zeros_like(params),
            s=gtree.zeros_like(params),
            x0=jax.tree.map(jnp.array, params),
        )

    def update_state(self, updates, state, params=None, **extra_args):
        require_params(params, "scale_by_madgrad")
        eps, momentum = self.eps, self.momentum
        weight = (self.learning_rate + eps) * jnp.sqrt(state.count + 1)
        grad_sum_sq = jax.tree.map(
            lambda acc, g: acc + (weight * g**2).astype(g.dtype),
            state.grad_sum_sq,
            updates,
        )
        s = jax.tree.map(
            lambda acc, g: acc + (weight * g).astype(g.dtype), state.s, updates
        )

        def step(x0, s, acc, x):
            z = x0 - s / (jnp.cbrt(acc) + eps)
            return (1 - momentum) * z + momentum * x - x

        new_updates = jax.tree.map(step, state.x0, s, grad_sum_sq, params)
        return new_updates, MadgradState(
            count=safe_increment(state.count),
            grad_sum_sq=grad_sum_sq,
            s=s,
            x0=state.x0,
        )


class madgrad(Alias):
    r"""MADGRAD: dual averaging with a cube-root adaptive scale and momentum.

    With gradient :math:`g_k` (weight decay :math:`\lambda x_k` added first),
    step :math:`k \ge 0` and :math:`\lambda_k = (\eta_k + \epsilon)\sqrt{k+1}`:

    .. math::
      s_k = s_{k-1} + \lambda_k g_k,\quad
      v_k = v_{k-1} + \lambda_k g_k^2,\quad
      z_k = x_0 - \frac{s_k}{v_k^{1/3} + \epsilon},\\
      x_{k+1} = (1 - \mu) z_k + \mu x_k,\qquad u_k = x_{k+1} - x_k.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule.
      momentum: :math:`\mu`, in [0, 1).
      weight_decay: >= 0, added to the gradient as :math:`\lambda x_k`.
      eps: :math:`\epsilon`, >= 0.

    Returns:
      The optimizer, a gradient transformation; `update` needs `params`, the
      :math:`x_k` of the momentum step.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.madgrad(0.1)
      >>> params = jnp.zeros(1)
      >>> state = tx.init(params)
      >>> for _ in range(3):  # x moves 1 - momentum = 0.1 of the way to z each step
      ...     updates, state = tx.update(jnp.ones(1), state, params)
      ...     params = gradax.apply_updates(params, updates)
      ...     print(params)
      [-0.0215]
      [-0.0582]
      [-0.108]

    References:
      Defazio and Jelassi, Adaptivity without Compromise: A Momentumized,
      Adaptive, Dual Averaged Gradient Method for Stochastic Optimization,
      2021 (arXiv:2101.11075).
    """

    learning_rate: Any = _MADGRAD.field()
    momentum: Any = _MADGRAD.field()
    weight_decay: Any = hyper(default=0.0, valid=NONNEGATIVE)
    eps: Any = _MADGRAD.field()

    def build(self):
        return chain(
            add_decayed_weights(self.weight_decay),
            self.part(scale_by_madgrad),
        )
