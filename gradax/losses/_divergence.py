"""Kullback-Leibler divergences between a target and a predicted distribution."""

from __future__ import annotations

import warnings
from typing import Any

import jax
import jax.numpy as jnp

from ._utils import check_floating, mul_or_zero


def kl_divergence(
    log_predictions: Any,
    targets: Any,
    axis: int | tuple[int, ...] | None = -1,
    where: Any | None = None,
) -> jax.Array:
    r"""Kullback-Leibler divergence of the predictions from the targets.

    With targets :math:`q` and log-predictions :math:`\log p` along `axis`:

    .. math::
      \mathrm{KL}(q \,\|\, p) = \sum_j q_j (\log q_j - \log p_j),

    with :math:`0 \log 0 = 0`: a zero target adds nothing, even against a
    prediction of `-inf`, and its gradients are finite.

    Differences from optax: optax returns NaN for a zero target against a
    `-inf` log-prediction, and a NaN gradient with respect to a zero
    target.

    Args:
      log_predictions: log-probabilities of the prediction, `[..., dim]`.
      targets: probabilities of the target, `[..., dim]`, non-negative.
      axis: the axis (or axes) of the distribution; None for all.
      where: which elements take part, broadcastable to the inputs.

    Returns:
      The divergence of each example, the inputs without `axis`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> log_p = jnp.log(jnp.array([0.5, 0.25, 0.25]))
      >>> gradax.losses.kl_divergence(log_p, jnp.array([0.5, 0.5, 0.0]))
      Array(0.3465..., dtype=float32)

    References:
      Kullback and Leibler, On Information and Sufficiency, Annals of
      Mathematical Statistics 22(1), 1951.
    """
    check_floating(log_predictions, "log_predictions", "kl_divergence")
    check_floating(targets, "targets", "kl_divergence")
    targets = jnp.asarray(targets)
    # log(q) with q = 0 replaced by log(1) = 0: finite slope at q = 0.
    log_targets = jnp.log(jnp.where(targets != 0, targets, jnp.ones_like(targets)))
    terms = mul_or_zero(targets, log_targets - log_predictions)
    return jnp.sum(terms, axis=axis, where=where)


def kl_divergence_with_log_targets(
    log_predictions: Any,
    log_targets: Any,
    axis: int | tuple[int, ...] | None = -1,
    where: Any | None = None,
) -> jax.Array:
    r"""Kullback-Leibler divergence with the targets given as log-probabilities.

    .. math::
      \mathrm{KL}(q \,\|\, p) = \sum_j e^{\log q_j} (\log q_j - \log p_j).

    A target of `-inf` (probability 0) adds nothing, with finite gradients.

    Differences from optax: optax returns NaN (and NaN gradients) for a
    `-inf` log-target.

    Args:
      log_predictions: log-probabilities of the prediction, `[..., dim]`.
      log_targets: log-probabilities of the target, `[..., dim]`.
      axis: the axis (or axes) of the distribution; None for all.
      where: which elements take part, broadcastable to the inputs.

    Returns:
      The divergence of each example, the inputs without `axis`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> log_p = jnp.log(jnp.array([0.5, 0.25, 0.25]))
      >>> log_q = jnp.log(jnp.array([0.5, 0.5, 0.0]))
      >>> gradax.losses.kl_divergence_with_log_targets(log_p, log_q)
      Array(0.3465..., dtype=float32)
    """
    check_floating(log_predictions, "log_predictions", "kl_divergence_with_log_targets")
    check_floating(log_targets, "log_targets", "kl_divergence_with_log_targets")
    log_targets = jnp.asarray(log_targets)
    terms = mul_or_zero(jnp.exp(log_targets), log_targets - log_predictions)
    return jnp.sum(terms, axis=axis, where=where)


def generalized_kl_divergence(
    log_predictions: Any,
    targets: Any,
    axis: int | tuple[int, ...] | None = -1,
    where: Any | None = None,
) -> jax.Array:
    r"""Generalized Kullback-Leibler divergence, for unnormalized distributions.

    The Bregman divergence of :math:`f(q) = \sum_j q_j \log q_j - q_j`:

    .. math::
      D(q \,\|\, p) = \sum_j q_j (\log q_j - \log p_j) - q_j + p_j,

    equal to :func:`kl_divergence` when both sum to one.

    Args:
      log_predictions: log of the (unnormalized) prediction, `[..., dim]`.
      targets: the (unnormalized) target, `[..., dim]`, non-negative.
      axis: the axis (or axes) of the distribution; None for all.
      where: which elements take part, broadcastable to the inputs.

    Returns:
      The divergence of each example, the inputs without `axis`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> log_p = jnp.log(jnp.array([1.0, 2.0]))
      >>> gradax.losses.generalized_kl_divergence(log_p, jnp.array([2.0, 2.0]))
      Array(0.3862..., dtype=float32)

    References:
      Bregman, The relaxation method of finding the common point of convex
      sets and its application to the solution of problems in convex
      programming, 1967; Boyd and Vandenberghe, Convex Optimization, 2004,
      p. 90.
    """
    divergence = kl_divergence(log_predictions, targets, axis=axis, where=where)
    mass = jnp.sum(jnp.exp(log_predictions) - targets, axis=axis, where=where)
    return divergence + mass


def convex_kl_divergence(
    log_predictions: Any,
    targets: Any,
    axis: int | tuple[int, ...] | None = -1,
    where: Any | None = None,
) -> jax.Array:
    """Deprecated name of :func:`generalized_kl_divergence` (as in optax).

    Emits a `DeprecationWarning` and returns
    `generalized_kl_divergence(log_predictions, targets, axis, where)`;
    the arguments and the result are those of that function.

    Example:
      >>> import warnings, jax.numpy as jnp, gradax
      >>> with warnings.catch_warnings():
      ...     warnings.simplefilter("ignore", DeprecationWarning)
      ...     loss = gradax.losses.convex_kl_divergence(
      ...         jnp.zeros(2), jnp.array([2.0, 2.0]))
      >>> loss
      Array(0.7725..., dtype=float32)
    """
    warnings.warn(
        "convex_kl_divergence is deprecated; use generalized_kl_divergence.",
        DeprecationWarning,
        stacklevel=2,
    )
    return generalized_kl_divergence(log_predictions, targets, axis=axis, where=where)
