"""Label smoothing."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from ._utils import check_floating, normalize_axes


def smooth_labels(
    labels: Any,
    alpha: Any,
    *,
    axis: int | tuple[int, ...] | None = -1,
    where: Any | None = None,
) -> jax.Array:
    r"""Label smoothing: mix one-hot labels with the uniform distribution.

    With :math:`K` classes along `axis` (the classes `where` keeps, when
    given):

    .. math::
      \tilde y = (1 - \alpha)\, y + \frac{\alpha}{K}.

    Cross entropy against smoothed labels keeps logit gaps small, which
    tends to improve calibration.

    Differences from optax: an example whose classes `where` all leaves out
    gets :math:`(1 - \alpha) y` instead of `inf`.

    Args:
      labels: one-hot labels (or any distributions), floating point.
      alpha: the smoothing factor :math:`\alpha \in [0, 1]`.
      axis: the class axis, or a tuple of axes; None for all. Keyword-only.
      where: which classes count in :math:`K`, broadcastable to `labels`.
        Keyword-only.

    Returns:
      The smoothed labels, shaped like `labels`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> gradax.losses.smooth_labels(jnp.array([0.0, 1.0, 0.0, 0.0]), 0.2)
      Array([0.05, 0.85, 0.05, 0.05], dtype=float32)

    References:
      Szegedy et al., Rethinking the Inception Architecture for Computer
      Vision, CVPR 2016 (arXiv:1512.00567); Müller, Kornblith and Hinton,
      When Does Label Smoothing Help?, NeurIPS 2019 (arXiv:1906.02629).
    """
    check_floating(labels, "labels", "smooth_labels")
    labels = jnp.asarray(labels)
    if where is None:
        if axis is None:
            num_classes = labels.size
        else:
            axes = normalize_axes(axis, labels.ndim)
            num_classes = math.prod(labels.shape[i] for i in axes)
        return (1.0 - alpha) * labels + alpha / num_classes
    num_classes = jnp.sum(where, axis=axis, keepdims=True)
    present = num_classes > 0
    uniform = alpha / jnp.where(present, num_classes, 1)
    return (1.0 - alpha) * labels + jnp.where(present, uniform, 0.0)
