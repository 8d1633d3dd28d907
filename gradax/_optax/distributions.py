"""A diagonal Gaussian parameterized by its log scale (optax.multi_normal)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax.scipy.stats import norm


class MultiNormalDiagFromLogScale:
    """A Gaussian with independent coordinates, mean `loc`, std `exp(log_scale)`.

    Args:
      loc: the mean.
      log_scale: the log of the standard deviation (broadcast with `loc`).
    """

    def __init__(self, loc: Any, log_scale: Any):
        self._mean = jnp.asarray(loc)
        self._log_scale = jnp.asarray(log_scale)
        self._scale = jnp.exp(self._log_scale)
        self._param_shape = jax.lax.broadcast_shapes(
            self._mean.shape, self._scale.shape
        )

    def sample(self, shape: Sequence[int], key: jax.Array) -> jax.Array:
        """`shape` independent draws, each of the parameters' shape."""
        noise = jax.random.normal(key, (*shape, *self._param_shape))
        return noise * self._scale + self._mean

    def log_prob(self, x: Any) -> jax.Array:
        """The log density of `x`, summed over the parameters' axes."""
        per_coordinate = norm.logpdf(x, loc=self._mean, scale=self._scale)
        axes = tuple(-(i + 1) for i in range(len(self._param_shape)))
        return jnp.sum(per_coordinate, axis=axes)

    @property
    def log_scale(self) -> jax.Array:
        """The log standard deviation, as given."""
        return self._log_scale

    @property
    def params(self) -> list[jax.Array]:
        """`[loc, log_scale]`."""
        return [self._mean, self._log_scale]


def multi_normal(loc: Any, log_scale: Any) -> MultiNormalDiagFromLogScale:
    """A diagonal Gaussian with mean `loc` and std `exp(log_scale)`.

    Args:
      loc: the mean.
      log_scale: the log standard deviation.

    Returns:
      A :class:`MultiNormalDiagFromLogScale` with `sample(shape, key)`,
      `log_prob(x)`, `log_scale` and `params`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> dist = gradax.multi_normal(jnp.zeros(2), jnp.zeros(2))
      >>> dist.log_prob(jnp.zeros(2)).round(4)
      Array(-1.8379, dtype=float32)
    """
    return MultiNormalDiagFromLogScale(loc, log_scale)
