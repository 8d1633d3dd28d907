"""Multiclass margin losses on scores and integer labels: hinge, perceptron,
sparsemax."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ._utils import default_float


def _label_scores(scores: jax.Array, labels: jax.Array) -> jax.Array:
    """The score of each example's label (0 for a label outside the classes).

    A gather rather than a dot product with a one-hot vector, so a `-inf`
    score on another class does not turn into `0 * -inf`.
    """
    num_classes = scores.shape[-1]
    batch = jnp.broadcast_shapes(scores.shape[:-1], labels.shape)
    scores = jnp.broadcast_to(scores, batch + (num_classes,))
    labels = jnp.broadcast_to(labels, batch)
    valid = (labels >= 0) & (labels < num_classes)
    index = jnp.where(valid, labels, 0)[..., None]
    picked = jnp.take_along_axis(scores, index, axis=-1)[..., 0]
    return jnp.where(valid, picked, jnp.zeros_like(picked))


def _promoted(scores: Any) -> jax.Array:
    """Scores in at least the default float dtype (optax's result dtype)."""
    scores = jnp.asarray(scores)
    return scores.astype(jnp.result_type(scores.dtype, default_float()))


def multiclass_hinge_loss(scores: Any, labels: Any) -> jax.Array:
    r"""Multiclass hinge loss (Crammer-Singer): the largest margin violation.

    With scores :math:`s` and label :math:`c`:

    .. math::
      \ell(s, c) = \max_j \big(s_j + [j \neq c]\big) - s_c.

    Classes with score `-inf` never win the maximum (a safe class mask).

    Args:
      scores: scores, `[..., num_classes]`.
      labels: integer labels in `[0, num_classes)`, `[...]`.

    Returns:
      The largest margin violation of each example, `[...]`, in at least
      the default float dtype (as in optax).

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> scores = jnp.array([[2.0, 0.5, -1.0], [0.0, 1.0, 0.2]])
      >>> gradax.losses.multiclass_hinge_loss(scores, jnp.array([0, 0]))
      Array([0., 2.], dtype=float32)
    """
    scores = _promoted(scores)
    labels = jnp.asarray(labels)
    one_hot = jax.nn.one_hot(labels, scores.shape[-1], dtype=scores.dtype)
    worst = jnp.max(scores + 1.0 - one_hot, axis=-1)
    return worst - _label_scores(scores, labels)


def multiclass_perceptron_loss(scores: Any, labels: Any) -> jax.Array:
    r"""Multiclass perceptron loss: how far the label's score is from the top.

    .. math::
      \ell(s, c) = \max_j s_j - s_c.

    No margin: a label whose score is on top costs nothing, however close the
    next one (in the example, class 2 is masked out).

    Args:
      scores: scores, `[..., num_classes]`; `-inf` masks a class.
      labels: integer labels in `[0, num_classes)`, `[...]`.

    Returns:
      How far each example's label score is below the top score, `[...]`,
      in at least the default float dtype (as in optax).

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> scores = jnp.array([1.0, 0.5, -jnp.inf])
      >>> gradax.losses.multiclass_perceptron_loss(scores, jnp.array([0, 1]))
      Array([0. , 0.5], dtype=float32)

    References:
      Collins, Discriminative Training Methods for Hidden Markov Models:
      Theory and Experiments with Perceptron Algorithms, EMNLP 2002.
    """
    scores = _promoted(scores)
    return jnp.max(scores, axis=-1) - _label_scores(scores, jnp.asarray(labels))


def _sparsemax(scores: jax.Array) -> jax.Array:
    """Euclidean projection of each last-axis vector onto the simplex.

    The support is the largest prefix of the sorted scores with
    `1 + k u_k > u_1 + ... + u_k`; the threshold `tau` makes the clipped
    scores sum to one. Differentiating through the sort gives the projection's
    Jacobian (identity on the support minus its mean), so no custom rule is
    needed; `-inf` scores fall outside the support without NaNs.
    """
    num = scores.shape[-1]
    descending = jnp.flip(jnp.sort(scores, axis=-1), axis=-1)
    partial_sums = jnp.cumsum(descending, axis=-1)
    rank = jnp.arange(1, num + 1, dtype=scores.dtype)
    support_size = jnp.sum(1 + rank * descending > partial_sums, axis=-1)
    support_size = support_size[..., None]
    top_sum = jnp.take_along_axis(partial_sums, support_size - 1, axis=-1)
    tau = (top_sum - 1) / support_size.astype(scores.dtype)
    return jax.nn.relu(scores - tau)


def multiclass_sparsemax_loss(scores: Any, labels: Any) -> jax.Array:
    r"""Multiclass sparsemax loss, the Fenchel-Young loss of sparsemax.

    With :math:`p = \mathrm{sparsemax}(s)`, the Euclidean projection of the
    scores onto the probability simplex, and label :math:`c`:

    .. math::
      \ell(s, c) = \langle p, s - s_c \rangle + \tfrac12 (1 - \|p\|^2),

    whose gradient is :math:`p - e_c`: sparse, as a class outside the support
    of :math:`p` gets none.

    Differences from optax: any number of leading batch dimensions (optax
    takes exactly one), and float16/bfloat16 scores can be differentiated.

    Args:
      scores: scores, `[..., num_classes]`; `-inf` masks a class.
      labels: integer labels in `[0, num_classes)`, `[...]`.

    Returns:
      The loss of each example, `[...]`, in at least the default float
      dtype (as in optax).

    Example:
      >>> import jax, jax.numpy as jnp, gradax
      >>> scores = jnp.array([2.0, 1.5, -1.0])
      >>> gradax.losses.multiclass_sparsemax_loss(scores, 0)
      Array(0.0625, dtype=float32)
      >>> jax.grad(gradax.losses.multiclass_sparsemax_loss)(scores, 0)
      Array([-0.25,  0.25,  0.  ], dtype=float32)

    References:
      Martins and Astudillo, From Softmax to Sparsemax: A Sparse Model of
      Attention and Multi-Label Classification, ICML 2016 (arXiv:1602.02068).
    """
    scores = _promoted(scores)
    label_scores = _label_scores(scores, jnp.asarray(labels))
    probs = _sparsemax(scores)
    gaps = jnp.where(probs > 0, scores - label_scores[..., None], 0.0)
    return jnp.sum(probs * gaps, axis=-1) + 0.5 * (
        1.0 - jnp.sum(probs * probs, axis=-1)
    )
