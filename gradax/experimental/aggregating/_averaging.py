"""Averaging per-element updates, and accumulating averages over microbatches."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from ..._core.declarations import POSITIVE_INT, hyper, static_field
from ..._core.protocol import GradientTransformation
from ...combinators.chain import chain
from ._base import (
    Aggregator,
    MaybeAxis,
    accumulation_start,
    accumulation_step,
    canonical_axis,
)


class average_per_element_updates(Aggregator):
    r"""Averages per-element updates over their batch axis.

    .. math::
      u = \frac{1}{B} \sum_{b=1}^{B} g_b

    Args:
      per_elt_axis: the batch axis (or axes) of every leaf.

    Returns:
      A stateless :class:`Aggregator`.

    Example:
      >>> import jax.numpy as jnp
      >>> from gradax.experimental import aggregating
      >>> agg = aggregating.average_per_element_updates()
      >>> agg.update(jnp.array([[1.0, 2.0], [3.0, 4.0]]), agg.init(None))[0]
      Array([2., 3.], dtype=float32)
    """

    per_elt_axis: int | Sequence[int] = static_field(default=0)

    def update_state(self, updates, state, params=None, **extra_args):
        axis = canonical_axis(self.per_elt_axis)
        return jax.tree.map(lambda g: jnp.mean(g, axis=axis), updates), state


class AccumulateAvgUpdatesState(NamedTuple):
    """State of :class:`accumulate_avg_updates`."""

    micro_step: jax.Array  # int32 scalar: microbatches seen in this round
    ready: jax.Array  # bool scalar: the last update completed a round
    avg_grad: Any  # a tree like the params: running mean of this round


class accumulate_avg_updates(GradientTransformation):
    r"""Averages updates over `accumulation_steps` microbatches.

    On microbatch :math:`k = 1, \dots, K` of a round, with incoming update
    :math:`g_k`, the running mean is

    .. math::
      a_k = a_{k-1} + \frac{g_k - a_{k-1}}{k},

    the output is zero for :math:`k < K` and :math:`a_K` (the mean over the
    round) at :math:`k = K`, when the state's `ready` flag turns on and a
    new round starts. Use it as the aggregator of :func:`process` so the
    optimizer steps once per round.

    Args:
      accumulation_steps: :math:`K`, a positive integer; with 1 updates pass
        through unchanged and no state is kept.

    Returns:
      A transformation whose state is an :class:`AccumulateAvgUpdatesState`
      (an empty state when `accumulation_steps` is 1).

    Example:
      >>> import jax.numpy as jnp
      >>> from gradax.experimental import aggregating
      >>> acc = aggregating.accumulate_avg_updates(2)
      >>> state = acc.init(jnp.zeros(2))
      >>> u, state = acc.update(jnp.array([1.0, 2.0]), state)
      >>> u, state = acc.update(jnp.array([3.0, 4.0]), state)
      >>> u
      Array([2., 3.], dtype=float32)
    """

    accumulation_steps: int = hyper(valid=POSITIVE_INT, static=True)

    def init_state(self, params):
        return accumulation_start(
            AccumulateAvgUpdatesState, self.accumulation_steps, params, 1
        )

    def update_state(self, updates, state, params=None, **extra_args):
        if self.accumulation_steps == 1:
            return updates, state
        step = state.micro_step + 1
        mean = jax.tree.map(lambda g, a: a + (g - a) / step, updates, state.avg_grad)
        return accumulation_step(
            AccumulateAvgUpdatesState, step, self.accumulation_steps, mean, (mean,)
        )


class _Chained(Aggregator):
    """An aggregator followed by more transformations: still an aggregator."""

    inner: GradientTransformation

    def init_state(self, params):
        return self.inner.init(params)

    def update_state(self, updates, state, params=None, **extra_args):
        return self.inner.update(updates, state, params, **extra_args)


def average_incrementally_updates(
    per_elt_axis: MaybeAxis, accumulation_steps: int
) -> GradientTransformation:
    r"""Averages over the batch axis, then over microbatches.

    .. math::
      u = \frac{1}{K} \sum_{k=1}^{K} \frac{1}{B} \sum_{b=1}^{B} g_{k, b}

    emitted once every :math:`K` calls (zeros in between), as
    :func:`average_per_element_updates` followed by
    :class:`accumulate_avg_updates`.

    Args:
      per_elt_axis: the batch axis of the per-element updates, or None when
        the incoming updates are already averaged over the batch.
      accumulation_steps: :math:`K`, microbatches per update.

    Returns:
      An :class:`Aggregator` (state `(EmptyState(),
      AccumulateAvgUpdatesState)`), or :class:`accumulate_avg_updates` when
      `per_elt_axis` is None.

    Example:
      >>> import jax.numpy as jnp
      >>> from gradax.experimental import aggregating
      >>> agg = aggregating.average_incrementally_updates(0, 1)
      >>> agg.update(jnp.array([[1.0, 2.0], [3.0, 4.0]]), agg.init(jnp.zeros(2)))[0]
      Array([2., 3.], dtype=float32)
    """
    accumulate = accumulate_avg_updates(accumulation_steps)
    if per_elt_axis is None:
        return accumulate
    return _Chained(chain(average_per_element_updates(per_elt_axis), accumulate))
