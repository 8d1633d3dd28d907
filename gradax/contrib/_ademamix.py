"""AdEMAMix and its simplified form: Adam with a second, slow momentum."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .. import tree as gtree
from .._core.declarations import DECAY, NONNEGATIVE, hyper
from .._core.numerics import canonical_dtype, safe_increment
from .._core.protocol import GradientTransformation, LearningRateAlias, zero_count
from .._core.pytree import Module, static_field
from ..precision.int8 import moment_zeros
from ..transforms.cautious import DecoupledWeightDecay


class ScaleByAdemamixState(NamedTuple):
    """State of :class:`scale_by_ademamix`."""

    count: jax.Array  # int32 scalar
    count_m2: jax.Array  # int32 scalar: steps of the slow momentum
    m1: Any  # fast first moment, like params (mu_dtype)
    m2: Any  # slow first moment, like params (mu_dtype)
    nu: Any  # second moment, like params (mu_dtype)


class _AdemamixOptions(Module):
    """The options of scale_by_ademamix and ademamix."""

    _abstract = True

    b1: Any = hyper(default=0.9, valid=DECAY)
    b2: Any = hyper(default=0.999, valid=DECAY)
    b3: Any = hyper(default=0.9999, valid=DECAY)
    alpha: Any = hyper(default=6.0, valid=NONNEGATIVE)
    eps: Any = hyper(default=1e-8, valid=NONNEGATIVE)
    eps_root: Any = hyper(default=0.0, valid=NONNEGATIVE)
    mu_dtype: Any = static_field(default=None)


class scale_by_ademamix(_AdemamixOptions, GradientTransformation):
    """The AdEMAMix direction, without learning rate. See :class:`ademamix`.

    Args:
      b1: decay of the fast first moment, in [0, 1).
      b2: decay of the second moment, in [0, 1).
      b3: decay of the slow first moment, in [0, 1); may be a schedule.
      alpha: weight of the slow moment, >= 0; may be a schedule.
      eps: added to the denominator outside the square root, >= 0.
      eps_root: added inside the square root, >= 0.
      mu_dtype: dtype of the three moments (default: the parameters').
    """

    def init_state(self, params):
        dtype = canonical_dtype(self.mu_dtype)
        return ScaleByAdemamixState(
            count=zero_count(),
            count_m2=zero_count(),
            m1=gtree.zeros_like(params, dtype),
            m2=gtree.zeros_like(params, dtype),
            nu=moment_zeros(params, dtype, nonnegative=True),
        )

    def update_state(self, updates, state, params=None, **extra_args):
        # b3 and alpha schedules are evaluated at the update count, which is
        # count_m2 too: both start at zero and advance together.
        m1 = gtree.update_moment(updates, state.m1, self.b1, 1)
        m2 = gtree.update_moment(updates, state.m2, self.b3, 1)
        nu = gtree.update_moment_per_elem_norm(updates, state.nu, self.b2, 2)
        count = safe_increment(state.count)
        m1_hat = gtree.bias_correction(m1, self.b1, count)
        nu_hat = gtree.bias_correction(nu, self.b2, count)
        alpha, eps, eps_root = self.alpha, self.eps, self.eps_root
        direction = jax.tree.map(
            lambda fast, slow, v: (
                (fast + alpha * slow) / (jnp.sqrt(v + eps_root) + eps)
            ),
            m1_hat,
            m2,
            nu_hat,
        )
        return direction, ScaleByAdemamixState(
            count=count,
            count_m2=safe_increment(state.count_m2),
            m1=m1,
            m2=m2,
            nu=nu,
        )


class ademamix(DecoupledWeightDecay, _AdemamixOptions, LearningRateAlias):
    r"""AdEMAMix: Adam with a mixture of a fast and a slow momentum.

    With gradient :math:`g_t`, step :math:`t \ge 1`:

    .. math::
      m^{(1)}_t = b_1 m^{(1)}_{t-1} + (1 - b_1) g_t,\quad
      m^{(2)}_t = b_3 m^{(2)}_{t-1} + (1 - b_3) g_t,\quad
      v_t = b_2 v_{t-1} + (1 - b_2) g_t^2,\\
      u_t = -\eta_t \left(\frac{m^{(1)}_t / (1 - b_1^t) + \alpha\, m^{(2)}_t}
            {\sqrt{v_t / (1 - b_2^t) + \bar\epsilon} + \epsilon}
            + \lambda \theta_{t-1}\right).

    The slow moment is not bias-corrected. The paper warms up :math:`b_3` and
    :math:`\alpha` with schedules; both may be given as schedules here.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule.
      b1: decay of the fast first moment, in [0, 1).
      b2: decay of the second moment, in [0, 1).
      b3: decay of the slow first moment, in [0, 1).
      alpha: :math:`\alpha`, the weight of the slow moment, >= 0.
      eps: :math:`\epsilon`, >= 0.
      eps_root: :math:`\bar\epsilon`, >= 0.
      mu_dtype: dtype of the moments.
      weight_decay: :math:`\lambda`, >= 0.
      mask: a tree of booleans like the params (or a function of the params
        returning one) selecting the leaves that decay.

    Returns:
      The optimizer, a gradient transformation.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.ademamix(0.1, b3=0.9, alpha=5.0)
      >>> p = jnp.zeros(2)
      >>> u, _ = tx.update(jnp.array([2.0, -4.0]), tx.init(p), p)
      >>> u.round(4)  # Adam's first step, plus alpha * (1 - b3) = 0.5 times it
      Array([-0.15,  0.15], dtype=float32)

    References:
      Pagliardini, Ablin and Grangier, The AdEMAMix Optimizer: Better, Faster,
      Older, 2024 (arXiv:2409.03137).
    """

    _direction = scale_by_ademamix

    alpha: Any = 5.0
    weight_decay: Any = 0.0


class ScaleBySimplifiedAdEMAMixState(NamedTuple):
    """State of :class:`scale_by_simplified_ademamix`."""

    t: jax.Array  # int32 scalar: number of updates so far
    m: Any  # accumulated (undamped) momentum, like params
    n: Any  # second moment, like params


class _SimplifiedAdemamixOptions(Module):
    """The options of scale_by_simplified_ademamix and simplified_ademamix."""

    _abstract = True

    b1: Any = hyper(default=0.99, valid=DECAY)
    b2: Any = hyper(default=0.95, valid=DECAY)
    alpha: Any = hyper(default=0.0, valid=NONNEGATIVE)
    eps: Any = hyper(default=1e-8, valid=NONNEGATIVE)
    eps_root: Any = hyper(default=0.0, valid=NONNEGATIVE)


class scale_by_simplified_ademamix(_SimplifiedAdemamixOptions, GradientTransformation):
    """The simplified AdEMAMix direction. See :class:`simplified_ademamix`.

    Args:
      b1: decay of the momentum, in [0, 1).
      b2: decay of the second moment, in [0, 1).
      alpha: weight of the current gradient, >= 0; may be a schedule.
      eps: added to the denominator outside the square root, >= 0.
      eps_root: added inside the square root, >= 0.
    """

    def schedule_count(self, state):
        # The state's step count is ``t`` (optax's name); schedules read it.
        return state.t

    def init_state(self, params):
        return ScaleBySimplifiedAdEMAMixState(
            t=zero_count(), m=gtree.zeros_like(params), n=gtree.zeros_like(params)
        )

    def update_state(self, updates, state, params=None, **extra_args):
        b1, b2, alpha = self.b1, self.b2, self.alpha
        eps, eps_root = self.eps, self.eps_root
        m = jax.tree.map(lambda g, m: g + b1 * m, updates, state.m)
        # n moves from g^2 towards the old n by b2 (a linear interpolation).
        n = jax.tree.map(lambda g, n: g * g + b2 * (n - g * g), updates, state.n)
        t = safe_increment(state.t)
        n_hat = gtree.bias_correction(n, b2, t)
        direction = jax.tree.map(
            lambda m, g, v: (m + alpha * g) / (jnp.sqrt(v + eps_root) + eps),
            m,
            updates,
            n_hat,
        )
        return direction, ScaleBySimplifiedAdEMAMixState(t=t, m=m, n=n)


class simplified_ademamix(
    DecoupledWeightDecay, _SimplifiedAdemamixOptions, LearningRateAlias
):
    r"""Simplified AdEMAMix: one undamped momentum plus the current gradient.

    With gradient :math:`g_t`, step :math:`t \ge 1`:

    .. math::
      m_t = b_1 m_{t-1} + g_t,\quad
      n_t = b_2 n_{t-1} + (1 - b_2) g_t^2,\\
      u_t = -\eta_t \left(\frac{m_t + \alpha g_t}
            {\sqrt{n_t / (1 - b_2^t) + \bar\epsilon} + \epsilon}
            + \lambda \theta_{t-1}\right).

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule.
      b1: decay of the momentum, in [0, 1).
      b2: decay of the second moment, in [0, 1).
      alpha: :math:`\alpha`, the weight of the current gradient, >= 0.
      eps: :math:`\epsilon`, >= 0.
      eps_root: :math:`\bar\epsilon`, >= 0.
      weight_decay: :math:`\lambda`, >= 0.
      mask: a tree of booleans like the params (or a function of the params
        returning one) selecting the leaves that decay.

    Returns:
      The optimizer, a gradient transformation.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.simplified_ademamix(0.1, b1=0.9)
      >>> p = jnp.zeros(1)
      >>> state = tx.init(p)
      >>> for _ in range(3):  # a constant gradient: the undamped sum grows
      ...     u, state = tx.update(jnp.ones(1), state, p)
      ...     print(u)
      [-0.1]
      [-0.19]
      [-0.271]

    References:
      Morwani et al., Connections between Schedule-Free Optimizers, AdEMAMix,
      and Accelerated SGD Variants, 2025 (arXiv:2502.02431).
    """

    _direction = scale_by_simplified_ademamix

    weight_decay: Any = 0.0
