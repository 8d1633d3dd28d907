r"""Rescaling each leaf by norms of the parameters: trust ratio and block scales.

A "block" is one leaf of the parameter tree (a weight matrix, a bias
vector). :class:`scale_by_trust_ratio` (used by :class:`lars` and
:class:`lamb`) scales a block's update by the ratio of the block's parameter
norm to its update norm; :class:`scale_by_param_block_norm` and
:class:`scale_by_param_block_rms` (used by :class:`adafactor`) by the norm or
root mean square of the block's parameters.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from .._core.declarations import NONNEGATIVE, hyper
from .._core.numerics import abs_sq
from .._core.protocol import EmptyState, GradientTransformation

ScaleByTrustRatioState = EmptyState


def _floored(x: jax.Array, measure: Any, floor: Any) -> jax.Array:
    """`max(measure(x), floor)`, with a zero (not NaN) gradient at the floor.

    Where the measure is at or below the floor it is recomputed on ones, so
    that the discarded branch has a finite derivative.
    """
    value = measure(x)
    low = value <= floor
    safe_x = jnp.where(low, jnp.ones_like(x), x)
    return jnp.where(low, floor, measure(safe_x))


def _norm(x: jax.Array) -> jax.Array:
    return jnp.linalg.norm(x)


def _rms(x: jax.Array) -> jax.Array:
    return jnp.sqrt(jnp.mean(abs_sq(x)))


def _needs_params(name: str, params: Any) -> None:
    if params is None:
        raise ValueError(f"{name} needs params passed to update")


class scale_by_trust_ratio(GradientTransformation):
    r"""Scales each block's update by its trust ratio.

    For a block with parameters :math:`\theta` and update :math:`u`, with
    norms floored at `min_norm`:

    .. math::
      u \leftarrow u \cdot \frac{c\, \|\theta\|}{\|u\| + \epsilon},

    and :math:`u` is left unchanged where either norm is zero.

    Args:
      min_norm: floor of both norms, >= 0.
      trust_coefficient: :math:`c`, >= 0.
      eps: :math:`\epsilon`, >= 0.

    Returns:
      A transformation with an empty state; `update` needs `params`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.scale_by_trust_ratio()
      >>> p = jnp.array([3.0, 4.0])
      >>> tx.update(jnp.array([0.0, 0.5]), tx.init(p), p)[0]
      Array([0., 5.], dtype=float32)

    References:
      You et al., Large Batch Training of Convolutional Networks, 2017
      (arXiv:1708.03888).
    """

    min_norm: Any = hyper(default=0.0, valid=NONNEGATIVE)
    trust_coefficient: Any = hyper(default=1.0, valid=NONNEGATIVE)
    eps: Any = hyper(default=0.0, valid=NONNEGATIVE)

    def update_state(self, updates, state, params=None, **extra_args):
        _needs_params("scale_by_trust_ratio", params)
        min_norm, coefficient, eps = self.min_norm, self.trust_coefficient, self.eps

        def rescale(u, p):
            param_norm = _floored(p, _norm, min_norm)
            update_norm = _floored(u, _norm, min_norm)
            ratio = coefficient * param_norm / (update_norm + eps)
            degenerate = jnp.logical_or(param_norm == 0.0, update_norm == 0.0)
            return u * jnp.where(degenerate, jnp.array(1.0, dtype=p.dtype), ratio)

        return jax.tree.map(rescale, updates, params), state


class _ScaleByParamBlock(GradientTransformation):
    """Scales each block's update by `_block_statistic` of its parameters.

    The statistic (a norm, a root mean square) is floored at `min_scale`.
    """

    _abstract = True

    min_scale: Any = hyper(default=0.001, valid=NONNEGATIVE)

    def update_state(self, updates, state, params=None, **extra_args):
        _needs_params(type(self).__name__, params)
        this: Any = self  # `_block_statistic` is each scaling's
        statistic, floor = this._block_statistic, self.min_scale
        return jax.tree.map(
            lambda u, p: u * _floored(p, statistic, floor), updates, params
        ), state


class scale_by_param_block_norm(_ScaleByParamBlock):
    r"""Scales each block's update by the norm of its parameters.

    :math:`u \leftarrow u \cdot \max(\|\theta\|, s_{\min})`.

    Args:
      min_scale: :math:`s_{\min}`, the smallest factor, >= 0.

    Returns:
      A transformation with an empty state; `update` needs `params`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.scale_by_param_block_norm()
      >>> p = jnp.array([3.0, 4.0])
      >>> tx.update(jnp.array([1.0, -1.0]), tx.init(p), p)[0]
      Array([ 5., -5.], dtype=float32)
    """

    _block_statistic = staticmethod(_norm)


class scale_by_param_block_rms(_ScaleByParamBlock):
    r"""Scales each block's update by the root mean square of its parameters.

    :math:`u \leftarrow u \cdot \max(\sqrt{\mathrm{mean}(|\theta|^2)}, s_{\min})`.

    Args:
      min_scale: :math:`s_{\min}`, the smallest factor, >= 0.

    Returns:
      A transformation with an empty state; `update` needs `params`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.scale_by_param_block_rms()
      >>> p = jnp.array([1.0, -1.0])
      >>> tx.update(jnp.array([2.0, 3.0]), tx.init(p), p)[0]
      Array([2., 3.], dtype=float32)
    """

    _block_statistic = staticmethod(_rms)
