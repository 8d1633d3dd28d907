"""ADOPT: Adam with the current gradient left out of its own normalizer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import KW_ONLY
from typing import Any

import jax
import jax.numpy as jnp

from .. import tree as gtree
from .._core.declarations import DECAY, NONNEGATIVE, hyper
from .._core.numerics import canonical_dtype, safe_increment
from .._core.protocol import GradientTransformation, LearningRateAlias, zero_count
from .._core.pytree import Module, static_field
from ..combinators.chain import chain
from ..optimizers.adam import ScaleByAdamState
from ..transforms.scaling import scale_by_learning_rate


def _quarter_power(count: jax.Array) -> jax.Array:
    """The default clipping bound of ADOPT at step `count`: `count**0.25`."""
    return count**0.25


class _AdoptOptions(Module):
    """The options of scale_by_adopt and adopt."""

    _abstract = True

    b1: Any = hyper(default=0.9, valid=DECAY)
    b2: Any = hyper(default=0.9999, valid=DECAY)
    eps: Any = hyper(default=1e-6, valid=NONNEGATIVE)
    mu_dtype: Any = static_field(default=None)
    _: KW_ONLY
    nesterov: bool = static_field(default=False)
    use_clipping: bool = static_field(default=True)
    clip_value_fn: Callable[[jax.Array], jax.Array] = static_field(
        default=_quarter_power
    )


class scale_by_adopt(_AdoptOptions, GradientTransformation):
    """The ADOPT direction, without learning rate. See :class:`adopt`.

    Args:
      b1: decay of the first moment, in [0, 1).
      b2: decay of the second moment, in [0, 1).
      eps: lower bound of the normalizer :math:`\\sqrt{v}`, >= 0.
      mu_dtype: dtype of the first moment (default: the parameters').
      nesterov: use Nesterov momentum.
      use_clipping: clip the normalized gradient to `clip_value_fn(count)`.
      clip_value_fn: the clipping bound as a function of the step count.
    """

    def init_state(self, params):
        return ScaleByAdamState(
            count=zero_count(),
            mu=gtree.zeros_like(params, canonical_dtype(self.mu_dtype)),
            nu=gtree.zeros_like(params),
        )

    def update_state(self, updates, state, params=None, **extra_args):
        first = state.count == 0
        # Step 0 only fills the second moment; the first moment stays zero.
        b1 = jnp.where(first, 1, self.b1)
        b2 = jnp.where(first, 0, self.b2)
        eps = self.eps
        nu = gtree.update_moment_per_elem_norm(updates, state.nu, b2, 2)

        def normalize(g, v):
            return g / jnp.maximum(jnp.sqrt(v), eps)

        # The gradient is normalized by the second moment of the past only.
        normalized = jax.tree.map(normalize, updates, state.nu)
        if self.use_clipping:
            bound = self.clip_value_fn(state.count)
            normalized = jax.tree.map(lambda x: jnp.clip(x, -bound, bound), normalized)
        mu = gtree.update_moment(normalized, state.mu, b1, 1)
        if self.nesterov:
            direction = gtree.update_moment(normalized, mu, b1, 1)
        else:
            direction = mu
        count = safe_increment(state.count)
        return direction, ScaleByAdamState(count=count, mu=mu, nu=nu)


class adopt(_AdoptOptions, LearningRateAlias):
    r"""ADOPT: Adam that normalizes by the second moment of past gradients.

    With gradient :math:`g_t` and step :math:`t \ge 0`, :math:`v_0 = g_0^2`,
    :math:`m_0 = 0` and for :math:`t \ge 1`:

    .. math::
      m_t = b_1 m_{t-1} + (1 - b_1)\,
            \mathrm{clip}\!\left(\frac{g_t}{\max(\sqrt{v_{t-1}}, \epsilon)},
            c_t\right),\quad
      v_t = b_2 v_{t-1} + (1 - b_2) g_t^2,\quad
      u_t = -\eta_t m_t,

    with the clipping bound :math:`c_t` = `clip_value_fn(t)` (default
    :math:`t^{1/4}`; no clipping with `use_clipping=False`). With
    `nesterov` the update uses one more momentum step,
    :math:`b_1 m_t + (1 - b_1)\,\mathrm{clip}(\cdot)`. The first update is zero.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule.
      b1: decay of the first moment, in [0, 1).
      b2: decay of the second moment, in [0, 1).
      eps: :math:`\epsilon`, >= 0.
      mu_dtype: dtype of the first moment.
      nesterov: use Nesterov momentum.
      use_clipping: clip the normalized gradient (recommended).
      clip_value_fn: the clipping bound :math:`c_t` as a function of the step.

    Returns:
      The optimizer, a gradient transformation.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.adopt(0.1)
      >>> g = jnp.array([2.0, -4.0])
      >>> first, state = tx.update(g, tx.init(g))
      >>> second, _ = tx.update(g, state)
      >>> first, second  # the first gradient only sets the second moment
      (Array([-0., -0.], dtype=float32), Array([-0.01,  0.01], dtype=float32))

    References:
      Taniguchi et al., ADOPT: Modified Adam Can Converge with Any
      :math:`\beta_2` with the Optimal Rate, NeurIPS 2024 (arXiv:2411.02853).
    """

    def build(self):
        return chain(
            self.part(scale_by_adopt),
            scale_by_learning_rate(self.learning_rate),
        )
