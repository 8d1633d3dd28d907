"""NovoGrad: Adam-like steps normalized by a per-layer second moment."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .. import tree as gtree
from .._core.declarations import DECAY, LEARNING_RATE, NONNEGATIVE, Shared, hyper
from .._core.numerics import canonical_dtype, safe_increment
from .._core.protocol import Alias, GradientTransformation, zero_count
from .._core.pytree import static_field
from ..combinators.chain import chain
from ..transforms.scaling import scale_by_learning_rate


class ScaleByNovogradState(NamedTuple):
    """State of :class:`scale_by_novograd`."""

    count: jax.Array  # int32 scalar
    mu: Any  # momentum, like params (mu_dtype)
    nu: Any  # per-leaf second moment: a scalar per leaf, in the leaf's dtype


# scale_by_novograd's options, declared once: it and the optimizers that
# build it take each field from here and pass the values on with Alias.part.
_NOVOGRAD = Shared(
    b1=hyper(default=0.9, valid=DECAY),
    b2=hyper(default=0.25, valid=DECAY),
    eps=hyper(default=1e-8, valid=NONNEGATIVE),
    eps_root=hyper(default=0.0, valid=NONNEGATIVE),
    weight_decay=hyper(default=0.0, valid=NONNEGATIVE),
)


class scale_by_novograd(GradientTransformation):
    """Computes NovoGrad's direction (no learning rate).

    See :class:`novograd` for the update rule. `update` needs `params`.

    Args:
      b1: decay of the momentum, in [0, 1).
      b2: decay of the per-leaf second moment, in [0, 1).
      eps: added to the denominator outside the square root, >= 0.
      eps_root: added inside the square root, >= 0.
      weight_decay: :math:`\\lambda`, >= 0.
      mu_dtype: dtype of the momentum (default: the parameters').
    """

    b1: Any = _NOVOGRAD.field()
    b2: Any = _NOVOGRAD.field()
    eps: Any = _NOVOGRAD.field()
    eps_root: Any = _NOVOGRAD.field()
    weight_decay: Any = _NOVOGRAD.field()
    mu_dtype: Any = static_field(default=None)

    def init_state(self, params):
        return ScaleByNovogradState(
            count=zero_count(),
            mu=gtree.zeros_like(params, canonical_dtype(self.mu_dtype)),
            nu=jax.tree.map(lambda p: jnp.zeros([], p.dtype), params),
        )

    def update_state(self, updates, state, params=None, **extra_args):
        if params is None:
            raise ValueError("scale_by_novograd needs params passed to update")
        b1, b2 = self.b1, self.b2
        eps, eps_root, wd = self.eps, self.eps_root, self.weight_decay
        count = safe_increment(state.count)
        first = count == 1

        def new_nu(g, n):
            sq_norm = jnp.linalg.norm(g) ** 2
            later = gtree.update_moment(sq_norm, n, b2, 1)
            return jnp.where(first, sq_norm.astype(n.dtype), later.astype(n.dtype))

        nu = jax.tree.map(new_nu, updates, state.nu)

        def new_mu(g, p, m, n):
            step = g / (jnp.sqrt(n + eps_root) + eps) + wd * p
            return jnp.where(first, step, b1 * m + step)

        mu = jax.tree.map(new_mu, updates, params, state.mu, nu)
        # The update is the stored momentum, rounded to mu_dtype as stored.
        mu = gtree.cast(mu, canonical_dtype(self.mu_dtype))
        return mu, ScaleByNovogradState(count=count, mu=mu, nu=nu)


class novograd(Alias):
    r"""NovoGrad: layer-wise normalized gradients with momentum.

    For each leaf ("layer") with gradient :math:`g_t` and parameters
    :math:`\theta_{t-1}`, with :math:`v_1 = \|g_1\|^2` and
    :math:`m_1 = g_1 / (\sqrt{v_1} + \epsilon) + \lambda \theta_0`:

    .. math::
      v_t = b_2 v_{t-1} + (1 - b_2) \|g_t\|^2,\quad
      m_t = b_1 m_{t-1} + \frac{g_t}{\sqrt{v_t + \bar\epsilon} + \epsilon}
      + \lambda \theta_{t-1},\quad u_t = -\eta_t m_t.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule.
      b1: decay of the momentum, in [0, 1).
      b2: decay of the per-leaf second moment, in [0, 1).
      eps: :math:`\epsilon`, >= 0.
      eps_root: :math:`\bar\epsilon`, >= 0.
      weight_decay: :math:`\lambda`, >= 0.

    Returns:
      The optimizer, a gradient transformation; `update` needs `params`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.novograd(0.1)
      >>> p = jnp.zeros(2)
      >>> u, _ = tx.update(jnp.array([3.0, -4.0]), tx.init(p), p)
      >>> u
      Array([-0.06,  0.08], dtype=float32)

    References:
      Ginsburg et al., Stochastic Gradient Methods with Layer-wise Adaptive
      Moments for Training of Deep Networks, 2019 (arXiv:1905.11286).
    """

    learning_rate: Any = hyper(valid=LEARNING_RATE)
    b1: Any = _NOVOGRAD.field()
    b2: Any = _NOVOGRAD.field()
    eps: Any = _NOVOGRAD.field(default=1e-6)
    eps_root: Any = _NOVOGRAD.field()
    weight_decay: Any = _NOVOGRAD.field()

    def build(self):
        return chain(
            self.part(scale_by_novograd),
            scale_by_learning_rate(self.learning_rate),
        )
