"""Yogi: Adam with an additive, sign-controlled second-moment update."""

from __future__ import annotations

from dataclasses import KW_ONLY
from typing import Any

import jax
import jax.numpy as jnp

from .. import tree as gtree
from .._core.declarations import DECAY, NONNEGATIVE, hyper
from .._core.numerics import abs_sq, safe_increment
from .._core.protocol import GradientTransformation, LearningRateAlias, zero_count
from .._core.pytree import Module, static_field
from ..combinators.chain import chain
from ..transforms.scaling import scale_by_learning_rate
from .adam import ScaleByAdamState, adam_direction


class _YogiOptions(Module):
    """The options of scale_by_yogi and yogi."""

    _abstract = True

    b1: Any = hyper(default=0.9, valid=DECAY)
    b2: Any = hyper(default=0.999, valid=DECAY)
    eps: Any = hyper(default=0.001, valid=NONNEGATIVE)
    _: KW_ONLY
    cautious: bool = static_field(default=False)


class scale_by_yogi(_YogiOptions, GradientTransformation):
    """Rescales updates by Yogi's moment estimates (no learning rate).

    See :class:`yogi` for the update rule. The state is a
    :class:`ScaleByAdamState`.

    Args:
      b1: decay of the first moment, in [0, 1).
      b2: rate of the second-moment update, in [0, 1).
      eps: added to the denominator outside the square root, >= 0.
      eps_root: added inside the square root, >= 0.
      initial_accumulator_value: starting value of both moments, >= 0.
      cautious: cautious updates (keyword-only, not in optax; see
        :func:`gradax.transforms.cautious.caution`).
    """

    eps_root: Any = hyper(default=0.0, valid=NONNEGATIVE)
    initial_accumulator_value: Any = hyper(default=1e-6, valid=NONNEGATIVE)

    def init_state(self, params):
        start = self.initial_accumulator_value
        return ScaleByAdamState(
            count=zero_count(),
            mu=gtree.full_like(params, start),
            nu=gtree.full_like(params, start),
        )

    def update_state(self, updates, state, params=None, **extra_args):
        b1, b2 = self.b1, self.b2
        mu = gtree.update_moment(updates, state.mu, b1, 1)

        def second(g, v):
            g2 = abs_sq(g)
            return v - (1 - b2) * jnp.sign(v - g2) * g2

        nu = jax.tree.map(second, updates, state.nu)
        count = safe_increment(state.count)
        mu_hat = gtree.bias_correction(mu, b1, count)
        nu_hat = gtree.bias_correction(nu, b2, count)
        new_updates = adam_direction(self, mu_hat, nu_hat, updates)
        return new_updates, ScaleByAdamState(count=count, mu=mu, nu=nu)


class yogi(_YogiOptions, LearningRateAlias):
    r"""Yogi: an Adam whose effective step cannot grow too fast.

    With gradient :math:`g_t` and step :math:`t \ge 1`, both moments starting
    at `1e-6`:

    .. math::
      m_t = b_1 m_{t-1} + (1 - b_1) g_t,\quad
      v_t = v_{t-1} - (1 - b_2)\, \mathrm{sign}(v_{t-1} - g_t^2)\, g_t^2,\\
      u_t = -\eta_t \frac{m_t / (1 - b_1^t)}{\sqrt{v_t / (1 - b_2^t)} + \epsilon}.

    Differences from optax: the keyword-only argument `cautious` is not in optax;
    the defaults give optax's numbers.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule.
      b1: decay of the first moment, in [0, 1).
      b2: rate of the second-moment update, in [0, 1).
      eps: :math:`\epsilon`, >= 0.
      cautious: cautious updates (keyword-only; see
        :func:`gradax.transforms.cautious.caution`).

    Returns:
      The optimizer, a gradient transformation.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.yogi(0.1)
      >>> _, state = tx.update(jnp.array([10.0]), tx.init(jnp.zeros(1)))
      >>> _, after = tx.update(jnp.array([0.0]), state)
      >>> state[0].nu, after[0].nu  # g = 0 adds nothing (Adam's v would decay by b2)
      (Array([0.100001], dtype=float32), Array([0.100001], dtype=float32))

    References:
      Zaheer et al., Adaptive Methods for Nonconvex Optimization, NeurIPS 2018.
    """

    def build(self):
        return chain(
            self.part(scale_by_yogi),
            scale_by_learning_rate(self.learning_rate),
        )
