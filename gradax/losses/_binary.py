"""Losses of independent binary decisions: logistic, focal, hinge, sparsemax."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax.scipy.special import logsumexp

from ._utils import check_floating, check_same_shape, mul_or_zero


def sigmoid_binary_cross_entropy(logits, labels):
    r"""Element-wise logistic loss: cross entropy of a sigmoid and a label.

    With logit :math:`x`, label :math:`y \in [0, 1]` and :math:`\sigma` the
    sigmoid:

    .. math::
      \ell(x, y) = -y \log \sigma(x) - (1 - y) \log \sigma(-x).

    Each element is its own binary decision, so this serves binary and
    multi-label problems alike; make sure `logits` and `labels` line up
    before broadcasting. The logarithms are `log_sigmoid`, exact for large
    logits, and a zero weight cancels an infinite logarithm (an infinite logit
    on the side of its label has loss 0 and gradient 0).

    Differences from optax: optax returns NaN for an infinite logit, even one
    that agrees with its label.

    Args:
      logits: logits of the positive class, any shape.
      labels: labels in {0, 1} or probabilities, broadcastable to `logits`.

    Returns:
      The loss of each element, the broadcast shape.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> gradax.losses.sigmoid_binary_cross_entropy(
      ...     jnp.array([0.0, 2.0, -3.0]), jnp.array([1.0, 1.0, 0.0]))
      Array([0.6931..., 0.1269..., 0.0485...], dtype=float32)
    """
    check_floating(logits, "logits", "sigmoid_binary_cross_entropy")
    logits = jnp.asarray(logits)
    labels = jnp.asarray(labels).astype(logits.dtype)
    positive = mul_or_zero(labels, -jax.nn.log_sigmoid(logits))
    negative = mul_or_zero(1.0 - labels, -jax.nn.log_sigmoid(-logits))
    return positive + negative


def sigmoid_focal_loss(
    logits: Any,
    labels: Any,
    *,
    alpha: Any | None = None,
    gamma: Any = 2.0,
) -> jax.Array:
    r"""Focal loss: the logistic loss scaled down on well-classified elements.

    With :math:`p = \sigma(x)` and :math:`1 - p_t = (1 - y)\,p + y\,(1 - p)`
    (the probability given to the wrong side):

    .. math::
      \ell(x, y) = \alpha_t\, (1 - p_t)^\gamma\, \mathrm{BCE}(x, y),
      \qquad \alpha_t = \alpha y + (1 - \alpha)(1 - y),

    with :math:`\alpha_t = 1` when `alpha` is None. The factor
    :math:`(1 - p_t)^\gamma` is computed as the exponential of a log-sum-exp
    of log-sigmoids, accurate for any logit and any :math:`\gamma > 0`.

    Differences from optax: an infinite logit gives its limit (0 or inf) with
    a finite gradient, where optax gives NaN.

    Args:
      logits: logits of the positive class, any shape.
      labels: labels in {0, 1} or probabilities, broadcastable to `logits`.
      alpha: weight of the positive class in (0, 1), or None for no weighting.
        Keyword-only.
      gamma: the focusing exponent (0 gives the logistic loss). Keyword-only.

    Returns:
      The loss of each element, the broadcast shape.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> logits, labels = jnp.array([0.0, 2.0, -3.0]), jnp.array([1.0, 1.0, 0.0])
      >>> focal = gradax.losses.sigmoid_focal_loss(logits, labels)
      >>> focal
      Array([0.1732..., 0.0018..., 0.0001...], dtype=float32)
      >>> # the logistic loss, scaled by (1 - p_t)^2:
      >>> focal / gradax.losses.sigmoid_binary_cross_entropy(logits, labels)
      Array([0.25..., 0.0142..., 0.0022...], dtype=float32)

    References:
      Lin et al., Focal Loss for Dense Object Detection, 2017
      (arXiv:1708.02002).
    """
    check_floating(logits, "logits", "sigmoid_focal_loss")
    logits = jnp.asarray(logits)
    labels = jnp.asarray(labels).astype(logits.dtype)
    cross_entropy = sigmoid_binary_cross_entropy(logits, labels)
    # At an infinite logit the cross entropy is 0 or inf, so the factor does
    # not change the loss; a finite stand-in keeps its gradient finite.
    finite = jnp.where(jnp.isfinite(logits), logits, jnp.zeros_like(logits))
    log_p, log_not_p = jax.nn.log_sigmoid(finite), jax.nn.log_sigmoid(-finite)
    log_wrong = logsumexp(
        jnp.stack(jnp.broadcast_arrays(log_p, log_not_p)),
        b=jnp.stack(jnp.broadcast_arrays(1.0 - labels, labels)),
        axis=0,
    )
    loss = cross_entropy * jnp.exp(gamma * log_wrong)
    if alpha is None:
        return loss
    return (alpha * labels + (1.0 - alpha) * (1.0 - labels)) * loss


def hinge_loss(predictor_outputs: Any, targets: Any) -> jax.Array:
    r"""Binary hinge loss for targets in {-1, 1}.

    .. math::
      \ell(s, t) = \max(0,\ 1 - s\,t).

    Args:
      predictor_outputs: decision values :math:`s`, any shape.
      targets: targets :math:`t` in {-1, 1}, broadcastable to the outputs.

    Returns:
      The loss of each element.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> gradax.losses.hinge_loss(jnp.array([2.0, 0.5, -1.0]), jnp.array([1, 1, 1]))
      Array([0. , 0.5, 2. ], dtype=float32)
    """
    return jnp.maximum(0, 1 - predictor_outputs * targets)


def perceptron_loss(predictor_outputs: Any, targets: Any) -> jax.Array:
    r"""Binary perceptron loss for targets in {-1, 1}.

    .. math::
      \ell(s, t) = \max(0,\ -s\,t).

    Args:
      predictor_outputs: scores :math:`s`, any shape.
      targets: targets :math:`t` in {-1, 1}, the same shape.

    Returns:
      The loss of each element.

    Raises:
      ValueError: when the two shapes differ.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> gradax.losses.perceptron_loss(jnp.array([2.0, -0.5]), jnp.array([1.0, 1.0]))
      Array([0. , 0.5], dtype=float32)
    """
    check_same_shape(predictor_outputs, targets, "perceptron_loss")
    return jnp.maximum(0, -predictor_outputs * targets)


def sparsemax_loss(logits: Any, labels: Any) -> jax.Array:
    r"""Binary sparsemax loss, the Fenchel-Young loss of the sparse sigmoid.

    With :math:`z = -x` for label 1 and :math:`z = x` for label 0, and the
    sparse plus function :math:`\mathrm{sparseplus}(z) = 0` for
    :math:`z \le -1`, :math:`(z + 1)^2 / 4` for :math:`|z| < 1`, :math:`z`
    for :math:`z \ge 1`:

    .. math::
      \ell(x, y) = \mathrm{sparseplus}(z).

    It is zero exactly when `jax.nn.sparse_sigmoid(logits) == labels`.

    Args:
      logits: scores, any shape.
      labels: labels in {0, 1} (any nonzero value counts as 1).

    Returns:
      The loss of each element.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> gradax.losses.sparsemax_loss(jnp.array([2.0, 0.0, 0.5]), jnp.array([1, 1, 0]))
      Array([0.    , 0.25  , 0.5625], dtype=float32)

    References:
      Blondel, Martins and Niculae, Learning with Fenchel-Young Losses, JMLR
      2020 (arXiv:1901.02324), section 4.4.
    """
    return jax.nn.sparse_plus(jnp.where(labels, -logits, logits))
