"""AMSGrad: Adam with a non-decreasing second moment."""

from __future__ import annotations

from dataclasses import KW_ONLY
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .. import tree as gtree
from .._core.declarations import DECAY, NONNEGATIVE, hyper
from .._core.numerics import canonical_dtype, safe_increment
from .._core.protocol import GradientTransformation, LearningRateAlias, zero_count
from .._core.pytree import Module, static_field
from ..combinators.chain import chain
from ..transforms.scaling import scale_by_learning_rate
from .adam import adam_direction


class ScaleByAmsgradState(NamedTuple):
    """State of :class:`scale_by_amsgrad`."""

    count: jax.Array  # int32 scalar
    mu: Any  # first moment, like params (mu_dtype)
    nu: Any  # second moment, like params
    nu_max: Any  # running maximum of the (corrected) second moment, like params


class _AmsgradOptions(Module):
    """The options of scale_by_amsgrad and amsgrad."""

    _abstract = True

    b1: Any = hyper(default=0.9, valid=DECAY)
    b2: Any = hyper(default=0.999, valid=DECAY)
    eps: Any = hyper(default=1e-8, valid=NONNEGATIVE)
    eps_root: Any = hyper(default=0.0, valid=NONNEGATIVE)
    mu_dtype: Any = static_field(default=None)
    bias_correction_mu: bool = static_field(default=True)
    bias_correction_nu: bool = static_field(default=True)
    _: KW_ONLY
    cautious: bool = static_field(default=False)


class scale_by_amsgrad(_AmsgradOptions, GradientTransformation):
    """Rescales updates by AMSGrad's moment estimates (no learning rate).

    See :class:`amsgrad` for the update rule.

    Args:
      b1: decay of the first moment, in [0, 1).
      b2: decay of the second moment, in [0, 1).
      eps: added to the denominator outside the square root, >= 0.
      eps_root: added inside the square root, >= 0.
      mu_dtype: dtype of the first moment (default: the parameters').
      bias_correction_mu: divide the first moment by :math:`1 - b_1^t`.
      bias_correction_nu: divide the second moment by :math:`1 - b_2^t`
        before taking the running maximum.
      cautious: cautious updates (keyword-only, not in optax; see
        :func:`gradax.transforms.cautious.caution`).
    """

    def init_state(self, params):
        return ScaleByAmsgradState(
            count=zero_count(),
            mu=gtree.zeros_like(params, canonical_dtype(self.mu_dtype)),
            nu=gtree.zeros_like(params),
            nu_max=gtree.zeros_like(params),
        )

    def update_state(self, updates, state, params=None, **extra_args):
        b1, b2 = self.b1, self.b2
        mu = gtree.update_moment(updates, state.mu, b1, 1)
        nu = gtree.update_moment_per_elem_norm(updates, state.nu, b2, 2)
        count = safe_increment(state.count)
        mu_hat = gtree.bias_correction(mu, b1, count) if self.bias_correction_mu else mu
        nu_eff = gtree.bias_correction(nu, b2, count) if self.bias_correction_nu else nu
        nu_max = jax.tree.map(jnp.maximum, state.nu_max, nu_eff)
        new_updates = adam_direction(self, mu_hat, nu_max, updates)
        return new_updates, ScaleByAmsgradState(
            count=count, mu=mu, nu=nu, nu_max=nu_max
        )


class amsgrad(_AmsgradOptions, LearningRateAlias):
    r"""AMSGrad: Adam whose denominator never decreases.

    With gradient :math:`g_t` and step :math:`t \ge 1` (the corrections by
    :math:`1 - b^t` can each be turned off):

    .. math::
      m_t = b_1 m_{t-1} + (1 - b_1) g_t,\quad
      v_t = b_2 v_{t-1} + (1 - b_2) |g_t|^2,\\
      \hat v^{\max}_t = \max\!\big(\hat v^{\max}_{t-1},\ v_t / (1 - b_2^t)\big),
      \quad u_t = -\eta_t \frac{m_t / (1 - b_1^t)}
      {\sqrt{\hat v^{\max}_t + \bar\epsilon} + \epsilon}.

    Differences from optax: the keyword-only argument `cautious` is not in optax;
    the defaults give optax's numbers.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule.
      b1: decay of the first moment, in [0, 1).
      b2: decay of the second moment, in [0, 1).
      eps: :math:`\epsilon`, >= 0.
      eps_root: :math:`\bar\epsilon`, >= 0.
      mu_dtype: dtype of the first moment.
      bias_correction_mu: correct the first moment's bias (False matches the
        original paper).
      bias_correction_nu: correct the second moment's bias before the maximum
        (False matches the original paper).
      cautious: cautious updates (keyword-only; see
        :func:`gradax.transforms.cautious.caution`).

    Returns:
      The optimizer, a gradient transformation.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.amsgrad(0.1)
      >>> state = tx.init(jnp.zeros(1))
      >>> for g in (10.0, 1.0, 1.0):  # the denominator never shrinks
      ...     _, state = tx.update(jnp.array([g]), state)
      ...     print(state[0].nu_max)
      [100.0013]
      [100.0013]
      [100.0013]

    References:
      Reddi et al., On the Convergence of Adam and Beyond, ICLR 2018
      (arXiv:1904.09237).
    """

    def build(self):
        return chain(
            self.part(scale_by_amsgrad),
            scale_by_learning_rate(self.learning_rate),
        )
