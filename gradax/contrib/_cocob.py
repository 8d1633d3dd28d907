"""COCOB-Backprop: coin betting, a learning-rate-free optimizer."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .. import tree as gtree
from .._core.declarations import NONNEGATIVE, POSITIVE, hyper
from .._core.protocol import GradientTransformation, LearningRateAlias
from .._core.pytree import Module, static_field
from .._core.treecheck import require_params
from ..combinators.chain import chain
from ..transforms.scaling import scale_by_learning_rate
from ..transforms.weight_decay import add_decayed_weights


class COCOBState(NamedTuple):
    """State of :class:`scale_by_cocob`."""

    init_particles: Any  # the parameters at init
    cumulative_gradients: Any  # minus the sum of gradients, like params
    scale: Any  # largest gradient magnitude seen (at least eps), like params
    subgradients: Any  # sum of gradient magnitudes, like params
    reward: Any  # the bettor's wealth gained, like params


class _CocobOptions(Module):
    """The options of scale_by_cocob and cocob."""

    _abstract = True

    alpha: Any = hyper(default=100.0, valid=POSITIVE)
    eps: Any = hyper(default=1e-8, valid=POSITIVE)


class scale_by_cocob(_CocobOptions, GradientTransformation):
    """The COCOB-Backprop step. See :class:`cocob`.

    Args:
      alpha: :math:`\\alpha > 0`, bounds the bet early in training.
      eps: the initial :math:`L`, > 0.
    """

    def init_state(self, params):
        # Arrays of their own (copies of the params, zeros made one tree at a
        # time): a step that donates params and state refuses a buffer given
        # twice.
        return COCOBState(
            init_particles=jax.tree.map(jnp.array, params),
            cumulative_gradients=gtree.zeros_like(params),
            scale=gtree.full_like(params, self.eps),
            subgradients=gtree.zeros_like(params),
            reward=gtree.zeros_like(params),
        )

    def update_state(self, updates, state, params=None, **extra_args):
        require_params(params, "scale_by_cocob")
        alpha = self.alpha
        scale = jax.tree.map(
            lambda big_l, g: jnp.maximum(big_l, jnp.abs(g)), state.scale, updates
        )
        subgradients = jax.tree.map(
            lambda big_g, g: big_g + jnp.abs(g), state.subgradients, updates
        )
        reward = jax.tree.map(
            lambda r, g, p, p0: jnp.maximum(r - g * (p - p0), 0),
            state.reward,
            updates,
            params,
            state.init_particles,
        )
        cumulative = jax.tree.map(
            lambda c, g: c - g, state.cumulative_gradients, updates
        )

        def step(p, p0, c, big_l, big_g, r):
            bet = c / (big_l * jnp.maximum(big_g + big_l, alpha * big_l))
            return -p + (p0 + bet * (big_l + r))

        new_updates = jax.tree.map(
            step,
            params,
            state.init_particles,
            cumulative,
            scale,
            subgradients,
            reward,
        )
        return new_updates, COCOBState(
            init_particles=state.init_particles,
            cumulative_gradients=cumulative,
            scale=scale,
            subgradients=subgradients,
            reward=reward,
        )


class cocob(_CocobOptions, LearningRateAlias):
    r"""COCOB-Backprop: continuous coin betting, without a learning rate.

    Per coordinate, with gradient :math:`g_t` (weight decay added first and
    then multiplied by `learning_rate`), start :math:`x_0`:

    .. math::
      L_t = \max(L_{t-1}, |g_t|),\quad G_t = G_{t-1} + |g_t|,\quad
      R_t = \max(R_{t-1} - g_t (x_t - x_0), 0),\quad
      \theta_t = \theta_{t-1} - g_t,\\
      x_{t+1} = x_0 + \frac{\theta_t}{L_t \max(G_t + L_t, \alpha L_t)}
      (L_t + R_t),

    with :math:`L_0 = \epsilon`. `learning_rate` only rescales the incoming
    gradients (default 1, the method as published).

    Args:
      learning_rate: multiplies the gradients; a number, array or schedule.
      alpha: :math:`\alpha > 0`.
      eps: :math:`\epsilon > 0`, the initial :math:`L`.
      weight_decay: >= 0, added to the gradients as :math:`\lambda x_t`.
      mask: a tree of booleans like the params (or a function of the params
        returning one) selecting the leaves that decay.

    Returns:
      The optimizer, a gradient transformation; `update` needs `params`, for
      :math:`x_t - x_0` (:math:`x_0`: the params `init` saw).

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.cocob()
      >>> params = jnp.zeros(2)
      >>> state = tx.init(params)
      >>> for _ in range(3):  # gradients 100 times apart, the same bets
      ...     updates, state = tx.update(jnp.array([1.0, -100.0]), state, params)
      ...     params = gradax.apply_updates(params, updates)
      ...     print(params)
      [-0.01  0.01]
      [-0.0202  0.0202]
      [-0.030906  0.030906]

    References:
      Orabona and Tommasi, Training Deep Networks without Learning Rates
      Through Coin Betting, NeurIPS 2017 (arXiv:1705.07795).
    """

    learning_rate: Any = 1.0  # cocob's default (declared by LearningRateAlias)
    weight_decay: Any = hyper(default=0.0, valid=NONNEGATIVE)
    mask: Any = static_field(default=None)

    def build(self):
        return chain(
            add_decayed_weights(self.weight_decay, self.mask),
            scale_by_learning_rate(self.learning_rate, flip_sign=False),
            self.part(scale_by_cocob),
        )
