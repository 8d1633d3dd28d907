"""Regression losses: squared error, Huber, log-cosh and cosine similarity."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ._utils import check_floating, check_same_shape


def _errors(predictions: Any, targets: Any | None) -> Any:
    """`predictions - targets`, or `predictions` without targets."""
    return predictions if targets is None else predictions - targets


def squared_error(predictions: Any, targets: Any | None = None) -> jax.Array:
    r"""Element-wise squared error.

    .. math::
      \ell(p, t) = (p - t)^2.

    The mean squared error is `squared_error(p, t).mean()`.

    Args:
      predictions: predictions, any shape.
      targets: targets of the same shape; None for zeros.

    Returns:
      The squared error of each element, shaped like `predictions`.

    Raises:
      ValueError: when `targets` has another shape.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> gradax.losses.squared_error(jnp.array([1.0, 3.0]), jnp.array([0.0, 1.0]))
      Array([1., 4.], dtype=float32)
    """
    check_floating(predictions, "predictions", "squared_error")
    if targets is not None:
        check_same_shape(predictions, targets, "squared_error")
    return _errors(predictions, targets) ** 2


def l2_loss(predictions: Any, targets: Any | None = None) -> jax.Array:
    r"""Element-wise half squared error.

    .. math::
      \ell(p, t) = \tfrac12 (p - t)^2,

    whose gradient is the error :math:`p - t` itself.

    Args:
      predictions: predictions, any shape.
      targets: targets of the same shape; None for zeros.

    Returns:
      Half the squared error of each element, shaped like `predictions`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> gradax.losses.l2_loss(jnp.array([1.0, 3.0]), jnp.array([0.0, 1.0]))
      Array([0.5, 2. ], dtype=float32)
    """
    return 0.5 * squared_error(jnp.asarray(predictions), targets)


def huber_loss(
    predictions: Any, targets: Any | None = None, *, delta: Any = 1.0
) -> jax.Array:
    r"""Element-wise Huber loss: quadratic near zero, linear beyond `delta`.

    With error :math:`e = p - t`:

    .. math::
      \ell(e) = \begin{cases} \tfrac12 e^2 & |e| \le \delta \\
                \delta (|e| - \tfrac12 \delta) & |e| > \delta \end{cases}

    Its gradient is the error clipped to :math:`[-\delta, \delta]`.

    Args:
      predictions: predictions, any shape.
      targets: targets broadcastable to `predictions`; None for zeros.
      delta: where the quadratic turns linear. Keyword-only.

    Returns:
      The loss of each element.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> gradax.losses.huber_loss(jnp.array([0.5, 3.0]))
      Array([0.125, 2.5  ], dtype=float32)

    References:
      Huber, Robust Estimation of a Location Parameter, Annals of
      Mathematical Statistics 35(1), 1964.
    """
    check_floating(predictions, "predictions", "huber_loss")
    magnitude = jnp.abs(_errors(predictions, targets))
    inside = jnp.minimum(magnitude, delta)
    # ``magnitude - inside`` rather than ``max(magnitude - delta, 0)``: at
    # |e| = delta the two pieces must not both pass a gradient.
    return 0.5 * inside**2 + delta * (magnitude - inside)


def log_cosh(predictions: Any, targets: Any | None = None) -> jax.Array:
    r"""Element-wise logarithm of the hyperbolic cosine of the error.

    .. math::
      \ell(e) = \log\cosh(e) = \log(e^{e} + e^{-e}) - \log 2,

    about :math:`e^2 / 2` near zero and :math:`|e| - \log 2` far from it: a
    twice differentiable cousin of the Huber loss. Computed with
    `logaddexp`, so it does not overflow.

    Args:
      predictions: predictions, any shape.
      targets: targets broadcastable to `predictions`; None for zeros.

    Returns:
      The loss of each element.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> gradax.losses.log_cosh(jnp.array([0.0, 1.0, 100.0]))
      Array([ 0.       ,  0.4337808, 99.306854 ], dtype=float32)

    References:
      Chen et al., Log Hyperbolic Cosine Loss Improves Variational
      Auto-Encoder, 2019 (openreview.net/forum?id=rkglvsC9Ym).
    """
    check_floating(predictions, "predictions", "log_cosh")
    errors = jnp.asarray(_errors(predictions, targets))
    return jnp.logaddexp(errors, -errors) - jnp.log(2.0).astype(errors.dtype)


def _unit(x: jax.Array, epsilon: Any, axis: Any, where: Any) -> jax.Array:
    """`x / max(|x|, sqrt(epsilon))` along `axis`; a zero vector stays zero.

    A zero norm is replaced by 1 before the square root (double `where`), so
    the gradient at a zero vector is finite instead of NaN.
    """
    squared = jnp.sum(jnp.square(x), axis=axis, where=where, keepdims=True)
    squared = jnp.maximum(squared, epsilon)
    positive = squared > 0
    norm = jnp.sqrt(jnp.where(positive, squared, jnp.ones_like(squared)))
    return x / norm


def cosine_similarity(
    predictions: Any,
    targets: Any,
    *,
    epsilon: Any = 0.0,
    axis: int | tuple[int, ...] | None = -1,
    where: Any | None = None,
) -> jax.Array:
    r"""Cosine of the angle between prediction and target vectors.

    .. math::
      \cos(p, t) = \frac{\langle p, t\rangle}
                        {\max(\|p\|, \sqrt\epsilon)\,\max(\|t\|, \sqrt\epsilon)}.

    Differences from optax: a zero vector (or one whose elements `where`
    leaves out) has similarity 0 with finite gradients, where optax returns
    NaN unless `epsilon > 0`.

    Args:
      predictions: predicted vectors, `[..., dim]`.
      targets: target vectors, `[..., dim]`.
      epsilon: floor of the squared norms. Keyword-only.
      axis: the axis (or axes) of the vectors; None for all. Keyword-only.
      where: which elements take part, broadcastable to the inputs.
        Keyword-only.

    Returns:
      The similarity of each pair, `[...]`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> gradax.losses.cosine_similarity(
      ...     jnp.array([[1.0, 0.0], [2.0, 0.0]]), jnp.array([[0.0, 1.0], [1.0, 0.0]]))
      Array([0., 1.], dtype=float32)
    """
    check_floating(predictions, "predictions", "cosine_similarity")
    check_floating(targets, "targets", "cosine_similarity")
    unit_predictions = _unit(jnp.asarray(predictions), epsilon, axis, where)
    unit_targets = _unit(jnp.asarray(targets), epsilon, axis, where)
    return jnp.sum(unit_predictions * unit_targets, axis=axis, where=where)


def cosine_distance(
    predictions: Any,
    targets: Any,
    *,
    epsilon: Any = 0.0,
    axis: int | tuple[int, ...] | None = -1,
    where: Any | None = None,
) -> jax.Array:
    r"""One minus the cosine similarity of predictions and targets.

    .. math::
      d(p, t) = 1 - \cos(p, t),

    in [0, 2]; see :func:`cosine_similarity` for the arguments.

    Args:
      predictions: predicted vectors, `[..., dim]`.
      targets: target vectors, `[..., dim]`.
      epsilon: floor of the squared norms. Keyword-only.
      axis: the axis (or axes) of the vectors; None for all. Keyword-only.
      where: which elements take part, broadcastable to the inputs.
        Keyword-only.

    Returns:
      The distance of each pair, `[...]`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> gradax.losses.cosine_distance(jnp.array([1.0, 0.0]), jnp.array([-1.0, 0.0]))
      Array(2., dtype=float32)
    """
    similarity = cosine_similarity(
        predictions, targets, epsilon=epsilon, axis=axis, where=where
    )
    return 1.0 - similarity
