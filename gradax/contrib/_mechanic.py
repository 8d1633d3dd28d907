"""Mechanic: a learning-rate tuner wrapped around any optimizer."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .. import tree as gtree
from .._core.declarations import NONNEGATIVE, POSITIVE, POSITIVE_INT, hyper
from .._core.numerics import real_dtype, safe_increment
from .._core.protocol import (
    GradientTransformation,
    TransformationLike,
    transformation_field,
    zero_count,
)
from .._core.treecheck import require_params


class MechanicState(NamedTuple):
    """State of :class:`mechanize`."""

    base_optimizer_state: Any
    count: jax.Array  # int32 scalar
    r: jax.Array  # [num_betas]: wealth gained per beta
    m: jax.Array  # [num_betas]: running max of |h|
    v: jax.Array  # [num_betas]: running sum of h^2
    s: jax.Array  # [num_betas]: the scales, summed for the step size
    x0: Any  # the parameters at the first update


class mechanize(GradientTransformation):
    r"""Mechanic: learns a scale :math:`s` for the updates of `base_optimizer`.

    The base optimizer's updates :math:`\Delta_t` are accumulated into
    :math:`\delta_t = \delta_{t-1} - \Delta_t` and the parameters become
    :math:`x_{t+1} = x_0 - S_t \delta_t`, :math:`S_t = \sum_i s_{t,i}`. Each
    scale is a coin-betting learner fed :math:`h_t = \langle g_t + \lambda
    S_{t-1} \|g_t\| x_t / (\|x_t\| + \epsilon), \delta_{t-1}\rangle` with the
    decay :math:`\beta_i = 1 - 10^{-i}`, :math:`i = 1..n`:

    .. math::
      m_{t,i} = \max(\beta_i m_{t-1,i}, |h_t| + \epsilon),\quad
      v_{t,i} = \beta_i^2 v_{t-1,i} + h_t^2,\\
      r_{t,i} = \beta_i r_{t-1,i} + \mathrm{clip}(h_t, \pm m_{t-1,i})\, s_{t-1,i},
      \quad
      s_{t,i} = \frac{s_{\text{init}}\, m_{t,i} / n + \max(r_{t,i}, 0)}
                {\sqrt{v_{t,i}} + \epsilon}.

    Args:
      base_optimizer: the optimizer whose updates are scaled (gradax or optax).
      weight_decay: :math:`\lambda`, >= 0.
      eps: :math:`\epsilon`, >= 0.
      s_init: :math:`s_{\text{init}} > 0`, the initial scale of each learner.
      num_betas: :math:`n \ge 1`, the number of decays.

    Returns:
      A gradient transformation; `update` needs `params`.

    Example:
      >>> import jax, jax.numpy as jnp, gradax
      >>> params = jnp.array([1.0, -2.0])
      >>> tx = gradax.mechanize(gradax.sgd(0.1))
      >>> state = tx.init(params)
      >>> grads = jax.grad(lambda p: (p**2).sum())(params)
      >>> updates, state = tx.update(grads, state, params)
      >>> state.s.shape
      (6,)

    Differences from optax: for complex parameters the scales are real and
    :math:`h_t` is the real part of the inner product.

    References:
      Cutkosky, Defazio and Mehta, Mechanic: A Learning Rate Tuner, NeurIPS
      2023 (arXiv:2306.00144).
    """

    base_optimizer: TransformationLike = transformation_field()
    weight_decay: Any = hyper(default=0.01, valid=NONNEGATIVE)
    eps: Any = hyper(default=1e-8, valid=NONNEGATIVE)
    s_init: Any = hyper(default=1e-6, valid=POSITIVE)
    num_betas: int = hyper(default=6, valid=POSITIVE_INT, static=True)

    def init_state(self, params):
        dtype = real_dtype(gtree.dtype(params, "lowest"))
        # One array per leaf (a step that donates the state refuses a
        # buffer given twice).
        return MechanicState(
            base_optimizer_state=self.base_optimizer.init(params),
            count=zero_count(),
            r=jnp.zeros([self.num_betas], dtype),
            m=jnp.zeros([self.num_betas], dtype),
            v=jnp.zeros([self.num_betas], dtype),
            s=jnp.ones([self.num_betas], dtype) * self.s_init,
            x0=jax.tree.map(jnp.array, params),
        )

    def update_state(self, updates, state, params=None, **extra_args):
        require_params(params, "mechanize")
        wd, eps, s_init = self.weight_decay, self.eps, self.s_init
        base_updates, base_state = self.base_optimizer.update(
            updates, state.base_optimizer_state, params, **extra_args
        )
        first = state.count == 0
        x0 = jax.tree.map(lambda p, x: jnp.where(first, p, x), params, state.x0)
        s_sum = jnp.sum(state.s)
        grad_norm = gtree.norm(updates)
        param_norm = gtree.norm(params)
        grads = jax.tree.map(
            lambda g, p: g + wd * s_sum * grad_norm / (param_norm + eps) * p,
            updates,
            params,
        )
        delta_prev = jax.tree.map(lambda x, x0: (x0 - x) / (s_sum + eps), params, x0)
        delta = jax.tree.map(lambda d, u: d - u, delta_prev, base_updates)
        h = jnp.real(gtree.vdot(grads, delta_prev))
        clipped_h = jnp.clip(h, -state.m, state.m)
        betas = jnp.array(
            [1.0 - 0.1**i for i in range(1, self.num_betas + 1)], state.s.dtype
        )
        m = jnp.maximum(betas * state.m, jnp.abs(h) + eps)
        v = (betas**2) * state.v + h**2
        r = betas * state.r + clipped_h * state.s
        wealth = (s_init / self.num_betas) * m + jnp.maximum(0.0, r)
        s = wealth / (jnp.sqrt(v) + eps)
        s_total = jnp.sum(s)
        new_updates = jax.tree.map(
            lambda x0, d, x: x0 - s_total * d - x, x0, delta, params
        )
        return new_updates, MechanicState(
            base_optimizer_state=base_state,
            count=safe_increment(state.count),
            r=r,
            m=m,
            v=v,
            s=s,
            x0=x0,
        )
