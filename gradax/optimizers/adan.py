"""Adan: adaptive Nesterov momentum."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .. import tree as gtree
from .._core.declarations import DECAY, NONNEGATIVE, hyper
from .._core.numerics import safe_increment
from .._core.protocol import GradientTransformation, LearningRateAlias, zero_count
from .._core.pytree import Module
from ..transforms.cautious import DecoupledWeightDecay


class ScaleByAdanState(NamedTuple):
    """State of :class:`scale_by_adan`."""

    m: Any  # first moment of the gradients, like params
    v: Any  # first moment of the gradient differences, like params
    n: Any  # second moment of the corrected gradients, like params
    g: Any  # previous gradient, like params
    t: jax.Array  # int32 scalar: number of updates so far


class _AdanOptions(Module):
    """The options of scale_by_adan and adan."""

    _abstract = True

    b1: Any = hyper(default=0.98, valid=DECAY)
    b2: Any = hyper(default=0.92, valid=DECAY)
    b3: Any = hyper(default=0.99, valid=DECAY)
    eps: Any = hyper(default=1e-8, valid=NONNEGATIVE)
    eps_root: Any = hyper(default=0.0, valid=NONNEGATIVE)


class scale_by_adan(_AdanOptions, GradientTransformation):
    """Rescales updates by Adan's three moments (no learning rate).

    See :class:`adan` for the update rule.

    Args:
      b1: decay of the gradients' average, in [0, 1).
      b2: decay of the gradient differences' average, in [0, 1).
      b3: decay of the second moment, in [0, 1).
      eps: added to the denominator outside the square root, >= 0.
      eps_root: added inside the square root, >= 0.
    """

    def init_state(self, params):
        return ScaleByAdanState(
            m=gtree.zeros_like(params),
            v=gtree.zeros_like(params),
            n=gtree.zeros_like(params),
            g=gtree.zeros_like(params),
            t=zero_count(),
        )

    def update_state(self, updates, state, params=None, **extra_args):
        b1, b2, b3 = self.b1, self.b2, self.b3
        # No previous gradient at the first step: the difference is zero.
        diff = gtree.where(
            state.t == 0, gtree.zeros_like(updates), gtree.sub(updates, state.g)
        )
        m = gtree.update_moment(updates, state.m, b1, 1)
        v = gtree.update_moment(diff, state.v, b2, 1)
        corrected = gtree.add_scale(updates, 1 - b2, diff)
        n = gtree.update_moment_per_elem_norm(corrected, state.n, b3, 2)
        t = safe_increment(state.t)
        m_hat = gtree.bias_correction(m, b1, t)
        v_hat = gtree.bias_correction(v, b2, t)
        n_hat = gtree.bias_correction(n, b3, t)
        eps, eps_root = self.eps, self.eps_root
        direction = gtree.add_scale(m_hat, 1 - b2, v_hat)
        denominator = jax.tree.map(lambda x: jnp.sqrt(x + eps_root) + eps, n_hat)
        new_updates = gtree.div(direction, denominator)
        return new_updates, ScaleByAdanState(m=m, v=v, n=n, g=updates, t=t)


class adan(DecoupledWeightDecay, _AdanOptions, LearningRateAlias):
    r"""Adan: adaptive Nesterov momentum, with decoupled weight decay.

    With gradient :math:`g_t`, step :math:`t \ge 1` and
    :math:`\Delta_t = g_t - g_{t-1}` (:math:`\Delta_1 = 0`):

    .. math::
      m_t &= b_1 m_{t-1} + (1 - b_1) g_t,\qquad
      v_t = b_2 v_{t-1} + (1 - b_2) \Delta_t,\\
      n_t &= b_3 n_{t-1} + (1 - b_3) \big(g_t + (1 - b_2) \Delta_t\big)^2,\\
      u_t &= -\eta_t \Big(\frac{\hat m_t + (1 - b_2) \hat v_t}
            {\sqrt{\hat n_t + \bar\epsilon} + \epsilon}
            + \lambda \theta_{t-1}\Big),

    where the hats divide by :math:`1 - b^t` for each moment's decay.
    Note that optax's (and this) :math:`b_i` are the paper's
    :math:`1 - \beta_i`.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule.
      b1: decay of the gradients' average, in [0, 1).
      b2: decay of the gradient differences' average, in [0, 1).
      b3: decay of the second moment, in [0, 1).
      eps: :math:`\epsilon \ge 0`.
      eps_root: :math:`\bar\epsilon \ge 0`.
      weight_decay: :math:`\lambda \ge 0`, a number or a schedule.
      mask: a tree of booleans like the params (or a function of the params
        returning one) selecting the leaves that decay.

    Returns:
      The optimizer: `chain(scale_by_adan(...), add_decayed_weights(...),
      scale_by_learning_rate(lr))`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.adan(0.1)
      >>> p = jnp.zeros(1)
      >>> _, state = tx.update(jnp.array([1.0]), tx.init(p), p)
      >>> _, state = tx.update(jnp.array([3.0]), state, p)
      >>> state[0].v, state[0].g  # (1 - b2) times the change 3 - 1; the last gradient
      (Array([0.16], dtype=float32), Array([3.], dtype=float32))

    References:
      Xie et al., Adan: Adaptive Nesterov Momentum Algorithm for Faster
      Optimizing Deep Models, 2022 (arXiv:2208.06677).
    """

    _direction = scale_by_adan

    eps_root: Any = 1e-8
    weight_decay: Any = 0.0
