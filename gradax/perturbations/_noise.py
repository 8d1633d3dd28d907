"""Noise distributions for perturbed functions: a sampler and a log-density."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from .._core.pytree import Module


class _StandardNoise(Module):
    """A noise distribution that samples with the JAX sampler `_draw`."""

    _abstract = True

    def sample(
        self, key: Any, sample_shape: tuple[int, ...] = (), dtype: Any = float
    ) -> jax.Array:
        """Samples of the given shape and dtype.

        Args:
          key: a JAX random key.
          sample_shape: the shape of the samples.
          dtype: their floating-point dtype.
        """
        this: Any = self  # `_draw` is each distribution's
        return this._draw(key, sample_shape, dtype)


class Normal(_StandardNoise):
    r"""The standard normal distribution.

    .. math::
      \log p(z) = -\tfrac{1}{2} z^2 + \text{const}

    `sample(key, sample_shape=(), dtype=float)` draws samples and
    `log_prob(inputs)` is the log-density up to its constant, all that
    :func:`make_perturbed_fun` needs.

    Example:
      >>> import jax.numpy as jnp
      >>> from gradax.perturbations import Normal
      >>> Normal().log_prob(jnp.array([1.0, 2.0]))
      Array([-0.5, -2. ], dtype=float32)
    """

    _draw = staticmethod(jax.random.normal)

    def log_prob(self, inputs: jax.Array) -> jax.Array:
        """The log-density at `inputs`, up to an additive constant.

        Args:
          inputs: the points, an array of any shape.
        """
        return -0.5 * inputs**2


class Gumbel(_StandardNoise):
    r"""The standard Gumbel distribution (location 0, scale 1).

    .. math::
      \log p(z) = -z - e^{-z}

    `sample(key, sample_shape=(), dtype=float)` draws samples and
    `log_prob(inputs)` is the log-density, all that
    :func:`make_perturbed_fun` needs. Perturbing scores with Gumbel noise
    turns an argmax into a sample of the softmax distribution.

    Example:
      >>> import jax
      >>> from gradax.perturbations import Gumbel
      >>> Gumbel().sample(jax.random.key(0), (3,)).shape
      (3,)
    """

    _draw = staticmethod(jax.random.gumbel)

    def log_prob(self, inputs: jax.Array) -> jax.Array:
        """The log-density at `inputs`.

        Args:
          inputs: the points, an array of any shape.
        """
        return -inputs - jnp.exp(-inputs)
