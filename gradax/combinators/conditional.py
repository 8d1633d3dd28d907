"""Running a transformation only at some steps: apply_if_finite, conditionally_*."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp

from .._core.declarations import Range, hyper
from .._core.numerics import safe_increment
from .._core.protocol import (
    GradientTransformation,
    TransformationLike,
    transformation_field,
    zero_count,
)
from .._core.pytree import static_field
from ._wrapping import all_finite, cond_inner_update, cond_update


class ConditionFn(Protocol):
    """A predicate of the step counter for the `conditionally_*` wrappers.

    Called as `fn(step, **extra_args)` with `step` an int32 scalar (the
    extra arguments only with `forward_extra_args=True`); returns a boolean
    scalar: True runs the inner transformation.
    """

    def __call__(self, step: jax.Array, **extra_args: Any) -> Any: ...


class ConditionallyTransformState(NamedTuple):
    """State of :class:`conditionally_transform`."""

    inner_state: Any
    step: jax.Array  # int32 scalar: number of updates so far


class ConditionallyMaskState(NamedTuple):
    """State of :class:`conditionally_mask`."""

    step: jax.Array  # int32 scalar: number of updates so far
    inner_state: Any


class _Conditional(GradientTransformation):
    """The two `conditionally_*` wrappers, but for what a skipped step returns.

    Each says it in `_on_skip` ("pass": the updates, "zeros": zeros), and
    gives its state class as `_state_class`.
    """

    _abstract = True

    inner: TransformationLike = transformation_field()
    should_transform_fn: Callable[..., Any] = static_field()
    forward_extra_args: bool = static_field(default=False)

    # `_state_class` and `_on_skip` are each wrapper's (typed Any here).
    def init_state(self, params):
        this: Any = self
        return this._state_class(inner_state=self.inner.init(params), step=zero_count())

    def update_state(self, updates, state, params=None, **extra_args):
        this: Any = self
        kwargs = extra_args if self.forward_extra_args else {}
        new_updates, inner_state = cond_update(
            self.should_transform_fn(state.step, **kwargs),
            self.inner,
            updates,
            state.inner_state,
            params,
            extra_args,
            on_skip=this._on_skip,
            owner=type(self).__name__,
        )
        return new_updates, this._state_class(
            inner_state=inner_state, step=safe_increment(state.step)
        )


class conditionally_transform(_Conditional):
    """Runs `inner` only at the steps where a predicate holds.

    At update `t` (counted from 0), if `should_transform_fn(t)` is True
    the inner transformation runs; otherwise the updates pass through unchanged
    and the inner state is kept. To return zeros instead, use
    :class:`conditionally_mask`.

    Args:
      inner: the inner transformation (gradax or optax).
      should_transform_fn: a :class:`ConditionFn` of the step counter.
      forward_extra_args: also pass the update's extra keyword arguments to
        `should_transform_fn`.

    Returns:
      A transformation with state :class:`ConditionallyTransformState`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.conditionally_transform(gradax.scale(10.0), lambda t: t >= 1)
      >>> state = tx.init(jnp.ones(2))
      >>> updates, state = tx.update(jnp.ones(2), state)
      >>> updates
      Array([1., 1.], dtype=float32)
      >>> tx.update(jnp.ones(2), state)[0]
      Array([10., 10.], dtype=float32)
    """

    _on_skip = "pass"
    _state_class = ConditionallyTransformState


class conditionally_mask(_Conditional):
    """Runs `inner` at the steps where a predicate holds, else returns zeros.

    Like :class:`conditionally_transform`, except that on the steps where
    `should_transform_fn` is False the updates are zeros (the inner state is
    still kept).

    Args:
      inner: the inner transformation (gradax or optax).
      should_transform_fn: a :class:`ConditionFn` of the step counter; where
        it is False, the updates are zeros.
      forward_extra_args: also pass the update's extra keyword arguments to
        `should_transform_fn`.

    Returns:
      A transformation with state :class:`ConditionallyMaskState` (the step
      counter first, unlike :class:`ConditionallyTransformState`).

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.conditionally_mask(gradax.trace(decay=1.0), lambda t: t % 2 == 1)
      >>> state = tx.init(jnp.zeros(2))
      >>> for _ in range(4):  # the trace sums the updates of the odd steps only
      ...     updates, state = tx.update(jnp.ones(2), state)
      ...     print(updates)
      [0. 0.]
      [1. 1.]
      [0. 0.]
      [2. 2.]
    """

    _on_skip = "zeros"
    _state_class = ConditionallyMaskState


class ApplyIfFiniteState(NamedTuple):
    """State of :class:`apply_if_finite`."""

    notfinite_count: jax.Array  # int32 scalar: consecutive non-finite updates
    last_finite: jax.Array  # bool scalar: whether the last updates were finite
    total_notfinite: jax.Array  # int32 scalar: all non-finite updates so far
    inner_state: Any


# Any number, as optax takes it (it is only compared with the count).
_MAX_ERRORS = Range(
    warn_below=0.0,
    warning=(
        "a negative count skips no update: every non-finite one is applied, as in optax"
    ),
)


class apply_if_finite(GradientTransformation):
    """Skips updates holding a NaN or an infinity, up to a number in a row.

    If any element of the incoming updates is not finite, the inner
    transformation does not run: the updates returned are zeros and the inner
    state is kept. After more than `max_consecutive_errors` such updates in a
    row, the next non-finite one is passed to the inner transformation anyway.

    Args:
      inner: the inner transformation (gradax or optax).
      max_consecutive_errors: how many non-finite updates in a row to skip,
        usually an integer >= 0. As in optax, any number is compared with
        the count (`2.5` skips 2 in a row), and a negative one skips none;
        a negative one warns.

    Returns:
      A transformation with state :class:`ApplyIfFiniteState`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.apply_if_finite(gradax.scale(-1.0), max_consecutive_errors=2)
      >>> state = tx.init(jnp.ones(2))
      >>> updates, state = tx.update(jnp.array([1.0, jnp.inf]), state)
      >>> updates, int(state.notfinite_count)
      (Array([0., 0.], dtype=float32), 1)
    """

    inner: TransformationLike = transformation_field()
    # A count compared with a counter in the state, not a schedule.
    max_consecutive_errors: Any = hyper(valid=_MAX_ERRORS, schedule=False)

    def init_state(self, params):
        return ApplyIfFiniteState(
            notfinite_count=zero_count(),
            last_finite=jnp.array(True),
            total_notfinite=zero_count(),
            inner_state=self.inner.init(params),
        )

    def update_state(self, updates, state, params=None, **extra_args):
        finite = all_finite(updates)
        notfinite_count = jnp.where(
            finite,
            jnp.zeros_like(state.notfinite_count),
            safe_increment(state.notfinite_count),
        )
        give_up = notfinite_count > self.max_consecutive_errors
        run = jnp.logical_or(finite, give_up)
        new_updates, inner_state = cond_inner_update(
            self, run, updates, state, params, extra_args, owner="apply_if_finite"
        )
        return new_updates, ApplyIfFiniteState(
            notfinite_count=notfinite_count,
            last_finite=finite,
            total_notfinite=jnp.where(
                finite, state.total_notfinite, safe_increment(state.total_notfinite)
            ),
            inner_state=inner_state,
        )
