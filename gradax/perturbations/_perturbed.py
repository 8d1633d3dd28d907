"""Smoothing a function by averaging it over random perturbations of its input."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from .. import tree as gtree
from ._noise import Gumbel


def _magic_box(log_prob: jax.Array) -> jax.Array:
    """1 in value; its derivative is `d log_prob` times itself (DiCE)."""
    return jnp.exp(log_prob - jax.lax.stop_gradient(log_prob))


def make_perturbed_fun(
    fun: Callable[[Any], Any],
    num_samples: int = 1000,
    sigma: Any = 0.1,
    noise: Any = Gumbel(),
    use_baseline: Any = True,
) -> Callable[[Any, Any], Any]:
    r"""A differentiable Monte-Carlo smoothing of `fun` by random perturbations.

    For a noise distribution :math:`\mu` with log-density :math:`\log p` and a
    scale :math:`\sigma`, the smoothed function is

    .. math::
      f_\sigma(x) = \mathbb{E}_{z \sim \mu}\, f(x + \sigma z),

    which is differentiable in :math:`x` even where :math:`f` is not
    (an argmax, a sort, a rounding). The returned function estimates it with
    `num_samples` samples :math:`z_k`, written so that JAX derivatives of any
    order of the estimate are unbiased estimates of the derivatives of
    :math:`f_\sigma`: with :math:`y_k = x + \sigma z_k` held fixed and
    :math:`\ell_k(x) = \log p((y_k - x) / \sigma)`,

    .. math::
      \hat f_\sigma(x) = \frac{1}{K} \sum_k \big(
      w_k f(y_k) + (1 - w_k)\, b \big),\qquad
      w_k = \exp(\ell_k - \bot(\ell_k)),

    where :math:`\bot` stops gradients (:math:`w_k = 1` in value, the DiCE
    "magic box") and :math:`b = f(\bot(x))` is a baseline that lowers the
    variance of derivatives without changing their mean. Only values of
    :math:`f` are used, never its derivatives (the score-function or
    REINFORCE estimator).

    Args:
      fun: the function to smooth, from a pytree of arrays to a pytree of
        arrays.
      num_samples: number of perturbations :math:`K` averaged over.
      sigma: scale :math:`\sigma` of the perturbations.
      noise: the distribution :math:`\mu`: an object with
        `sample(key, sample_shape, dtype)` and `log_prob(inputs)`, such as
        :class:`Gumbel` (the default) or :class:`Normal`.
      use_baseline: subtract the baseline :math:`b = f(x)` (unperturbed) for
        variance reduction.

    Returns:
      `perturbed(key, x)`: `fun`'s signature with a leading PRNG key.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from gradax.perturbations import make_perturbed_fun
      >>> relu_sum = lambda x: jnp.sum(jnp.maximum(x, 0.0))
      >>> smooth = make_perturbed_fun(relu_sum, num_samples=100, sigma=0.5)
      >>> grad = jax.jit(jax.grad(smooth, argnums=1))
      >>> grad(jax.random.key(0), jnp.zeros(3)).shape
      (3,)

    References:
      Berthet et al., `Learning with Differentiable Perturbed Optimizers
      <https://arxiv.org/abs/2002.08676>`_, NeurIPS 2020; Foerster et al.,
      `DiCE: The Infinitely Differentiable Monte Carlo Estimator
      <https://arxiv.org/abs/1802.05098>`_, ICML 2018; Salimans et al.,
      `Evolution Strategies as a Scalable Alternative to Reinforcement
      Learning <https://arxiv.org/abs/1703.03864>`_, 2017.
    """

    def one_sample(key: Any, x: Any, baseline: Any) -> Any:
        z = gtree.random_like(key, x, sampler=noise.sample)
        perturbed = jax.lax.stop_gradient(
            jax.tree.map(lambda xi, zi: xi + sigma * zi, x, z)
        )
        # The same noise, recovered as a function of x, so that derivatives
        # with respect to x flow through its log-density only.
        z = jax.tree.map(lambda xi, yi: (yi - xi) / sigma, x, perturbed)
        weight = _magic_box(gtree.sum(jax.tree.map(noise.log_prob, z)))
        value = gtree.scale(weight, fun(perturbed))
        if use_baseline:
            value = gtree.add_scale(value, 1 - weight, baseline)
        return value

    def perturbed_fun(key: Any, x: Any) -> Any:
        baseline = fun(jax.lax.stop_gradient(x)) if use_baseline else None
        keys = jax.random.split(key, num_samples)
        values = jax.vmap(one_sample, in_axes=(0, None, None))(keys, x, baseline)
        return jax.tree.map(lambda v: jnp.mean(v, axis=0), values)

    return perturbed_fun
