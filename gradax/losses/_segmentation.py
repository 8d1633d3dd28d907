"""Overlap losses for segmentation: Dice, Tversky and generalized Dice."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ._utils import check_rank, check_same_shape

_REDUCTIONS = ("mean", "sum", "none")


def _check_distributions(probs: jax.Array) -> None:
    """Raise unless concrete multi-class probabilities sum to one per pixel.

    Skipped for a single channel (probabilities of the positive class, which
    need not sum to one) and under tracing, where values are unknown.
    """
    if probs.shape[-1] == 1 or isinstance(probs, jax.core.Tracer):
        return
    sums = np.asarray(jnp.sum(probs, axis=-1), dtype=np.float64)
    if not np.allclose(sums, 1.0, rtol=1e-5):
        raise ValueError(
            "dice_loss: with apply_softmax=False the predictions must be valid "
            "probability distributions (summing to 1 over the class axis); the "
            "sums range "
            f"over [{sums.min():.6f}, {sums.max():.6f}]"
        )


def dice_loss(
    predictions: Any,
    targets: Any,
    *,
    class_weights: Any | None = None,
    smooth: Any = 1.0,
    alpha: Any = 0.5,
    beta: Any = 0.5,
    apply_softmax: bool = True,
    reduction: str = "mean",
    ignore_background: bool = False,
    axis: Any | None = None,
) -> jax.Array:
    r"""Soft Dice loss (Tversky loss for unequal `alpha` and `beta`).

    Per class :math:`c`, with probabilities :math:`p`, targets :math:`t` and
    sums over the spatial axes:

    .. math::
      I_c = \sum_i p_{ic} t_{ic}, \quad
      \ell_c = 1 - \frac{I_c + s}
        {I_c + \alpha (\sum_i p_{ic} - I_c) + \beta (\sum_i t_{ic} - I_c) + s},

    weighting false positives by :math:`\alpha` and false negatives by
    :math:`\beta`; :math:`\alpha = \beta = 1/2` is the Dice loss. The
    per-class losses are weighted, then reduced over the classes.

    Differences from optax: the check that probabilities sum to one
    (`apply_softmax=False`) applies to several classes only and is skipped
    under `jit`, where optax fails to trace.

    Args:
      predictions: logits `[..., num_classes]` (softmax), or `[..., 1]`
        / `[...]` for one binary channel (sigmoid).
      targets: one-hot targets of the same shape, or binary targets.
      class_weights: `[num_classes]` weights of the classes. Keyword-only.
      smooth: :math:`s`, added to both sides of the ratio. Keyword-only.
      alpha: :math:`\alpha`, the weight of false positives. Keyword-only.
      beta: :math:`\beta`, the weight of false negatives. Keyword-only.
      apply_softmax: turn logits into probabilities (sigmoid for one
        channel); False for probabilities. Keyword-only.
      reduction: `"mean"` or `"sum"` over the classes, or `"none"`.
        Keyword-only.
      ignore_background: leave class 0 out (with more than one class).
        Keyword-only.
      axis: the axes summed over; None for all but the first and the last.
        Keyword-only.

    Returns:
      `[batch...]` after a reduction, `[batch..., num_classes]` with
      `"none"`.

    Raises:
      ValueError: for an unknown `reduction`, mismatched shapes, or
        probabilities that do not sum to one.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> logits = jnp.array([[[2.0, -1.0], [-1.0, 2.0]]])  # [1, 2 pixels, 2]
      >>> targets = jnp.array([[[1.0, 0.0], [0.0, 1.0]]])
      >>> gradax.losses.dice_loss(logits, targets)
      Array([0.0237...], dtype=float32)

    References:
      Milletari, Navab and Ahmadi, V-Net: Fully Convolutional Neural Networks
      for Volumetric Medical Image Segmentation, 2016 (arXiv:1606.04797);
      Salehi, Erdogmus and Gholipour, Tversky loss function for image
      segmentation using 3D fully convolutional deep networks, 2017
      (arXiv:1706.05721).
    """
    if reduction not in _REDUCTIONS:
        raise ValueError(f"dice_loss: reduction must be one of {_REDUCTIONS}")
    predictions, targets = jnp.asarray(predictions), jnp.asarray(targets)
    if predictions.ndim == targets.ndim - 1:
        predictions = predictions[..., None]
    if targets.ndim == predictions.ndim - 1:
        targets = targets[..., None]
    check_same_shape(predictions, targets, "dice_loss")
    if apply_softmax:
        if predictions.shape[-1] == 1:
            probs = jax.nn.sigmoid(predictions)
        else:
            probs = jax.nn.softmax(predictions, axis=-1)
    else:
        probs = predictions
        _check_distributions(probs)
    if axis is None:
        axis = tuple(range(1, probs.ndim - 1))
    overlap = jnp.sum(probs * targets, axis=axis)
    false_positives = jnp.sum(probs, axis=axis) - overlap
    false_negatives = jnp.sum(targets, axis=axis) - overlap
    ratio = (overlap + smooth) / (
        overlap + alpha * false_positives + beta * false_negatives + smooth
    )
    losses = 1.0 - ratio
    if class_weights is not None:
        check_rank(class_weights, 1, "class_weights", "dice_loss")
        losses = losses * class_weights
    if ignore_background and probs.shape[-1] > 1:
        losses = losses[..., 1:]
    if reduction == "mean":
        return jnp.mean(losses, axis=-1)
    if reduction == "sum":
        return jnp.sum(losses, axis=-1)
    return losses


def multiclass_generalized_dice_loss(
    predictions: Any,
    targets: Any,
    *,
    smooth: Any = 1.0,
    apply_softmax: bool = True,
    ignore_background: bool = False,
) -> jax.Array:
    r"""Generalized Dice loss: Dice weighted by inverse squared class volumes.

    With :math:`T_c` the total target mass of class :math:`c` over the whole
    batch, the class weights are

    .. math::
      w_c \propto \frac{1}{T_c^2 + 10^{-7}}, \qquad \sum_c w_c = C,

    and the result is the mean of the weighted per-class Dice losses of
    :func:`dice_loss` over the batch and the classes, so that rare classes
    count as much as common ones.

    Args:
      predictions: logits (or probabilities), `[..., num_classes]`.
      targets: one-hot targets, the same shape.
      smooth: added to both sides of each Dice ratio. Keyword-only.
      apply_softmax: turn logits into probabilities. Keyword-only.
      ignore_background: leave class 0 out. Keyword-only.

    Returns:
      The loss, a scalar.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> logits = jnp.array([[[2.0, -1.0], [-1.0, 2.0], [1.0, 0.0]]])
      >>> targets = jnp.array([[[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]]])
      >>> gradax.losses.multiclass_generalized_dice_loss(logits, targets)
      Array(0.0808..., dtype=float32)

    References:
      Sudre et al., Generalised Dice overlap as a deep learning loss function
      for highly unbalanced segmentations, 2017 (arXiv:1707.03237).
    """
    check_same_shape(predictions, targets, "multiclass_generalized_dice_loss")
    targets = jnp.asarray(targets)
    volumes = jnp.sum(targets, axis=tuple(range(targets.ndim - 1)))
    inverse = 1.0 / (volumes**2 + 1e-7)
    class_weights = inverse / jnp.sum(inverse) * inverse.shape[0]
    per_class = dice_loss(
        predictions,
        targets,
        class_weights=class_weights,
        smooth=smooth,
        apply_softmax=apply_softmax,
        reduction="none",
        ignore_background=ignore_background,
    )
    return jnp.mean(per_class)


def binary_dice_loss(
    predictions: Any,
    targets: Any,
    *,
    smooth: Any = 1.0,
    apply_sigmoid: bool = True,
) -> jax.Array:
    r"""Dice loss of one binary channel (sigmoid of the logits).

    :func:`dice_loss` with a single class: inputs without a channel axis get
    one, so `[batch, H, W]` is summed over `H` and `W`.

    Differences from optax: `apply_sigmoid=False` accepts probabilities
    (optax requires a single channel to sum to one, so it only accepts
    all-ones).

    Args:
      predictions: logits (or probabilities), `[...]` or `[..., 1]`.
      targets: binary targets, the same shape.
      smooth: added to both sides of the Dice ratio. Keyword-only.
      apply_sigmoid: turn logits into probabilities. Keyword-only.

    Returns:
      The loss of each example, `[batch...]`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> logits = jnp.array([[3.0, -3.0, 2.0]])
      >>> gradax.losses.binary_dice_loss(logits, jnp.array([[1.0, 0.0, 1.0]]))
      Array([0.0363...], dtype=float32)
    """
    predictions, targets = jnp.asarray(predictions), jnp.asarray(targets)
    if predictions.ndim == targets.ndim and predictions.shape[-1] != 1:
        predictions, targets = predictions[..., None], targets[..., None]
    return dice_loss(
        predictions,
        targets,
        smooth=smooth,
        apply_softmax=apply_sigmoid,
        reduction="mean",
    )
