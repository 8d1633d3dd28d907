"""Fenchel-Young losses built from a regularized max function."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp

from ._utils import mul_or_zero


def make_fenchel_young_loss(max_fun: Callable[..., Any]):
    r"""Build the Fenchel-Young loss of a regularized max function.

    For a convex "max" function :math:`\Omega^*` of the scores (the convex
    conjugate of a regularizer :math:`\Omega`):

    .. math::
      \ell(\theta, y) = \Omega^*(\theta) - \langle y, \theta \rangle,

    up to :math:`\Omega(y)`, a constant in :math:`\theta`. Its gradient is
    :math:`\nabla \Omega^*(\theta) - y`: `logsumexp` gives the softmax
    cross entropy (up to a constant), a sparsemax value gives the sparsemax
    loss.

    The returned function `loss(scores, targets, *args, **kwargs)` applies
    `max_fun` (called as `max_fun(vector, *args, **kwargs)`) to each
    vector of the last axis; leading axes are batch axes. A target of 0
    against a score of `-inf` adds nothing to the inner product.

    Args:
      max_fun: a function of a 1-D vector of scores returning a scalar.

    Returns:
      The loss function, with values of shape `scores.shape[:-1]`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> from jax.scipy.special import logsumexp
      >>> loss = gradax.losses.make_fenchel_young_loss(logsumexp)
      >>> loss(jnp.array([[2.0, 0.0, -1.0]]), jnp.array([[1.0, 0.0, 0.0]]))
      Array([0.1698...], dtype=float32)

    References:
      Blondel, Martins and Niculae, Learning with Fenchel-Young Losses, JMLR
      2020 (arXiv:1901.02324).
    """
    max_last_axis = jnp.vectorize(max_fun, signature="(n)->()")

    def fenchel_young_loss(scores, targets, *args, **kwargs):
        inner = jnp.sum(mul_or_zero(jnp.asarray(targets), scores), axis=-1)
        return max_last_axis(scores, *args, **kwargs) - inner

    return fenchel_young_loss
