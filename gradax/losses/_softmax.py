"""Cross entropies of a softmax: probability labels, integer labels, PolyLoss."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ._utils import (
    check_floating,
    expand_where,
    mul_or_zero,
    normalize_axes,
)


def softmax_cross_entropy(
    logits: Any,
    labels: Any,
    axis: int | tuple[int, ...] | None = -1,
    where: Any | None = None,
) -> jax.Array:
    r"""Cross entropy between label distributions and the softmax of logits.

    With logits :math:`x` and labels :math:`y` (one-hot or any distribution)
    along `axis`:

    .. math::
      \ell(x, y) = -\sum_j y_j \log \mathrm{softmax}(x)_j
                 = -\sum_j y_j \Big(x_j - \log \sum_k e^{x_k}\Big).

    A class with logit :math:`-\infty` and label 0 adds nothing
    (:math:`0 \log 0 = 0`), so masked classes are safe in value and gradient.

    Differences from optax: optax returns NaN for a `-inf` logit with label
    0 (use its `safe_softmax_cross_entropy` for that); gradax returns the
    limit, which is what `safe_softmax_cross_entropy` computes.

    Args:
      logits: unnormalized log-probabilities, `[..., num_classes]`.
      labels: probabilities over the classes, broadcastable to `logits`.
      axis: the class axis, or a tuple of axes; None for all of them.
      where: which classes take part, shaped like `logits`, or one flag per
        example (shaped like the result).

    Returns:
      The cross entropy of each example, `logits` without `axis`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> logits = jnp.array([[2.0, 0.0, -1.0], [0.5, 0.5, -jnp.inf]])
      >>> labels = jnp.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
      >>> gradax.losses.softmax_cross_entropy(logits, labels)
      Array([0.1698..., 0.6931...], dtype=float32)
    """
    check_floating(logits, "logits", "softmax_cross_entropy")
    logits = jnp.asarray(logits)
    where = expand_where(where, axis, logits.ndim)
    log_probs = jax.nn.log_softmax(logits, axis=axis, where=where)
    if where is not None:
        # Left out classes are -inf; 0 keeps a label's gradient finite there.
        log_probs = jnp.where(where, log_probs, 0.0)
    return -jnp.sum(mul_or_zero(labels, log_probs), axis=axis, where=where)


def safe_softmax_cross_entropy(logits: Any, labels: Any) -> jax.Array:
    r"""Softmax cross entropy over the last axis with :math:`0 \log 0 = 0`.

    .. math::
      \ell(x, y) = -\sum_{j:\, y_j \neq 0} y_j \log \mathrm{softmax}(x)_j.

    In gradax this is :func:`softmax_cross_entropy` with `axis=-1` (which
    treats `-inf` logits with zero labels the same way); the name is kept
    for optax users.

    Args:
      logits: unnormalized log-probabilities, `[..., num_classes]`; `-inf`
        marks an impossible class.
      labels: probabilities over the classes, broadcastable to `logits`.

    Returns:
      The cross entropy of each example, `[...]`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> logits = jnp.array([0.0, 0.0, -jnp.inf])
      >>> gradax.losses.safe_softmax_cross_entropy(logits, jnp.array([1.0, 0, 0]))
      Array(0.6931..., dtype=float32)
    """
    check_floating(logits, "logits", "safe_softmax_cross_entropy")
    log_probs = jax.nn.log_softmax(jnp.asarray(logits), axis=-1)
    return -jnp.sum(mul_or_zero(labels, log_probs), axis=-1)


def _flatten_class_axes(x: jax.Array, axes: tuple[int, ...]) -> jax.Array:
    """Move `axes` to the end (in their order) and merge them into one."""
    batch = tuple(i for i in range(x.ndim) if i not in axes)
    x = jnp.transpose(x, batch + axes)
    return x.reshape(x.shape[: len(batch)] + (-1,))


def softmax_cross_entropy_with_integer_labels(
    logits: Any,
    labels: Any,
    axis: int | tuple[int, ...] = -1,
    where: Any | None = None,
) -> jax.Array:
    r"""Softmax cross entropy against integer class labels.

    For an example with logits :math:`x` and label :math:`c`:

    .. math::
      \ell(x, c) = \log \sum_k e^{x_k} - x_c.

    Only the label's logit is subtracted, so logits of `-inf` on other
    classes are safe.

    Args:
      logits: unnormalized log-probabilities, `[..., num_classes]`.
      labels: integer labels in `[0, num_classes)`, `logits` without
        `axis`. With a tuple of axes, a label is the flat (row-major) index
        into those axes.
      axis: the class axis, or a tuple of class axes.
      where: which classes take part, shaped like `logits`, or one flag per
        example; an example with no class taking part has loss 0.

    Returns:
      The cross entropy of each example, shaped like `labels`.

    Raises:
      ValueError: when `axis` is neither an int nor a tuple of ints.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> logits = jnp.array([[2.0, 0.0, -1.0], [0.5, 0.5, -jnp.inf]])
      >>> gradax.losses.softmax_cross_entropy_with_integer_labels(
      ...     logits, jnp.array([0, 1]))
      Array([0.1698..., 0.6931...], dtype=float32)
    """
    check_floating(logits, "logits", "softmax_cross_entropy_with_integer_labels")
    if not isinstance(axis, (int, tuple)):
        raise ValueError(
            "softmax_cross_entropy_with_integer_labels: axis must be an int or a "
            f"tuple of ints, got {type(axis).__name__}"
        )
    logits = jnp.asarray(logits)
    labels = jnp.asarray(labels)
    where = expand_where(where, axis, logits.ndim)
    if isinstance(axis, tuple):
        axes = normalize_axes(axis, logits.ndim)
        if where is not None:
            where = _flatten_class_axes(jnp.broadcast_to(where, logits.shape), axes)
        logits = _flatten_class_axes(logits, axes)
        axis = logits.ndim - 1
    else:
        (axis,) = normalize_axes(axis, logits.ndim)
    picked = jnp.take_along_axis(logits, jnp.expand_dims(labels, axis), axis=axis)
    label_logits = jnp.squeeze(picked, axis)
    log_normalizer = jax.nn.logsumexp(logits, axis=axis, where=where)
    loss = log_normalizer - label_logits
    if where is not None:
        loss = jnp.where(jnp.any(where, axis=axis), loss, 0.0)
    return loss


def poly_loss_cross_entropy(
    logits: Any,
    labels: Any,
    *,
    epsilon: Any = 2.0,
    axis: int | tuple[int, ...] | None = -1,
    where: Any | None = None,
) -> jax.Array:
    r"""Poly-1 loss: softmax cross entropy plus a linear term in :math:`1 - p_t`.

    With :math:`p = \mathrm{softmax}(x)` and labels :math:`y`:

    .. math::
      \ell(x, y) = -\sum_j y_j \log p_j + \epsilon \sum_j y_j (1 - p_j).

    PolyLoss writes cross entropy as a series in :math:`(1 - p_t)^j` and
    changes the first coefficient by :math:`\epsilon` (2 for ImageNet
    classification in the paper, -1 for detection).

    Differences from optax: the `-inf` logits of :func:`softmax_cross_entropy`
    are safe here too, and a `where` with one flag per example also works
    for the polynomial term.

    Args:
      logits: unnormalized log-probabilities, `[..., num_classes]`.
      labels: probabilities over the classes, broadcastable to `logits`.
      epsilon: the change of the first polynomial coefficient.
      axis: the class axis, or a tuple of axes; None for all of them.
      where: which classes take part, shaped like `logits`, or one flag per
        example.

    Returns:
      The loss of each example, `logits` without `axis`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> logits = jnp.array([2.0, 0.0, -1.0])
      >>> gradax.losses.poly_loss_cross_entropy(logits, jnp.array([1.0, 0, 0]))
      Array(0.4822..., dtype=float32)

    References:
      Leng et al., PolyLoss: A Polynomial Expansion Perspective of
      Classification Loss Functions, 2022 (arXiv:2204.12511).
    """
    check_floating(logits, "logits", "poly_loss_cross_entropy")
    check_floating(labels, "labels", "poly_loss_cross_entropy")
    logits = jnp.asarray(logits)
    where = expand_where(where, axis, logits.ndim)
    probs = jax.nn.softmax(logits, axis=axis, where=where)
    one_minus_pt = jnp.sum(labels * (1 - probs), axis=axis, where=where)
    cross_entropy = softmax_cross_entropy(logits, labels, axis=axis, where=where)
    return cross_entropy + epsilon * one_minus_pt
