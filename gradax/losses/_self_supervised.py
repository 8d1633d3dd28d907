"""Losses on embeddings: contrastive NT-Xent and the triplet margin loss."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ._regression import cosine_similarity
from ._utils import check_floating


def ntxent(embeddings: Any, labels: Any, temperature: Any = 0.07) -> jax.Array:
    r"""Normalized temperature-scaled cross entropy (NT-Xent, SimCLR's loss).

    With :math:`s_{ij}` the cosine similarity of embeddings :math:`i` and
    :math:`j` divided by the temperature :math:`\tau`, :math:`P` the pairs
    :math:`i \neq j` with equal labels (positives) and :math:`N_i` the
    embeddings with another label than :math:`i` (negatives):

    .. math::
      \ell = \frac{1}{|P|} \sum_{(i, j) \in P}
        -\log \frac{e^{s_{ij}}}{e^{s_{ij}} + \sum_{k \in N_i} e^{s_{ik}}}.

    Each term is a log-sum-exp, so no exponential overflows at small
    temperatures.

    Differences from optax: a batch without positive pairs has loss 0, where
    optax returns NaN.

    Args:
      embeddings: the embeddings, `[batch, dim]`.
      labels: `[batch]` integers; equal labels mark positive pairs (e.g.
        `[0, 0, 1, 1]` for two augmented views of two images).
      temperature: :math:`\tau`, the scale of the similarities.

    Returns:
      The mean loss over the positive pairs, a scalar.

    Raises:
      ValueError: when `labels` and `embeddings` differ in length.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> x = jnp.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 1.0]])
      >>> gradax.losses.ntxent(x, jnp.array([0, 0, 1, 1]), temperature=0.5)
      Array(0.2931..., dtype=float32)

    References:
      Chen et al., A Simple Framework for Contrastive Learning of Visual
      Representations, ICML 2020 (arXiv:2002.05709).
    """
    check_floating(embeddings, "embeddings", "ntxent")
    embeddings, labels = jnp.asarray(embeddings), jnp.asarray(labels)
    if labels.shape[0] != embeddings.shape[0]:
        raise ValueError(
            f"ntxent: {labels.shape[0]} labels for {embeddings.shape[0]} embeddings;"
            " the leading dimensions must be equal"
        )
    return _ntxent(embeddings, labels, temperature)


@jax.jit
def _ntxent(embeddings, labels, temperature):
    """NT-Xent of checked inputs, compiled once per shape."""
    eps = jnp.finfo(embeddings.dtype).eps
    similarity = cosine_similarity(
        embeddings[None, :, :], embeddings[:, None, :], epsilon=eps
    )
    similarity = similarity / temperature
    same = labels[:, None] == labels[None, :]
    positive = same & ~jnp.eye(labels.shape[0], dtype=bool)
    # log of the summed exponentials of each row's negatives (-inf: none).
    negatives = jax.nn.logsumexp(similarity, axis=1, where=~same, keepdims=True)
    pair_losses = jnp.logaddexp(similarity, negatives) - similarity
    total = jnp.sum(jnp.where(positive, pair_losses, 0.0))
    count = jnp.maximum(jnp.sum(positive), 1)
    return total / count


def triplet_margin_loss(
    anchors: Any,
    positives: Any,
    negatives: Any,
    axis: int = -1,
    norm_degree: Any = 2,
    margin: Any = 1.0,
    eps: Any = 1e-6,
) -> jax.Array:
    r"""Triplet margin loss: an anchor nearer its positive than its negative.

    With the distance :math:`d(x, y) = (\sum (x - y)^q + \varepsilon)^{1/q}`
    along `axis` (:math:`q` the norm degree):

    .. math::
      \ell(a, p, n) = \max\big(0,\ d(a, p) - d(a, n) + m\big).

    Args:
      anchors: anchor embeddings, `[batch, dim]`.
      positives: embeddings similar to the anchors, the same shape.
      negatives: embeddings dissimilar to the anchors, the same shape.
      axis: the embedding axis.
      norm_degree: :math:`q`, the degree of the distance (2: Euclidean).
      margin: :math:`m`, by how much the negative must be farther.
      eps: :math:`\varepsilon`, keeps the root differentiable at distance 0.

    Returns:
      The loss of each triplet, `[batch]`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> anchors = jnp.array([[0.0, 0.0], [1.0, 1.0]])
      >>> positives = jnp.array([[0.1, 0.1], [1.1, 1.1]])
      >>> negatives = jnp.array([[1.0, 0.0], [0.0, 1.0]])
      >>> gradax.losses.triplet_margin_loss(anchors, positives, negatives)
      Array([0.1414..., 0.1414...], dtype=float32)

    References:
      Balntas et al., Learning local feature descriptors with triplets and
      shallow convolutional neural networks, BMVC 2016.
    """
    inputs = {"anchors": anchors, "positives": positives, "negatives": negatives}
    for name, x in inputs.items():
        check_floating(x, name, "triplet_margin_loss")

    def distance(x, y):
        powered = jnp.power(x - y, norm_degree)
        return jnp.power(jnp.sum(powered, axis=axis) + eps, 1 / norm_degree)

    gap = distance(anchors, positives) - distance(anchors, negatives)
    return jnp.maximum(gap + margin, 0)
