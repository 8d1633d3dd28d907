"""Prodigy: Adam with a learning rate estimated from the distance to a solution."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .. import tree as gtree
from .._core.declarations import DECAY, LEARNING_RATE, NONNEGATIVE, POSITIVE, hyper
from .._core.numerics import real_dtype, safe_increment
from .._core.protocol import GradientTransformation, zero_count
from .._core.pytree import static_field
from .._core.treecheck import require_params
from ._util import DECAY_PAIR, moments_at_a_positive_rate


class ProdigyState(NamedTuple):
    """State of :class:`prodigy` and :class:`scale_by_prodigy`."""

    exp_avg: Any  # first moment of d * g, like params
    exp_avg_sq: Any  # second moment of d * g, like params
    grad_sum: Any  # weighted sum of d * g, like params
    params0: Any  # the parameters at init
    estim_lr: jax.Array  # scalar: the distance estimate d
    numerator_weighted: jax.Array  # scalar
    count: jax.Array  # int32 scalar


class _ProdigyBase(GradientTransformation):
    """The options and arithmetic of :class:`prodigy` and its direction."""

    _abstract = True

    betas: Any = hyper(default=(0.9, 0.999), valid=DECAY_PAIR)
    beta3: Any = hyper(default=None, valid=DECAY)
    eps: Any = hyper(default=1e-8, valid=NONNEGATIVE)
    estim_lr0: Any = hyper(default=1e-6, valid=POSITIVE)
    estim_lr_coef: Any = hyper(default=1.0, valid=NONNEGATIVE)
    weight_decay: Any = hyper(default=0.0, valid=NONNEGATIVE)
    safeguard_warmup: bool = static_field(default=False)
    bias_correction: bool = static_field(default=True, kw_only=True)

    def init_state(self, params):
        dtype = real_dtype(gtree.dtype(params, "lowest"))
        return ProdigyState(
            exp_avg=gtree.zeros_like(params),
            exp_avg_sq=gtree.zeros_like(params),
            grad_sum=gtree.zeros_like(params),
            params0=jax.tree.map(jnp.array, params),
            estim_lr=jnp.asarray(self.estim_lr0, dtype),
            numerator_weighted=jnp.zeros([], dtype),
            count=zero_count(),
        )

    def _step(self, lr, updates, state, params):
        beta1, beta2 = self.betas
        beta3 = beta2**0.5 if self.beta3 is None else self.beta3
        eps, estim_lr0, wd = self.eps, self.estim_lr0, self.weight_decay
        count = safe_increment(state.count)
        d = state.estim_lr
        if self.bias_correction:
            bias = ((1 - beta2**count) ** 0.5) / (1 - beta1**count)
        else:
            bias = 1.0
        dlr = jnp.asarray(d * lr * bias, dtype=d.dtype)
        dg = jax.tree.map(lambda g: d * g, updates)
        distance = jax.tree.map(lambda p0, p: p0 - p, state.params0, params)
        numerator_acc = jnp.real(gtree.vdot(updates, distance))
        exp_avg = jax.tree.map(
            lambda m, x: beta1 * m + (1 - beta1) * x, state.exp_avg, dg
        )
        exp_avg_sq = jax.tree.map(
            lambda v, x: beta2 * v + (1 - beta2) * x * jnp.conj(x),
            state.exp_avg_sq,
            dg,
        )
        # Safeguarded warmup leaves the learning rate out of the sum.
        weight = d if self.safeguard_warmup else dlr
        grad_sum = jax.tree.map(
            lambda s, x: beta3 * s + weight * x / estim_lr0, state.grad_sum, dg
        )
        numerator = beta3 * state.numerator_weighted
        numerator += (d / estim_lr0) * dlr * numerator_acc
        (exp_avg, exp_avg_sq, grad_sum), active = moments_at_a_positive_rate(
            lr,
            (exp_avg, exp_avg_sq, grad_sum),
            (state.exp_avg, state.exp_avg_sq, state.grad_sum),
        )
        denominator = gtree.sum(jax.tree.map(jnp.abs, grad_sum))
        # No progress yet (every gradient so far zero, or a warmup from 0):
        # a zero step that keeps the estimate, as the authors' code.
        moved = active & (denominator > 0)
        estimate = self.estim_lr_coef * numerator / jnp.where(moved, denominator, 1)
        new_d = jnp.where(moved, jnp.maximum(d, estimate), d)
        new_updates = jax.tree.map(
            lambda m, v, p: jnp.where(
                moved, -wd * dlr * p - dlr * m / (jnp.sqrt(v) + new_d * eps), 0
            ),
            exp_avg,
            exp_avg_sq,
            params,
        )
        return new_updates, ProdigyState(
            exp_avg=exp_avg,
            exp_avg_sq=exp_avg_sq,
            grad_sum=grad_sum,
            params0=state.params0,
            estim_lr=new_d,
            numerator_weighted=jnp.where(moved, numerator, state.numerator_weighted),
            count=count,
        )


class _LearningRateFirst(GradientTransformation):
    """prodigy's learning rate, its first argument.

    prodigy names this base last, so the field comes before _ProdigyBase's
    options: a dataclass takes its bases' fields from the last base to the first.
    """

    _abstract = True

    learning_rate: Any = hyper(default=1.0, valid=LEARNING_RATE)


class prodigy(_ProdigyBase, _LearningRateFirst):
    r"""Prodigy: Adam whose step size :math:`d` estimates the distance to a solution.

    With gradient :math:`g_t`, start :math:`x_0`, step :math:`t \ge 1`,
    :math:`d_0` = `estim_lr0` and :math:`\eta'_t = \eta_t d_{t-1}
    \sqrt{1 - \beta_2^t} / (1 - \beta_1^t)`:

    .. math::
      m_t = \beta_1 m_{t-1} + (1 - \beta_1) d_{t-1} g_t,\quad
      v_t = \beta_2 v_{t-1} + (1 - \beta_2) d_{t-1}^2 g_t^2,\\
      r_t = \beta_3 r_{t-1} + \frac{d_{t-1}}{d_0} \eta'_t
            \langle g_t, x_0 - x_t\rangle,\quad
      s_t = \beta_3 s_{t-1} + \frac{\eta'_t}{d_0} d_{t-1} g_t,\\
      d_t = \max\!\left(d_{t-1}, c\,\frac{r_t}{\|s_t\|_1}\right),\quad
      u_t = -\eta'_t \left(\frac{m_t}{\sqrt{v_t} + d_t\epsilon}
            + \lambda x_t\right),

    with :math:`\beta_3 = \sqrt{\beta_2}` by default and :math:`c` =
    `estim_lr_coef`. With `safeguard_warmup` the sum :math:`s_t` uses
    :math:`d_{t-1}` in place of :math:`\eta'_t`. The learning rate (or its
    schedule) weighs the estimate, so it is part of the transformation.

    Args:
      learning_rate: :math:`\eta`, a multiplier (1 in the paper) or schedule.
      betas: :math:`(\beta_1, \beta_2)`, each in [0, 1).
      beta3: :math:`\beta_3` in [0, 1), or None for :math:`\sqrt{\beta_2}`.
      eps: :math:`\epsilon`, >= 0.
      estim_lr0: :math:`d_0 > 0`.
      estim_lr_coef: :math:`c`, >= 0.
      weight_decay: :math:`\lambda`, >= 0 (decoupled, scaled by :math:`\eta'`).
      safeguard_warmup: leave the learning rate out of :math:`s_t`.
      bias_correction: the factor :math:`\sqrt{1 - \beta_2^t} / (1 -
        \beta_1^t)` in :math:`\eta'_t` (optax's rule, the default); False
        leaves it out, the authors' default (konstmish/prodigy
        `use_bias_correction=False`, commit 3efb213).

    Returns:
      The optimizer, a gradient transformation; `update` needs `params`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.prodigy(estim_lr0=1e-3)
      >>> params = jnp.array([1.0, -2.0])
      >>> state = tx.init(params)
      >>> for _ in range(5):  # the estimate grows once the iterates have moved
      ...     updates, state = tx.update(2 * params, state, params)
      ...     params = gradax.apply_updates(params, updates)
      >>> round(float(state.estim_lr), 5)
      0.00189

    Differences from optax: for complex parameters the scalars are real and
    the inner product is its real part (optax keeps them complex).

    References:
      Mishchenko and Defazio, Prodigy: An Expeditiously Adaptive
      Parameter-Free Learner, ICML 2024 (arXiv:2306.06101).
    """

    def update_state(self, updates, state, params=None, **extra_args):
        require_params(params, "prodigy")
        return self._step(self.learning_rate, updates, state, params)


class scale_by_prodigy(_ProdigyBase):
    """The Prodigy direction for a unit learning rate. See :class:`prodigy`.

    Returns :math:`\\eta'_t (m_t / (\\sqrt{v_t} + d\\epsilon) + \\lambda x_t)`
    computed with :math:`\\eta = 1` (not negated), for chaining with
    `scale_by_learning_rate`. For a constant learning rate and no
    `safeguard_warmup` the chain equals :class:`prodigy` (the estimate of
    :math:`d` does not depend on a constant rate); a scheduled rate weighs
    the estimate only in :class:`prodigy`. Not in optax.

    Args:
      betas: :math:`(\\beta_1, \\beta_2)`, each in [0, 1).
      beta3: :math:`\\beta_3` in [0, 1), or None for :math:`\\sqrt{\\beta_2}`.
      eps: :math:`\\epsilon`, >= 0.
      estim_lr0: :math:`d_0 > 0`.
      estim_lr_coef: :math:`c`, >= 0.
      weight_decay: :math:`\\lambda`, >= 0.
      safeguard_warmup: leave the learning rate out of :math:`s_t`.
      bias_correction: the bias-correction factor in :math:`\\eta'_t`, as
        in :class:`prodigy`.
    """

    def update_state(self, updates, state, params=None, **extra_args):
        require_params(params, "scale_by_prodigy")
        new_updates, state = self._step(1.0, updates, state, params)
        return jax.tree.map(jnp.negative, new_updates), state
