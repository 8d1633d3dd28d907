"""MoMo and MoMo-Adam: momentum model-based adaptive step sizes."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import tree as gtree
from .._core.declarations import ANY, DECAY, LEARNING_RATE, NONNEGATIVE, hyper
from .._core.numerics import real_dtype, safe_increment
from .._core.protocol import GradientTransformation, zero_count
from .._core.pytree import static_field
from .._core.treecheck import require_params
from ._util import require_value

# Below this squared norm of the momentum the step is zero (float64's eps, as
# in optax, whatever the dtype).
_TINY = float(np.finfo(np.float64).eps)


def _dot(a: Any, b: Any) -> jax.Array:
    return jnp.real(gtree.vdot(a, b))


def _initial_model(params: Any, lower_bound: Any) -> dict[str, jax.Array]:
    """The loss model's scalars before the first step, in the params' real dtype."""
    dtype = real_dtype(gtree.dtype(params, "lowest"))
    return {
        "barf": jnp.zeros([], dtype),
        "gamma": jnp.zeros([], dtype),
        "lb": jnp.asarray(lower_bound, dtype),
    }


def _averaged_model(
    beta: Any, state: Any, value: Any, updates: Any, params: Any
) -> tuple[jax.Array, jax.Array]:
    """The running averages of the loss value and of `<g, x>`."""
    barf = beta * state.barf + (1 - beta) * jnp.asarray(value, state.barf.dtype)
    gamma = beta * state.gamma + (1 - beta) * _dot(updates, params)
    return barf, gamma


def _step_size(
    tx: Any,
    state: Any,
    barf: Any,
    gamma: Any,
    direction: Any,
    params: Any,
    sq_norm: Any,
    max_step: Any,
    bias_correction: Any = 1.0,
) -> tuple[jax.Array, jax.Array, dict[str, jax.Array]]:
    """The step size `tau` of momo and momo_adam, the decay and the new scalars.

    `direction` is the momentum and `sq_norm` its squared norm in the
    method's metric; the decay is `1 + learning_rate * weight_decay`.
    `bias_correction` is momo_adam's `1 - b1**t` (momo's model has none: a
    factor 1, which changes no bit).
    """
    bc1, lb, lower = bias_correction, state.lb, tx.lower_bound
    iprod = _dot(direction, params)
    decay = 1 + tx.learning_rate * tx.weight_decay
    if tx.adapt_lower_bound:
        cap = decay * (barf - gamma) + iprod
        lb = jnp.where(
            cap < decay * bc1 * lb, jnp.maximum(cap / (2 * bc1 * decay), lower), lb
        )
    t1 = jnp.maximum(decay * (barf - bc1 * lb - gamma) + iprod, 0.0) / sq_norm
    t1 = jnp.where(sq_norm <= _TINY, 0.0, t1)
    tau = jnp.minimum(max_step, t1)
    if tx.adapt_lower_bound:
        new_lb = ((barf + iprod - gamma) - (1 / 2) * tau * sq_norm) / bc1
        lb = jnp.maximum(new_lb, lower)
    return tau, decay, {"barf": barf, "gamma": gamma, "lb": lb}


class MomoState(NamedTuple):
    """State of :class:`momo`."""

    exp_avg: Any  # momentum of the gradients, like params
    barf: jax.Array  # scalar: momentum of the loss values
    gamma: jax.Array  # scalar: momentum of <g, x>
    lb: jax.Array  # scalar: the lower bound of the loss in use
    count: jax.Array  # int32 scalar


class momo(GradientTransformation):
    r"""MoMo: SGD with momentum and a Polyak-type step size capped by `learning_rate`.

    With loss value :math:`f_t`, gradient :math:`g_t`, parameters :math:`x_t`,
    :math:`\beta_0 = 0` and :math:`\beta_t = \beta` after:

    .. math::
      \bar f_t = \beta_t \bar f_{t-1} + (1 - \beta_t) f_t,\quad
      d_t = \beta_t d_{t-1} + (1 - \beta_t) g_t,\quad
      \gamma_t = \beta_t \gamma_{t-1} + (1 - \beta_t)\langle g_t, x_t\rangle,\\
      \tau_t = \min\!\left(\eta_t, \frac{\max((1 + \eta_t\lambda)
      (\bar f_t - f_* - \gamma_t) + \langle d_t, x_t\rangle, 0)}
      {\|d_t\|^2}\right),\quad
      u_t = -\frac{\eta_t\lambda}{1 + \eta_t\lambda} x_t - \tau_t d_t,

    with :math:`f_*` = `lower_bound` (estimated online with
    `adapt_lower_bound`) and :math:`\tau_t = 0` when :math:`d_t = 0`.

    Args:
      learning_rate: :math:`\eta`, the largest step size; number or schedule.
      beta: :math:`\beta`, the momentum, in [0, 1).
      lower_bound: :math:`f_*`, a lower bound of the loss, any real number (0
        for most losses).
      weight_decay: :math:`\lambda`, >= 0.
      adapt_lower_bound: estimate the lower bound online, starting from
        `lower_bound`.

    Returns:
      The optimizer, a gradient transformation; `update` needs `params`
      and `value=` (the loss at the params).

    Example:
      >>> import jax, jax.numpy as jnp, gradax
      >>> loss = lambda p: jnp.sum(p**2)
      >>> params = jnp.array([1.0, -2.0])
      >>> tx = gradax.momo(learning_rate=1.0)
      >>> state = tx.init(params)
      >>> value, grads = jax.value_and_grad(loss)(params)
      >>> updates, state = tx.update(grads, state, params, value=value)
      >>> gradax.apply_updates(params, updates)
      Array([ 0.5, -1. ], dtype=float32)

    Differences from optax: for complex parameters the scalars are real and
    inner products are their real parts.

    References:
      Schaipp, Ohana, Eickenberg, Defazio and Gower, MoMo: Momentum Models
      for Adaptive Learning Rates, ICML 2024 (arXiv:2305.07583).
    """

    learning_rate: Any = hyper(default=1.0, valid=LEARNING_RATE)
    beta: Any = hyper(default=0.9, valid=DECAY)
    lower_bound: Any = hyper(default=0.0, valid=ANY)
    weight_decay: Any = hyper(default=0.0, valid=NONNEGATIVE)
    adapt_lower_bound: bool = static_field(default=False)

    def init_state(self, params):
        return MomoState(
            exp_avg=gtree.zeros_like(params),
            **_initial_model(params, self.lower_bound),
            count=zero_count(),
        )

    def update_state(self, updates, state, params=None, *, value=None, **extra_args):
        require_params(params, "momo")
        require_value(value, "momo")
        alpha, wd = self.learning_rate, self.weight_decay
        bt = jnp.where(state.count == 0, 0.0, self.beta)
        barf, gamma = _averaged_model(bt, state, value, updates, params)
        exp_avg = jax.tree.map(
            lambda d, g: bt * d + (1 - bt) * g, state.exp_avg, updates
        )
        sq_norm = gtree.norm(exp_avg, squared=True)
        tau, decay, model = _step_size(
            self, state, barf, gamma, exp_avg, params, sq_norm, max_step=alpha
        )
        new_updates = jax.tree.map(
            lambda d, p: -(alpha * wd) / decay * p - tau * d, exp_avg, params
        )
        return new_updates, MomoState(
            exp_avg=exp_avg, **model, count=safe_increment(state.count)
        )


class MomoAdamState(NamedTuple):
    """State of :class:`momo_adam`."""

    exp_avg: Any  # first moment, like params
    exp_avg_sq: Any  # second moment, like params
    barf: jax.Array  # scalar: momentum of the loss values
    gamma: jax.Array  # scalar: momentum of <g, x>
    lb: jax.Array  # scalar: the lower bound of the loss in use
    count: jax.Array  # int32 scalar


class momo_adam(GradientTransformation):
    r"""MoMo-Adam: Adam with a MoMo step size capped by `learning_rate`.

    With loss value :math:`f_t`, gradient :math:`g_t`, parameters :math:`x_t`,
    step :math:`t \ge 1`, :math:`\rho_t = 1 - b_1^t`:

    .. math::
      \bar f_t = b_1 \bar f_{t-1} + (1 - b_1) f_t,\quad
      d_t = b_1 d_{t-1} + (1 - b_1) g_t,\quad
      v_t = b_2 v_{t-1} + (1 - b_2) g_t^2,\\
      D_t = \epsilon + \sqrt{v_t / (1 - b_2^t)},\quad
      \gamma_t = b_1 \gamma_{t-1} + (1 - b_1)\langle g_t, x_t\rangle,\\
      \tau_t = \min\!\left(\frac{\eta_t}{\rho_t}, \frac{\max((1 + \eta_t
      \lambda)(\bar f_t - \rho_t f_* - \gamma_t) + \langle d_t, x_t\rangle,
      0)}{\langle d_t, d_t / D_t\rangle}\right),\quad
      u_t = -\frac{\eta_t\lambda}{1 + \eta_t\lambda} x_t - \tau_t \frac{d_t}{D_t},

    with :math:`f_*` = `lower_bound` (estimated online with
    `adapt_lower_bound`).

    Args:
      learning_rate: :math:`\eta`, the largest step size; number or schedule.
      b1: decay of the first moments, in [0, 1).
      b2: decay of the second moment, in [0, 1).
      eps: :math:`\epsilon`, >= 0.
      lower_bound: :math:`f_*`, a lower bound of the loss, any real number.
      weight_decay: :math:`\lambda`, >= 0.
      adapt_lower_bound: estimate the lower bound online.

    Returns:
      The optimizer, a gradient transformation; `update` needs `params`
      and `value=` (the loss at the params).

    Example:
      >>> import jax, jax.numpy as jnp, gradax
      >>> loss = lambda p: jnp.sum(p**2)
      >>> params = jnp.array([1.0, -2.0])
      >>> tx = gradax.momo_adam(learning_rate=0.1)
      >>> state = tx.init(params)
      >>> value, grads = jax.value_and_grad(loss)(params)
      >>> updates, state = tx.update(grads, state, params, value=value)
      >>> gradax.apply_updates(params, updates)
      Array([ 0.9, -1.9], dtype=float32)

    Differences from optax: for complex parameters the scalars are real,
    inner products are their real parts and :math:`v` averages :math:`|g|^2`.

    References:
      Schaipp, Ohana, Eickenberg, Defazio and Gower, MoMo: Momentum Models
      for Adaptive Learning Rates, ICML 2024 (arXiv:2305.07583).
    """

    learning_rate: Any = hyper(default=0.01, valid=LEARNING_RATE)
    b1: Any = hyper(default=0.9, valid=DECAY)
    b2: Any = hyper(default=0.999, valid=DECAY)
    eps: Any = hyper(default=1e-8, valid=NONNEGATIVE)
    lower_bound: Any = hyper(default=0.0, valid=ANY)
    weight_decay: Any = hyper(default=0.0, valid=NONNEGATIVE)
    adapt_lower_bound: bool = static_field(default=False)

    def init_state(self, params):
        return MomoAdamState(
            exp_avg=gtree.zeros_like(params),
            exp_avg_sq=gtree.zeros_like(params),
            **_initial_model(params, self.lower_bound),
            count=zero_count(),
        )

    def update_state(self, updates, state, params=None, *, value=None, **extra_args):
        require_params(params, "momo_adam")
        require_value(value, "momo_adam")
        alpha, wd = self.learning_rate, self.weight_decay
        b1, b2, eps = self.b1, self.b2, self.eps
        count = safe_increment(state.count)
        barf, gamma = _averaged_model(b1, state, value, updates, params)
        exp_avg = jax.tree.map(
            lambda d, g: b1 * d + (1 - b1) * g, state.exp_avg, updates
        )
        exp_avg_sq = jax.tree.map(
            lambda v, g: b2 * v + (1 - b2) * g * jnp.conj(g),
            state.exp_avg_sq,
            updates,
        )
        bc2 = jnp.asarray(1 - b2**count, barf.dtype)
        precond = jax.tree.map(lambda v: eps + jnp.sqrt(v / bc2), exp_avg_sq)
        weighted = jax.tree.map(lambda d, pc: d / pc, exp_avg, precond)
        sq_norm = _dot(exp_avg, weighted)
        bc1 = jnp.asarray(1 - b1**count, barf.dtype)
        tau, decay, model = _step_size(
            self, state, barf, gamma, exp_avg, params, sq_norm, alpha / bc1, bc1
        )
        new_updates = jax.tree.map(
            lambda d, pc, p: -(alpha * wd) / decay * p - tau * d / pc,
            exp_avg,
            precond,
            params,
        )
        return new_updates, MomoAdamState(
            exp_avg=exp_avg, exp_avg_sq=exp_avg_sq, **model, count=count
        )
