"""Type aliases and state names that optax code refers to.

The aliases describe arguments (`ScalarOrSchedule` for a learning rate,
`MaskOrFn` for a mask); the state names are the classes gradax's
transformations really return, under the names optax gives them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Union

from .._core import declarations as _declare
from .._core import protocol as _protocol
from .._core.protocol import EmptyState, OptState, Params, Updates
from ..combinators.masked import PartitionState

MaskOrFn = Union[Any, Callable[[Params], Any], None]  # noqa: UP007 - a runtime alias
"""A mask: a tree of booleans like the params, a function of the params
returning one, or None."""

ScalarOrSchedule = _declare.ScalarOrSchedule
"""A hyperparameter: a number, an array, or a schedule (a function of the
step count); the same object as optax's alias."""

TransformInitFn = Callable[[Params], OptState]
"""The type of ``init``: ``init(params) -> state``."""

TransformUpdateFn = Callable[..., tuple[Updates, OptState]]
"""The type of ``update``: ``update(updates, state, params=None) -> (updates,
state)``."""

TransformUpdateExtraArgsFn = Callable[..., tuple[Updates, OptState]]
"""The type of ``update`` with extra keyword arguments: ``update(updates,
state, params=None, **extra_args) -> (updates, state)``. Every gradax
``update`` has this type."""

AddDecayedWeightsState = EmptyState
"""State of :class:`add_decayed_weights` with a number (as in optax); with a
scheduled ``weight_decay`` it keeps a ``WeightDecaySchedule(count)``."""

ScaleState = EmptyState
"""State of :class:`scale`: ``EmptyState()`` for a number, as in optax (a
scheduled ``step_size``, which only gradax takes, keeps a
:class:`ScaleByScheduleState`)."""

MultiTransformState = PartitionState
"""State of :class:`multi_transform`: a :class:`PartitionState` (as in optax)."""

ScaleByScheduleState = _protocol.ScaleByScheduleState
"""State of :class:`scale_by_schedule`: ``ScaleByScheduleState(count)``, as in
optax."""


def init_empty_state(params: Params) -> EmptyState:
    """An `init` for transformations without state: returns `EmptyState()`.

    Args:
      params: ignored.

    Returns:
      `EmptyState()`.

    Example:
      >>> import gradax
      >>> gradax.init_empty_state({"w": 1.0})
      EmptyState()
    """
    del params
    return EmptyState()
