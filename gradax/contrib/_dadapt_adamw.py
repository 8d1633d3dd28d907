"""D-Adaptation AdamW: Adam with a learning rate found by D-Adaptation."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .. import tree as gtree
from .._core.declarations import LEARNING_RATE, NONNEGATIVE, POSITIVE, hyper
from .._core.numerics import real_dtype, safe_increment
from .._core.protocol import GradientTransformation, zero_count
from .._core.treecheck import require_params
from ._util import DECAY_PAIR, moments_at_a_positive_rate


class DAdaptAdamWState(NamedTuple):
    """State of :class:`dadapt_adamw`."""

    exp_avg: Any  # first moment of d * lr * g, like params
    exp_avg_sq: Any  # second moment of g, like params
    grad_sum: Any  # weighted sum of d * lr * g, like params
    estim_lr: jax.Array  # scalar: the distance estimate d
    numerator_weighted: jax.Array  # scalar
    count: jax.Array  # int32 scalar


class dadapt_adamw(GradientTransformation):
    r"""D-Adaptation AdamW: AdamW with the step size :math:`d` set automatically.

    With gradient :math:`g_t`, step :math:`t \ge 1`, :math:`d_0` =
    `estim_lr0`, :math:`\sqrt{\beta_2}` written :math:`\rho` and
    :math:`\eta'_t = \eta_t d_{t-1} \sqrt{1 - \beta_2^t} / (1 - \beta_1^t)`:

    .. math::
      a_t = \left\langle g_t, \frac{s_{t-1}}{\sqrt{v_{t-1}} + \epsilon}
            \right\rangle,\quad
      m_t = \beta_1 m_{t-1} + (1 - \beta_1) \eta'_t g_t,\quad
      v_t = \beta_2 v_{t-1} + (1 - \beta_2) g_t^2,\\
      s_t = \rho s_{t-1} + (1 - \rho) \eta'_t g_t,\quad
      r_t = \rho r_{t-1} + (1 - \rho) \eta'_t a_t,\quad
      d_t = \max\!\left(d_{t-1}, \frac{r_t}{(1 - \rho)\|s_t\|_1}\right),\\
      u_t = -\frac{m_t}{\sqrt{v_t} + \epsilon} - \lambda \eta'_t x_t.

    The learning rate (or its schedule) weighs the estimate, so this is one
    transformation rather than a chain with `scale_by_learning_rate`.

    Args:
      learning_rate: :math:`\eta`, a multiplier (1 in the paper) or schedule.
      betas: :math:`(\beta_1, \beta_2)`, each in [0, 1).
      eps: :math:`\epsilon`, >= 0.
      estim_lr0: :math:`d_0 > 0`.
      weight_decay: :math:`\lambda`, >= 0.

    Returns:
      The optimizer, a gradient transformation; `update` needs `params`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.dadapt_adamw(estim_lr0=0.1)
      >>> params = jnp.array([1.0, -2.0])
      >>> state = tx.init(params)
      >>> for _ in range(3):
      ...     updates, state = tx.update(2 * params, state, params)
      ...     params = gradax.apply_updates(params, updates)
      >>> round(float(state.estim_lr), 4)  # the lower bound on D, grown from estim_lr0
      0.8819

    Differences from optax: for complex parameters the scalars are real, the
    inner product is its real part and :math:`v` averages :math:`|g|^2`.

    References:
      Defazio and Mishchenko, Learning-Rate-Free Learning by D-Adaptation,
      ICML 2023 (arXiv:2301.07733).
    """

    learning_rate: Any = hyper(default=1.0, valid=LEARNING_RATE)
    betas: Any = hyper(default=(0.9, 0.999), valid=DECAY_PAIR)
    eps: Any = hyper(default=1e-8, valid=NONNEGATIVE)
    estim_lr0: Any = hyper(default=1e-6, valid=POSITIVE)
    weight_decay: Any = hyper(default=0.0, valid=NONNEGATIVE)

    def init_state(self, params):
        dtype = real_dtype(gtree.dtype(params, "lowest"))
        return DAdaptAdamWState(
            exp_avg=gtree.zeros_like(params),
            exp_avg_sq=gtree.zeros_like(params),
            grad_sum=gtree.zeros_like(params),
            estim_lr=jnp.asarray(self.estim_lr0, dtype),
            numerator_weighted=jnp.zeros([], dtype),
            count=zero_count(),
        )

    def update_state(self, updates, state, params=None, **extra_args):
        require_params(params, "dadapt_adamw")
        beta1, beta2 = self.betas
        eps, wd = self.eps, self.weight_decay
        rho = beta2**0.5
        count = safe_increment(state.count)
        bias = ((1 - beta2**count) ** 0.5) / (1 - beta1**count)
        dlr = state.estim_lr * self.learning_rate * bias
        dlr = jnp.asarray(dlr).astype(state.numerator_weighted.dtype)
        weighted_sum = jax.tree.map(
            lambda s, v: s / (jnp.sqrt(v) + eps), state.grad_sum, state.exp_avg_sq
        )
        numerator_acc = jnp.real(gtree.vdot(updates, weighted_sum))
        exp_avg = jax.tree.map(
            lambda m, g: beta1 * m + (1 - beta1) * dlr * g, state.exp_avg, updates
        )
        exp_avg_sq = jax.tree.map(
            lambda v, g: beta2 * v + (1 - beta2) * g * jnp.conj(g),
            state.exp_avg_sq,
            updates,
        )
        grad_sum = jax.tree.map(
            lambda s, g: rho * s + (1 - rho) * dlr * g, state.grad_sum, updates
        )
        numerator = rho * state.numerator_weighted + (1 - rho) * dlr * numerator_acc
        (exp_avg, exp_avg_sq, grad_sum), active = moments_at_a_positive_rate(
            self.learning_rate,
            (exp_avg, exp_avg_sq, grad_sum),
            (state.exp_avg, state.exp_avg_sq, state.grad_sum),
        )
        grad_sum_l1 = gtree.sum(jax.tree.map(jnp.abs, grad_sum))
        # No progress yet (every gradient so far zero, or a warmup from 0):
        # a zero step that keeps the estimate, as the authors' code.
        moved = active & (grad_sum_l1 > 0)
        estimate = numerator / ((1 - rho) * jnp.where(moved, grad_sum_l1, 1))
        estim_lr = jnp.where(
            moved, jnp.maximum(state.estim_lr, estimate), state.estim_lr
        )
        new_updates = jax.tree.map(
            lambda m, v, p: jnp.where(
                moved, -wd * dlr * p - m / (jnp.sqrt(v) + eps), 0
            ),
            exp_avg,
            exp_avg_sq,
            params,
        )
        return new_updates, DAdaptAdamWState(
            exp_avg=exp_avg,
            exp_avg_sq=exp_avg_sq,
            grad_sum=grad_sum,
            estim_lr=estim_lr,
            numerator_weighted=jnp.where(moved, numerator, state.numerator_weighted),
            count=count,
        )
