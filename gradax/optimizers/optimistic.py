"""Optimistic gradient descent and optimistic Adam (for min-max games)."""

from __future__ import annotations

from dataclasses import KW_ONLY
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .. import tree as gtree
from .._core.declarations import ANY, LEARNING_RATE, NONNEGATIVE, hyper
from .._core.protocol import Alias, GradientTransformation
from ..combinators.chain import chain
from ..transforms.scaling import scale_by_learning_rate
from .adam import _ADAM, scale_by_adam


class ScaleByOptimisticGradientState(NamedTuple):
    """State of :class:`scale_by_optimistic_gradient`."""

    is_initial_step: jax.Array  # bool scalar: no update made yet
    previous_gradient: Any  # the last incoming update, like params


class scale_by_optimistic_gradient(GradientTransformation):
    r"""The optimistic direction :math:`(\alpha + \beta) g_t - \beta g_{t-1}`.

    See :class:`optimistic_gradient_descent` for the update rule; at the first
    step :math:`g_0 = g_1`, so the direction is :math:`\alpha g_1`.

    Args:
      alpha: :math:`\alpha`, any real number: the weight of the current
        update.
      beta: :math:`\beta`, any real number: the weight of the change since
        the last one.
    """

    # Any sign, as in optax: optimistic_adam gives its learning rate and
    # optimism here, and a negative learning rate (ascent) is accepted.
    alpha: Any = hyper(default=1.0, valid=ANY)
    beta: Any = hyper(default=1.0, valid=ANY)

    def init_state(self, params):
        return ScaleByOptimisticGradientState(
            is_initial_step=jnp.array(True),
            previous_gradient=gtree.zeros_like(params),
        )

    def update_state(self, updates, state, params=None, **extra_args):
        alpha, beta = self.alpha, self.beta
        first = state.is_initial_step

        def direction(g, previous):
            previous = jnp.where(first, g, previous)
            return (alpha + beta) * g - beta * previous

        new_updates = jax.tree.map(direction, updates, state.previous_gradient)
        return new_updates, ScaleByOptimisticGradientState(
            is_initial_step=jnp.array(False), previous_gradient=updates
        )


class optimistic_gradient_descent(Alias):
    r"""Optimistic gradient descent (OGD), for smooth games and min-max problems.

    With :math:`g_0 = g_1`,

    .. math::
      u_t = -\eta_t \big((\alpha + \beta) g_t - \beta g_{t-1}\big)
          = -\eta_t \big(\alpha g_t + \beta (g_t - g_{t-1})\big).

    :math:`\alpha = \beta = 1` is the classic optimistic step
    :math:`-\eta (2 g_t - g_{t-1})`. For a saddle point, descend on the
    minimizing player's variables and ascend (flip the gradient) on the
    maximizing player's.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule.
      alpha: :math:`\alpha \ge 0`, the weight of the current gradient.
      beta: :math:`\beta \ge 0`, the weight of the gradient's change.

    Returns:
      The optimizer: `chain(scale_by_optimistic_gradient(alpha, beta),
      scale_by_learning_rate(learning_rate))`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.optimistic_gradient_descent(0.1)
      >>> state = tx.init(jnp.zeros(1))
      >>> for g in (1.0, 1.0, -1.0):  # a reversal: (alpha + beta) g_t - beta g_{t-1}
      ...     u, state = tx.update(jnp.array([g]), state)
      ...     print(u)
      [-0.1]
      [-0.1]
      [0.3]

    References:
      Mokhtari et al., A Unified Analysis of Extra-gradient and Optimistic
      Gradient Methods for Saddle Point Problems, AISTATS 2020
      (arXiv:1901.08511).
    """

    learning_rate: Any = hyper(valid=LEARNING_RATE)
    alpha: Any = hyper(default=1.0, valid=NONNEGATIVE)
    beta: Any = hyper(default=1.0, valid=NONNEGATIVE)

    def build(self):
        return chain(
            self.part(scale_by_optimistic_gradient),
            scale_by_learning_rate(self.learning_rate),
        )


class optimistic_adam_v2(Alias):
    r"""Optimistic Adam: the optimistic step on Adam's direction.

    With Adam's (by default Nesterov) direction :math:`d_t` of
    :class:`gradax.adam` and :math:`d_0 = d_1`:

    .. math::
      u_t = -\eta_t \big((\alpha + \beta) d_t - \beta d_{t-1}\big).

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule.
      alpha: :math:`\alpha \ge 0`, the weight of the current direction.
      beta: :math:`\beta \ge 0`, the weight of the direction's change.
      b1: decay of Adam's first moment, in [0, 1).
      b2: decay of Adam's second moment, in [0, 1).
      eps: added to Adam's denominator outside the square root, >= 0.
      eps_root: added inside the square root, >= 0.
      mu_dtype: dtype of the first moment (default: the params').
      nesterov: use Nesterov momentum in Adam's direction.

    Returns:
      The optimizer: `chain(scale_by_adam(...),
      scale_by_optimistic_gradient(alpha, beta), scale_by_learning_rate(lr))`.

    Example:
      >>> import jax, jax.numpy as jnp, gradax
      >>> params = jnp.array([1.0, -2.0])
      >>> tx = gradax.optimistic_adam_v2(0.1)
      >>> state = tx.init(params)
      >>> updates, state = tx.update(jax.grad(lambda p: (p**2).sum())(params), state)
      >>> gradax.apply_updates(params, updates)
      Array([ 0.9, -1.9], dtype=float32)

    References:
      Daskalakis et al., Training GANs with Optimism, ICLR 2018
      (arXiv:1711.00141).
    """

    learning_rate: Any = hyper(valid=LEARNING_RATE)
    _: KW_ONLY
    alpha: Any = hyper(default=1.0, valid=NONNEGATIVE, kw_only=True)
    beta: Any = hyper(default=1.0, valid=NONNEGATIVE, kw_only=True)
    b1: Any = _ADAM.field()  # Adam's options, passed on with self.part
    b2: Any = _ADAM.field()
    eps: Any = _ADAM.field()
    eps_root: Any = _ADAM.field()
    mu_dtype: Any = _ADAM.field()
    nesterov: bool = _ADAM.field(default=True)

    def build(self):
        return chain(
            self.part(scale_by_adam),
            self.part(scale_by_optimistic_gradient),
            scale_by_learning_rate(self.learning_rate),
        )
