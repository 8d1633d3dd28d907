"""Aggregators: transformations of per-element gradients.

`optax.experimental.aggregating`. An :class:`Aggregator` receives one
gradient per batch element (leaves `[*batch_shape, *param_shape]`) and
returns one update; :func:`process` runs a preprocessor, an aggregator and
an optimizer in turn. Built-in aggregators average
(:class:`average_per_element_updates`), accumulate microbatches
(:class:`accumulate_avg_updates`, :func:`average_incrementally_updates`) and
measure the gradients' variance (:func:`add_mean_variance_to_opt`).
"""

from ._averaging import AccumulateAvgUpdatesState as AccumulateAvgUpdatesState
from ._averaging import accumulate_avg_updates as accumulate_avg_updates
from ._averaging import (
    average_incrementally_updates as average_incrementally_updates,
)
from ._averaging import average_per_element_updates as average_per_element_updates
from ._base import AggregatedUpdates as AggregatedUpdates
from ._base import Aggregator as Aggregator
from ._base import AggregatorUpdateFn as AggregatorUpdateFn
from ._base import MaybeAxis as MaybeAxis
from ._base import PerElementUpdates as PerElementUpdates
from ._base import process as process
from ._variance import (
    PerElementMeanAndSumSqDiffGradsState as PerElementMeanAndSumSqDiffGradsState,
)
from ._variance import (
    PerElementMeanAndVarianceEMAState as PerElementMeanAndVarianceEMAState,
)
from ._variance import add_mean_variance_to_opt as add_mean_variance_to_opt
from ._variance import (
    get_batch_size_from_per_elt_updates as get_batch_size_from_per_elt_updates,
)
from ._variance import (
    get_per_element_mean_and_sum_sq_diff_grads as get_per_element_mean_and_sum_sq_diff_grads,  # noqa: E501
)
from ._variance import (
    get_unbiased_mean_and_variance_ema as get_unbiased_mean_and_variance_ema,
)
from ._variance import (
    track_per_element_mean_and_variance_with_ema as track_per_element_mean_and_variance_with_ema,  # noqa: E501
)
