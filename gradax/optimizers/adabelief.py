"""AdaBelief: Adam with the variance of the gradient around its mean."""

from __future__ import annotations

from dataclasses import KW_ONLY
from typing import Any, NamedTuple

import jax

from .. import tree as gtree
from .._core.declarations import DECAY, NONNEGATIVE, hyper
from .._core.numerics import safe_increment
from .._core.protocol import GradientTransformation, LearningRateAlias
from .._core.pytree import Module, static_field
from ..combinators.chain import chain
from ..transforms.cautious import caution
from ..transforms.scaling import scale_by_learning_rate
from .adam import adam_ratio, debiased_first_moment, zero_moments


class ScaleByBeliefState(NamedTuple):
    """State of :class:`scale_by_belief`."""

    count: jax.Array  # int32 scalar
    mu: Any  # first moment, like params
    nu: Any  # second central moment (the "belief"), like params


class _BeliefOptions(Module):
    """The options of scale_by_belief and adabelief."""

    _abstract = True

    b1: Any = hyper(default=0.9, valid=DECAY)
    b2: Any = hyper(default=0.999, valid=DECAY)
    eps: Any = hyper(default=1e-16, valid=NONNEGATIVE)
    eps_root: Any = hyper(default=1e-16, valid=NONNEGATIVE)
    _: KW_ONLY
    nesterov: bool = static_field(default=False)
    cautious: bool = static_field(default=False)


class scale_by_belief(_BeliefOptions, GradientTransformation):
    """Rescales updates by AdaBelief's moment estimates (no learning rate).

    See :class:`adabelief` for the update rule.

    Args:
      b1: decay of the first moment, in [0, 1).
      b2: decay of the second central moment, in [0, 1).
      eps: added to the denominator outside the square root, >= 0.
      eps_root: added to the second central moment at every step, >= 0
        (must be positive to differentiate through the update).
      nesterov: use Nesterov momentum.
      cautious: cautious updates (keyword-only, not in optax; see
        :func:`gradax.transforms.cautious.caution`).
    """

    def init_state(self, params):
        return zero_moments(ScaleByBeliefState, params)

    def update_state(self, updates, state, params=None, **extra_args):
        b1, b2, eps_root = self.b1, self.b2, self.eps_root
        mu = gtree.update_moment(updates, state.mu, b1, 1)
        surprise = gtree.sub(updates, mu)
        nu = gtree.update_moment_per_elem_norm(surprise, state.nu, b2, 2)
        nu = jax.tree.map(lambda v: v + eps_root, nu)
        count = safe_increment(state.count)
        mu_hat = debiased_first_moment(mu, updates, b1, count, self.nesterov)
        nu_hat = gtree.bias_correction(nu, b2, count)
        # eps_root is already in nu (at every step), not under the root here.
        new_updates = adam_ratio(mu_hat, nu_hat, self.eps, 0.0)
        if self.cautious:
            new_updates = caution(new_updates, updates)
        return new_updates, ScaleByBeliefState(count=count, mu=mu, nu=nu)


class adabelief(_BeliefOptions, LearningRateAlias):
    r"""AdaBelief: steps scaled by the belief in the observed gradient.

    Adam with the second moment of the deviation of :math:`g_t` from its
    moving average instead of that of :math:`g_t`. With step :math:`t \ge 1`:

    .. math::
      m_t = b_1 m_{t-1} + (1 - b_1) g_t,\quad
      s_t = b_2 s_{t-1} + (1 - b_2) |g_t - m_t|^2 + \bar\epsilon,\\
      u_t = -\eta_t \frac{m_t / (1 - b_1^t)}{\sqrt{s_t / (1 - b_2^t)} + \epsilon}.

    With `nesterov=True` the first moment is replaced as in :class:`nadam`.

    Differences from optax: the keyword-only argument `cautious` is not in optax;
    the defaults give optax's numbers.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule.
      b1: decay of the first moment, in [0, 1).
      b2: decay of the second central moment, in [0, 1).
      eps: :math:`\epsilon`, >= 0.
      eps_root: :math:`\bar\epsilon`, >= 0.
      nesterov: use Nesterov momentum (keyword-only).
      cautious: cautious updates (keyword-only; see
        :func:`gradax.transforms.cautious.caution`).

    Returns:
      The optimizer, a gradient transformation.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.adabelief(0.1)
      >>> state = tx.init(jnp.zeros(1))
      >>> for _ in range(3):  # as predicted: a small belief term, growing steps
      ...     u, state = tx.update(jnp.ones(1), state)
      ...     print(u.round(4))
      [-0.1111]
      [-0.1168]
      [-0.1226]

    References:
      Zhuang et al., AdaBelief Optimizer: Adapting Stepsizes by the Belief in
      Observed Gradients, NeurIPS 2020 (arXiv:2010.07468).
    """

    def build(self):
        return chain(
            self.part(scale_by_belief),
            scale_by_learning_rate(self.learning_rate),
        )
