"""Tracking the mean and variance of per-element gradients during training."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from ... import tree as gtree
from ..._core.declarations import DECAY, POSITIVE_INT, hyper, static_field
from ..._core.numerics import safe_increment
from ..._core.protocol import GradientTransformation, zero_count
from ..._core.simple import identity
from ...combinators.chain import chain
from ._base import (
    Aggregator,
    accumulation_start,
    accumulation_step,
    canonical_axis,
    process,
)


def get_batch_size_from_per_elt_updates(
    per_elt_updates: Any, per_elt_axis: int | Sequence[int]
) -> int:
    """The number of elements in a batch of per-element updates.

    Args:
      per_elt_updates: pytree of per-element updates.
      per_elt_axis: the batch axis, or a list of batch axes (their sizes
        multiply).

    Returns:
      The batch size, the same for every leaf.

    Raises:
      ValueError: if leaves disagree on the batch size.

    Example:
      >>> import jax.numpy as jnp
      >>> from gradax.experimental import aggregating
      >>> aggregating.get_batch_size_from_per_elt_updates(
      ...     {"w": jnp.zeros((4, 3)), "b": jnp.zeros((4,))}, 0)
      4
    """

    def size(leaf: Any) -> int:
        if isinstance(per_elt_axis, int):
            return leaf.shape[per_elt_axis]
        return math.prod(leaf.shape[axis] for axis in per_elt_axis)

    sizes = [size(leaf) for leaf in jax.tree.leaves(per_elt_updates)]
    if any(s != sizes[0] for s in sizes):
        raise ValueError(
            f"Per-element updates must have the same batch size. Got: {sizes}"
        )
    return sizes[0]


class PerElementMeanAndSumSqDiffGradsState(NamedTuple):
    """State of :class:`get_per_element_mean_and_sum_sq_diff_grads`."""

    micro_step: jax.Array  # int32 scalar: microbatches seen in this round
    ready: jax.Array  # bool scalar: the last update completed a round
    mean_grads: Any  # a tree like the params: mean gradient so far
    sum_sq_diff_grads: Any  # a tree like the params: sum of squared deviations


class get_per_element_mean_and_sum_sq_diff_grads(Aggregator):
    r"""Mean and sum of squared deviations of per-element gradients.

    Over the :math:`N` elements :math:`g_1, \dots, g_N` of a batch (or of
    `accumulation_steps` microbatches of :math:`B` elements each):

    .. math::
      \bar g = \frac{1}{N} \sum_n g_n,\qquad
      S = \sum_n (g_n - \bar g)^2,

    so that :math:`S / (N - 1)` is the unbiased variance. Microbatches are
    merged with Chan et al.'s pairwise update: with a batch mean
    :math:`m`, batch sum :math:`s` and :math:`\delta = m - \bar g`, after
    :math:`k - 1` microbatches

    .. math::
      \bar g \leftarrow \bar g + \delta / k,\qquad
      S \leftarrow S + s + \delta^2 \, (k - 1) B / k.

    The update is :math:`\bar g`, and `{"sum_sq_diff_grads": S,
    "sample_size": N}` goes with it as extra arguments for the
    postprocessor (:func:`process` with `aggregator_has_aux=True`), every
    `accumulation_steps` calls (zeros in between).

    Args:
      per_elt_axis: the batch axis (or axes) of the per-element updates.
      accumulation_steps: microbatches per output, a positive integer.

    Returns:
      An :class:`Aggregator` returning `(mean, aux)`; its state is a
      :class:`PerElementMeanAndSumSqDiffGradsState` (empty for one step).

    Example:
      >>> import jax.numpy as jnp
      >>> from gradax.experimental import aggregating
      >>> agg = aggregating.get_per_element_mean_and_sum_sq_diff_grads()
      >>> (mean, aux), _ = agg.update(jnp.array([[1.0], [3.0]]), agg.init(None))
      >>> mean, aux["sum_sq_diff_grads"], aux["sample_size"]
      (Array([2.], dtype=float32), Array([2.], dtype=float32), 2)

    References:
      Chan, Golub and LeVeque, `Updating formulae and a pairwise algorithm
      for computing sample variances
      <https://doi.org/10.1007/978-3-642-51461-6_3>`_, COMPSTAT 1982.
    """

    per_elt_axis: int | Sequence[int] = static_field(default=0)
    accumulation_steps: int = hyper(default=1, valid=POSITIVE_INT, static=True)

    def init_state(self, params):
        return accumulation_start(
            PerElementMeanAndSumSqDiffGradsState, self.accumulation_steps, params, 2
        )

    def _batch_statistics(self, updates):
        axis = canonical_axis(self.per_elt_axis)
        means = jax.tree.map(lambda g: jnp.mean(g, axis, keepdims=True), updates)
        sums = jax.tree.map(
            lambda g, m: jnp.sum(jnp.square(g - m), axis), updates, means
        )
        means = jax.tree.map(lambda m: jnp.squeeze(m, axis), means)
        return means, sums

    def update_state(self, updates, state, params=None, **extra_args):
        batch_size = get_batch_size_from_per_elt_updates(updates, self.per_elt_axis)
        batch_mean, batch_sum = self._batch_statistics(updates)
        if self.accumulation_steps == 1:
            aux = {"sum_sq_diff_grads": batch_sum, "sample_size": batch_size}
            return (batch_mean, aux), state

        step = state.micro_step + 1
        delta = gtree.sub(batch_mean, state.mean_grads)
        mean = jax.tree.map(lambda a, d: a + d / step, state.mean_grads, delta)
        weight = state.micro_step * batch_size / step
        total = jax.tree.map(
            lambda s, b, d: s + b + d**2 * weight,
            state.sum_sq_diff_grads,
            batch_sum,
            delta,
        )
        outputs = (
            mean,
            {"sum_sq_diff_grads": total, "sample_size": batch_size * step},
        )
        return accumulation_step(
            PerElementMeanAndSumSqDiffGradsState,
            step,
            self.accumulation_steps,
            outputs,
            (mean, total),
        )


class PerElementMeanAndVarianceEMAState(NamedTuple):
    """State of :class:`track_per_element_mean_and_variance_with_ema`."""

    count: jax.Array  # int32 scalar: number of updates
    ema_decay: jax.Array  # float scalar: the decay, kept for bias correction
    mean_grads_ema: Any  # a tree like the params
    variance_grads_ema: Any  # a tree like the params


class track_per_element_mean_and_variance_with_ema(GradientTransformation):
    r"""Moving averages of the gradient mean and variance (updates unchanged).

    With the aggregated update :math:`\bar g_t` and the extra arguments
    `sum_sq_diff_grads` :math:`S_t` and `sample_size` :math:`N_t` that
    :class:`get_per_element_mean_and_sum_sq_diff_grads` provides through
    :func:`process`, and decay :math:`\beta`:

    .. math::
      \mu_t = (1 - \beta)\, \bar g_t + \beta\, \mu_{t-1},\qquad
      \nu_t = (1 - \beta)\, \frac{S_t}{N_t - 1} + \beta\, \nu_{t-1}.

    :func:`get_unbiased_mean_and_variance_ema` reads them back,
    bias-corrected. The updates pass through unchanged.

    Args:
      ema_decay: :math:`\beta`, in [0, 1).

    Returns:
      A transformation whose state is a
      :class:`PerElementMeanAndVarianceEMAState`; its `update` requires the
      keyword arguments `sum_sq_diff_grads` and `sample_size`.

    Example:
      >>> import jax.numpy as jnp
      >>> from gradax.experimental import aggregating
      >>> tx = aggregating.track_per_element_mean_and_variance_with_ema(0.5)
      >>> state = tx.init(jnp.zeros(1))
      >>> _, state = tx.update(jnp.array([2.0]), state,
      ...                      sum_sq_diff_grads=jnp.array([2.0]), sample_size=2)
      >>> aggregating.get_unbiased_mean_and_variance_ema(state)
      (Array([2.], dtype=float32), Array([2.], dtype=float32))
    """

    _required_extra_args = ("sum_sq_diff_grads", "sample_size")

    ema_decay: Any = hyper(default=0.9, valid=DECAY)

    def init_state(self, params):
        return PerElementMeanAndVarianceEMAState(
            count=zero_count(),
            ema_decay=jnp.asarray(self.ema_decay),
            mean_grads_ema=gtree.zeros_like(params),
            variance_grads_ema=gtree.zeros_like(params),
        )

    def update_state(self, updates, state, params=None, **extra_args):
        # Required: the base checked both are given.
        sum_sq_diff_grads = extra_args["sum_sq_diff_grads"]
        sample_size = extra_args["sample_size"]
        decay = self.ema_decay

        def ema(new, old):
            return (1.0 - decay) * new + decay * old

        variance = gtree.scale(1 / (sample_size - 1), sum_sq_diff_grads)
        new_state = state._replace(
            count=safe_increment(state.count),
            mean_grads_ema=jax.tree.map(ema, updates, state.mean_grads_ema),
            variance_grads_ema=jax.tree.map(ema, variance, state.variance_grads_ema),
        )
        return updates, new_state


def get_unbiased_mean_and_variance_ema(state: Any) -> tuple[Any, Any]:
    r"""The bias-corrected moving averages of the gradient mean and variance.

    .. math::
      \hat\mu_t = \frac{\mu_t}{1 - \beta^t},\qquad
      \hat\nu_t = \frac{\nu_t}{1 - \beta^t}

    from the :class:`PerElementMeanAndVarianceEMAState` found anywhere in
    `state` (see :func:`add_mean_variance_to_opt`).

    Args:
      state: an optimizer state holding one
        :class:`PerElementMeanAndVarianceEMAState`.

    Returns:
      `(mean, variance)`, pytrees like the parameters.

    Raises:
      ValueError: if `state` holds no such state.

    Example:
      >>> import jax.numpy as jnp
      >>> from gradax.experimental import aggregating
      >>> tx = aggregating.track_per_element_mean_and_variance_with_ema(0.5)
      >>> _, state = tx.update(jnp.array([2.0]), tx.init(jnp.zeros(1)),
      ...                      sum_sq_diff_grads=jnp.array([2.0]), sample_size=2)
      >>> state.mean_grads_ema  # after one step: (1 - 0.5) * 2
      Array([1.], dtype=float32)
      >>> aggregating.get_unbiased_mean_and_variance_ema(state)[0]  # / (1 - 0.5)
      Array([2.], dtype=float32)
    """
    found = gtree.get(state, "PerElementMeanAndVarianceEMAState", None)
    if found is None:
        raise ValueError(
            "get_unbiased_mean_and_variance_ema needs a state holding a "
            "PerElementMeanAndVarianceEMAState (see add_mean_variance_to_opt)."
        )
    correction = 1 - found.ema_decay**found.count
    return (
        jax.tree.map(lambda m: m / correction, found.mean_grads_ema),
        jax.tree.map(lambda v: v / correction, found.variance_grads_ema),
    )


def add_mean_variance_to_opt(
    opt: Any,
    ema_decay: Any = 0.9,
    per_elt_axis: int | list[int] = 0,
    accumulation_steps: int = 1,
) -> GradientTransformation:
    r"""An optimizer on per-element gradients that also tracks their variance.

    .. math::
      u = \text{opt}(\bar g),\qquad
      \text{tracking } \mu_t \approx \mathbb{E}[g],\ \nu_t \approx
      \operatorname{Var}[g]

    It is :func:`process` of `identity()`,
    :class:`get_per_element_mean_and_sum_sq_diff_grads` and
    `chain(track_per_element_mean_and_variance_with_ema(ema_decay), opt)`:
    `opt` steps on the mean gradient :math:`\bar g` (once every
    `accumulation_steps` calls), and
    :func:`get_unbiased_mean_and_variance_ema` reads the moving averages of
    the per-element gradients' mean and variance from the state.

    Args:
      opt: the optimizer (a gradax or optax transformation).
      ema_decay: decay of the moving averages, in [0, 1).
      per_elt_axis: the batch axis (or axes) of the per-element gradients.
      accumulation_steps: microbatches per optimizer step.

    Returns:
      An :class:`Aggregator`: feed it per-element gradients, e.g. from
      `jax.vmap(jax.grad(loss), (None, 0))`.

    Example:
      >>> import jax, jax.numpy as jnp, gradax
      >>> from gradax.experimental import aggregating
      >>> tx = aggregating.add_mean_variance_to_opt(gradax.sgd(0.1), 0.9)
      >>> per_example = jnp.array([[1.0, 2.0], [3.0, 6.0]])
      >>> _, state = tx.update(per_example, tx.init(jnp.zeros(2)))
      >>> mean, variance = aggregating.get_unbiased_mean_and_variance_ema(state)
      >>> mean.round(4), variance.round(4)  # 1 - 0.9 is not exact in float32
      (Array([2., 4.], dtype=float32), Array([2., 8.], dtype=float32))
    """
    return process(
        identity(),
        get_per_element_mean_and_sum_sq_diff_grads(per_elt_axis, accumulation_steps),
        chain(track_per_element_mean_and_variance_with_ema(ema_decay), opt),
        aggregator_has_aux=True,
    )
