"""WrappedSchedule: a step-count schedule as a stateful schedule."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax

from .._core.hyper import StatefulSchedule
from .._core.numerics import safe_increment
from .._core.protocol import zero_count
from .._core.pytree import static_field


class WrappedScheduleState(NamedTuple):
    """State of :class:`WrappedSchedule`."""

    count: jax.Array  # int32 scalar: number of updates so far


class WrappedSchedule(StatefulSchedule):
    """A schedule of the step count, in the stateful-schedule protocol.

    `init()` starts a counter at 0, `update(state)` adds one, and
    `self(state)` is `schedule_fn(state.count)`; so it can be given to
    :func:`inject_stateful_hyperparams` where a schedule is expected.

    Args:
      schedule_fn: a function of the step count (a gradax schedule or any
        callable).

    Example:
      >>> import gradax
      >>> sched = gradax.WrappedSchedule(gradax.linear_schedule(1.0, 0.0, 10))
      >>> state = sched.update(sched.init())
      >>> float(sched(state))
      0.9
    """

    schedule_fn: Callable[[Any], Any] = static_field()

    def init(self) -> WrappedScheduleState:
        return WrappedScheduleState(count=zero_count())

    def update(self, state: Any, **extra_args: Any) -> WrappedScheduleState:
        del extra_args
        return WrappedScheduleState(count=safe_increment(state.count))

    def __call__(self, state: Any, **extra_args: Any) -> Any:
        del extra_args
        return self.schedule_fn(state.count)
