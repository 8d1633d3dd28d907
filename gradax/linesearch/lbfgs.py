"""L-BFGS: the limited-memory quasi-Newton direction, and the optimizer."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .. import tree as gtree
from .._core.declarations import LEARNING_RATE, POSITIVE_INT, hyper
from .._core.numerics import safe_increment
from .._core.protocol import Alias, GradientTransformation
from .._core.pytree import static_field
from .._core.simple import identity
from ..combinators.chain import chain
from ..transforms.scaling import scale, scale_by_learning_rate
from . import _common as common
from ._zoom import scale_by_zoom_linesearch


class ScaleByLBFGSState(NamedTuple):
    """State of :class:`scale_by_lbfgs`."""

    count: jax.Array  # int32 scalar: updates done
    params: Any  # like params: the parameters of the last update
    updates: Any  # like params: the incoming updates (gradients) of the last one
    diff_params_memory: Any  # like params with a leading memory_size axis
    diff_updates_memory: Any  # like params with a leading memory_size axis
    weights_memory: jax.Array  # (memory_size,): 1 / <dw, du> of each pair


def _upcast(tree, dtype):
    return jax.tree.map(lambda x: x.astype(jnp.promote_types(x.dtype, dtype)), tree)


def _two_loop(updates, dw_memory, du_memory, rhos, gamma, newest, dtype):
    """`P u` for the L-BFGS inverse-Hessian approximation `P` (Nocedal and
    Wright, Algorithm 7.4); pairs are visited from `newest - 1` backwards."""
    size = rhos.shape[0]
    order = (newest + jnp.arange(size)) % size
    work = _upcast(updates, dtype)

    def pair(i):
        return jax.tree.map(lambda m: m[i], (dw_memory, du_memory))

    def backward(q, i):
        dw, du = pair(i)
        alpha = rhos[i] * common.real_vdot(dw, q, dtype)
        q = jax.tree.map(lambda x, y: (x - alpha * y).astype(x.dtype), q, du)
        return q, alpha

    q, alphas = jax.lax.scan(backward, work, order, reverse=True)
    r = jax.tree.map(lambda x: (gamma * x).astype(x.dtype), q)

    def forward(r, i_alpha):
        i, alpha = i_alpha
        dw, du = pair(i)
        beta = rhos[i] * common.real_vdot(du, r, dtype)
        r = jax.tree.map(lambda x, y: (x + (alpha - beta) * y).astype(x.dtype), r, dw)
        return r, None

    r, _ = jax.lax.scan(forward, r, (order, alphas))
    return r


class scale_by_lbfgs(GradientTransformation):
    """Multiplies updates by the L-BFGS inverse-Hessian approximation.

    See :class:`lbfgs` for the update rule.

    Args:
      memory_size: number of past (parameter, gradient) differences kept.
      scale_init_precond: start the approximation from :math:`\\gamma_k I`
        (else from the identity).
    """

    memory_size: int = hyper(default=10, valid=POSITIVE_INT, static=True)
    scale_init_precond: bool = static_field(default=True)

    def init_state(self, params):
        dtype = common.state_dtype(params)

        def stacked(p):
            # Broadcast from the parameter's shape, so that on an Explicit mesh
            # the memory is sharded like the parameter along its own axes.
            zeros = jnp.zeros_like(p, dtype=jnp.result_type(p))
            return jnp.broadcast_to(zeros, (self.memory_size, *jnp.shape(p)))

        return ScaleByLBFGSState(
            count=jnp.zeros([], jnp.int32),
            params=gtree.zeros_like(params),
            updates=gtree.zeros_like(params),
            diff_params_memory=jax.tree.map(stacked, params),
            diff_updates_memory=jax.tree.map(stacked, params),
            weights_memory=jnp.zeros([self.memory_size], dtype),
        )

    def update_state(self, updates, state, params=None, **extra_args):
        if params is None:
            raise TypeError("scale_by_lbfgs.update needs params")
        dtype = common.state_dtype(params)
        size = self.memory_size
        count = state.count
        newest, previous = count % size, (count - 1) % size

        # 1. Store the newest pair (nothing at the first step, where there is
        #    no previous point).
        started = count > 0
        dw = gtree.sub(params, state.params)
        du = gtree.sub(updates, state.updates)
        curvature = common.real_vdot(du, dw, dtype)
        rho = jnp.where(curvature == 0.0, 0.0, 1.0 / curvature)
        dw, du, rho = jax.tree.map(
            lambda x: jnp.where(started, x, jnp.zeros_like(x)), (dw, du, rho)
        )
        dw_memory, du_memory, rhos = jax.tree.map(
            lambda m, x: m.at[previous].set(x.astype(m.dtype)),
            (state.diff_params_memory, state.diff_updates_memory),
            (dw, du),
        ) + (state.weights_memory.at[previous].set(rho.astype(dtype)),)

        # 2. The scale of the initial approximation.
        if self.scale_init_precond:
            du_sq = gtree.norm(_upcast(du, dtype), squared=True)
            gamma = jnp.where(du_sq > 0.0, curvature / du_sq, 1.0)
            # The first step is at most of unit length.
            norm = gtree.norm(_upcast(jax.lax.stop_gradient(updates), dtype))
            gamma = jnp.where(started, gamma, jnp.minimum(1.0, 1.0 / norm))
        else:
            gamma = jnp.asarray(1.0, dtype)

        # 3. The direction.
        direction = _two_loop(
            updates, dw_memory, du_memory, rhos, gamma.astype(dtype), newest, dtype
        )
        new_state = ScaleByLBFGSState(
            count=safe_increment(count),
            params=params,
            updates=updates,
            diff_params_memory=dw_memory,
            diff_updates_memory=du_memory,
            weights_memory=rhos,
        )
        return direction, new_state


class lbfgs(Alias):
    r"""L-BFGS: a quasi-Newton method with a limited memory, and a line search.

    With parameters :math:`w_k`, gradients :math:`g_k`, and the last :math:`m`
    differences :math:`s_j = w_{j+1} - w_j`, :math:`y_j = g_{j+1} - g_j`,
    :math:`\rho_j = 1 / \langle y_j, s_j\rangle`, the direction is
    :math:`d_k = -P_k g_k` with

    .. math::
      P_{k,j+1} = V_j^\top P_{k,j} V_j + \rho_j s_j s_j^\top,\quad
      V_j = I - \rho_j y_j s_j^\top,\quad P_{k,k-m} = \gamma_k I,

    :math:`\gamma_k = \langle s_{k-1}, y_{k-1}\rangle / \|y_{k-1}\|^2`
    (:math:`\gamma_0 = \min(1, 1/\|g_0\|)`), computed by the two-loop
    recursion; then :math:`w_{k+1} = w_k + \eta_k d_k` with :math:`\eta_k`
    from the line search (by default a zoom search for the strong Wolfe
    conditions, starting at 1).

    `update` needs the keyword arguments `value`, `grad` and
    `value_fn` of the line search. :func:`value_and_grad_from_state` reuses
    the value and gradient the search computed at the accepted point, and
    :func:`gradax.minimize` runs the whole loop in one compiled call. For
    complex parameters, pass `conj(grad)` as updates and `grad`.

    Differences from optax: the state never changes dtype whatever the
    precision of the objective's value (see
    :class:`scale_by_zoom_linesearch`); inner products of half-precision
    parameters are accumulated in float32.

    Args:
      learning_rate: scales the direction; None (default) for the line
        search's step alone.
      memory_size: :math:`m`, the number of pairs kept.
      scale_init_precond: use :math:`\gamma_k` (else :math:`\gamma_k = 1`).
      linesearch: a line search transformation, or None for none.

    Returns:
      The optimizer, `chain(scale_by_lbfgs(...), scale(-1) or
      scale_by_learning_rate(learning_rate), linesearch)`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> f = lambda x: jnp.sum((x - jnp.arange(3.0)) ** 2)
      >>> gradax.minimize(f, jnp.zeros(3)).params
      Array([0., 1., 2.], dtype=float32)

    References:
      Liu and Nocedal, On the limited memory BFGS method for large scale
      optimization, 1989 (doi:10.1007/BF01589116); Nocedal and Wright,
      Numerical Optimization, 1999, Algorithms 7.4, 7.5.
    """

    learning_rate: Any = hyper(default=None, valid=LEARNING_RATE)
    memory_size: int = hyper(default=10, valid=POSITIVE_INT, static=True)
    scale_init_precond: bool = static_field(default=True)
    linesearch: Any = scale_by_zoom_linesearch(
        max_linesearch_steps=20, initial_guess_strategy="one"
    )

    def build(self):
        if self.learning_rate is None:
            step = scale(-1.0)
        else:
            step = scale_by_learning_rate(self.learning_rate)
        return chain(
            self.part(scale_by_lbfgs),
            step,
            identity() if self.linesearch is None else self.linesearch,
        )
