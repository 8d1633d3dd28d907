"""RAdam: Adam with a rectified (warmed-up) adaptive learning rate."""

from __future__ import annotations

from dataclasses import KW_ONLY
from typing import Any

import jax
import jax.numpy as jnp

from .. import tree as gtree
from .._core.declarations import DECAY, NONNEGATIVE, Range, hyper
from .._core.numerics import safe_increment
from .._core.protocol import GradientTransformation, LearningRateAlias
from .._core.pytree import Module, static_field
from ..combinators.chain import chain
from ..transforms.cautious import caution
from ..transforms.scaling import scale_by_learning_rate
from .adam import ScaleByAdamState, debiased_first_moment, zero_moments

# rho_t >= 4 keeps the rectification sqrt((rho-4)(rho-2)...) real; inf never
# rectifies (momentum steps only).
_THRESHOLD = Range(4.0, allow_inf=True)


class _RadamOptions(Module):
    """The options of scale_by_radam and radam."""

    _abstract = True

    b1: Any = hyper(default=0.9, valid=DECAY)
    b2: Any = hyper(default=0.999, valid=DECAY)
    eps: Any = hyper(default=1e-8, valid=NONNEGATIVE)
    eps_root: Any = hyper(default=0.0, valid=NONNEGATIVE)
    threshold: Any = hyper(default=5.0, valid=_THRESHOLD)
    _: KW_ONLY
    nesterov: bool = static_field(default=False)
    cautious: bool = static_field(default=False)


class scale_by_radam(_RadamOptions, GradientTransformation):
    """Rescales updates by Rectified Adam's estimates (no learning rate).

    See :class:`radam` for the update rule. The state is a
    :class:`ScaleByAdamState`.

    Args:
      b1: decay of the first moment, in [0, 1).
      b2: decay of the second moment, in [0, 1).
      eps: added to the denominator outside the square root, >= 0.
      eps_root: added inside the square root, >= 0.
      threshold: the length :math:`\\rho_t` of the approximated moving
        average from which the adaptive step is used, >= 4 (below, the
        rectification is the root of a negative number); inf: never.
      nesterov: use Nesterov momentum.
      cautious: cautious updates (keyword-only, not in optax; see
        :func:`gradax.transforms.cautious.caution`).
    """

    def init_state(self, params):
        return zero_moments(ScaleByAdamState, params)

    def update_state(self, updates, state, params=None, **extra_args):
        b1, b2 = self.b1, self.b2
        rho_inf = 2.0 / (1.0 - b2) - 1.0
        mu = gtree.update_moment(updates, state.mu, b1, 1)
        nu = gtree.update_moment_per_elem_norm(updates, state.nu, b2, 2)
        count = safe_increment(state.count)
        b2t = b2**count
        rho = rho_inf - 2 * count * b2t / (1 - b2t)
        mu_hat = debiased_first_moment(mu, updates, b1, count, self.nesterov)
        nu_hat = gtree.bias_correction(nu, b2, count)
        rect = jnp.sqrt(
            (rho - 4.0)
            * (rho - 2.0)
            * rho_inf
            / ((rho_inf - 4.0) * (rho_inf - 2.0) * rho)
        )
        eps, eps_root = self.eps, self.eps_root

        def adaptive(m, v):
            return rect.astype(m.dtype) * m / (jnp.sqrt(v + eps_root) + eps)

        use_adaptive = rho >= self.threshold
        new_updates = jax.tree.map(
            lambda m, v: jnp.where(use_adaptive, adaptive(m, v), m), mu_hat, nu_hat
        )
        if self.cautious:
            new_updates = caution(new_updates, updates)
        return new_updates, ScaleByAdamState(count=count, mu=mu, nu=nu)


class radam(_RadamOptions, LearningRateAlias):
    r"""RAdam: Adam whose adaptive step is switched on once its variance is tractable.

    With the moments of :class:`adam`, :math:`\rho_\infty = 2 / (1 - b_2) - 1`
    and :math:`\rho_t = \rho_\infty - 2 t\, b_2^t / (1 - b_2^t)`:

    .. math::
      r_t = \sqrt{\frac{(\rho_t - 4)(\rho_t - 2)\rho_\infty}
      {(\rho_\infty - 4)(\rho_\infty - 2)\rho_t}},\quad
      u_t = -\eta_t \begin{cases}
      r_t\, \hat m_t / (\sqrt{\hat v_t + \bar\epsilon} + \epsilon)
      & \rho_t \ge \text{threshold} \\
      \hat m_t & \text{otherwise.} \end{cases}

    Differences from optax: the keyword-only argument `cautious` is not in optax;
    the defaults give optax's numbers.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule.
      b1: decay of the first moment, in [0, 1).
      b2: decay of the second moment, in [0, 1).
      eps: :math:`\epsilon`, >= 0.
      eps_root: :math:`\bar\epsilon`, >= 0.
      threshold: the :math:`\rho_t` from which the adaptive step is used,
        >= 4 (inf: never).
      nesterov: use Nesterov momentum (keyword-only).
      cautious: cautious updates (keyword-only; see
        :func:`gradax.transforms.cautious.caution`).

    Returns:
      The optimizer, a gradient transformation.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.radam(0.1)
      >>> state = tx.init(jnp.zeros(1))
      >>> for t in range(1, 8):  # momentum SGD until rho_t > threshold, then rectified
      ...     u, state = tx.update(jnp.array([4.0]), state)
      ...     print(t, u.round(4))
      1 [-0.4]
      2 [-0.4]
      3 [-0.4]
      4 [-0.4]
      5 [-0.4]
      6 [-0.0026]
      7 [-0.0032]

    References:
      Liu et al., On the Variance of the Adaptive Learning Rate and Beyond,
      ICLR 2020 (arXiv:1908.03265).
    """

    def build(self):
        return chain(
            self.part(scale_by_radam),
            scale_by_learning_rate(self.learning_rate),
        )
