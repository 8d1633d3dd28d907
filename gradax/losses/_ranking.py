"""Listwise ranking loss: the softmax cross entropy of scores against relevance.

Ranking losses compare the order that item scores induce with the order of
relevance labels. They work on the last axis; leading axes are lists in a
batch, reduced at the end by `reduce_fn` (the mean by default).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from ._utils import check_floating, mul_or_zero


def _reduce(
    losses: jax.Array,
    where: jax.Array | None,
    reduce_fn: Callable[..., Any] | None,
) -> jax.Array:
    """Reduce per-list losses; a mean over no valid list is 0, not NaN.

    Without `reduce_fn` the per-list losses come back with the invalid
    lists set to 0, so that summing them equals `reduce_fn=jnp.sum`. A NaN
    in the losses themselves is never hidden.
    """
    if reduce_fn is None:
        if where is None:
            return losses
        return jnp.where(where, losses, jnp.zeros_like(losses))
    reduced = reduce_fn(losses, where=where)
    if reduce_fn is jnp.mean:
        empty = jnp.isnan(reduced) & ~jnp.any(jnp.isnan(losses))
        reduced = jnp.where(empty, jnp.zeros_like(reduced), reduced)
    return reduced


def ranking_softmax_loss(
    logits: Any,
    labels: Any,
    *,
    where: Any | None = None,
    weights: Any | None = None,
    reduce_fn: Callable[..., Any] | None = jnp.mean,
) -> jax.Array:
    r"""Listwise softmax ranking loss.

    For a list with item scores :math:`s`, relevance labels :math:`y` and
    item weights :math:`w` (1 without `weights`):

    .. math::
      \ell(s, y) = -\sum_i w_i y_i \log \frac{e^{s_i}}{\sum_j e^{s_j}},

    the sums running over the valid items (`where`). Lists with no valid
    item are left out of the reduction.

    Args:
      logits: item scores, `[..., list_size]`.
      labels: relevance labels, `[..., list_size]`.
      where: which items are valid, `[..., list_size]` booleans.
        Keyword-only.
      weights: per-item weights, `[..., list_size]`. Keyword-only.
      reduce_fn: reduction over the lists taking a `where=` keyword
        (`jnp.mean` or `jnp.sum`), or None for the loss of each list.
        Keyword-only.

    Returns:
      The reduced loss, or the loss of each list, `[...]`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> scores = jnp.array([[2.0, 1.0, 3.0], [1.0, 0.5, 1.5]])
      >>> labels = jnp.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
      >>> where = jnp.array([[True, True, False], [True, True, True]])
      >>> gradax.losses.ranking_softmax_loss(scores, labels, where=where)
      Array(0.4967..., dtype=float32)

    References:
      Cao et al., Learning to Rank: From Pairwise Approach to Listwise
      Approach, ICML 2007; Bruch et al., An Analysis of the Softmax Cross
      Entropy Loss for Learning-to-Rank with Binary Relevance, ICTIR 2019.
    """
    check_floating(logits, "logits", "ranking_softmax_loss")
    logits = jnp.asarray(logits)
    labels = jnp.asarray(labels).astype(logits.dtype)
    if where is not None:
        where = jnp.asarray(where)
        labels = jnp.where(where, labels, jnp.zeros_like(labels))
        logits = jnp.where(where, logits, jnp.full_like(logits, -jnp.inf))
    if weights is not None:
        labels = labels * weights
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    losses = -jnp.sum(mul_or_zero(labels, log_probs), axis=-1, where=where)
    valid_lists = None if where is None else jnp.any(where, axis=-1)
    return _reduce(losses, valid_lists, reduce_fn)
