"""Reduce the scale of the updates when the loss stops improving."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import tree as gtree
from .._core.declarations import (
    NONNEGATIVE,
    NONNEGATIVE_INT,
    POSITIVE_INT,
    UNIT,
    Range,
    hyper,
)
from .._core.numerics import real_dtype, safe_increment
from .._core.protocol import GradientTransformation
from .._core.state_guard import match_state
from ._util import require_value


class ReduceLROnPlateauState(NamedTuple):
    """State of :class:`reduce_on_plateau`."""

    scale: jax.Array  # scalar: the factor applied to the updates
    best_value: jax.Array  # scalar: best accumulated loss so far
    plateau_count: jax.Array  # int32 scalar: evaluations without improvement
    cooldown_count: jax.Array  # int32 scalar: evaluations left in cooldown
    count: jax.Array  # int32 scalar: losses accumulated in the current window
    avg_value: jax.Array  # scalar: mean loss of the current window


def _known(value: Any) -> float | None:
    """A plain number's value; None for arrays, schedules and tracers."""
    if isinstance(value, (int, float, np.number)) and not isinstance(value, bool):
        return float(value)
    return None


class reduce_on_plateau(GradientTransformation):
    r"""Multiplies the updates by a scale that drops when the loss plateaus.

    Losses given as `value=` are averaged over windows of
    `accumulation_size` updates. At the end of a window with mean
    :math:`\bar f`, it improves on the best mean :math:`f^*` when
    :math:`\bar f < (1 - \text{rtol}) f^* - \text{atol}`. After `patience`
    windows without improvement the scale is multiplied by `factor`
    (never below `min_scale`) and the next `cooldown` windows do not
    count. Chain it after an optimizer to reduce its learning rate.

    Args:
      factor: the multiplier of the scale, in (0, 1).
      patience: windows without improvement before reducing, an integer
        >= 0.
      rtol: relative tolerance of an improvement, in [0, 1].
      atol: absolute tolerance of an improvement, >= 0 (rtol and atol not
        both zero).
      cooldown: windows to wait after a reduction before counting again, an
        integer >= 0.
      accumulation_size: updates per window, an integer >= 1.
      min_scale: the smallest scale, in [0, 1] (the scale starts at 1).

    Returns:
      A gradient transformation; `update` needs `value=` (the loss).

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.reduce_on_plateau(factor=0.5, patience=1)
      >>> state = tx.init(jnp.zeros(2))
      >>> for loss in (1.0, 1.0, 1.0):
      ...     updates, state = tx.update(jnp.ones(2), state, value=loss)
      >>> updates
      Array([0.25, 0.25], dtype=float32)

    Differences from optax: the scalar state is real for complex parameters.

    References:
      PyTorch's `torch.optim.lr_scheduler.ReduceLROnPlateau`.
    """

    factor: Any = hyper(
        default=0.1, valid=Range(0.0, 1.0, low_open=True, high_open=True)
    )
    patience: Any = hyper(default=10, valid=NONNEGATIVE_INT)
    rtol: Any = hyper(default=0.0001, valid=UNIT)
    atol: Any = hyper(default=0.0, valid=NONNEGATIVE)
    cooldown: Any = hyper(default=0, valid=NONNEGATIVE_INT)
    accumulation_size: Any = hyper(default=1, valid=POSITIVE_INT)
    min_scale: Any = hyper(default=0.0, valid=UNIT)

    def __check_init__(self):
        rtol, atol = _known(self.rtol), _known(self.atol)
        if rtol is not None and atol is not None and not (rtol > 0 or atol > 0):
            raise ValueError(
                "At least one of rtol or atol must be positive, got "
                f"rtol={self.rtol!r} and atol={self.atol!r}"
            )

    def init_state(self, params):
        highest = real_dtype(gtree.dtype(params, "highest"))
        return ReduceLROnPlateauState(
            scale=jnp.ones([], real_dtype(gtree.dtype(params, "lowest"))),
            best_value=jnp.asarray(jnp.inf, highest),
            plateau_count=jnp.zeros([], jnp.int32),
            cooldown_count=jnp.zeros([], jnp.int32),
            count=jnp.zeros([], jnp.int32),
            avg_value=jnp.zeros([], highest),
        )

    def _end_of_window(self, state: ReduceLROnPlateauState) -> ReduceLROnPlateauState:
        improved = state.avg_value < (1 - self.rtol) * state.best_value - self.atol
        best = jnp.where(improved, state.avg_value, state.best_value)
        plateau = jnp.where(improved, 0, safe_increment(state.plateau_count))
        in_cooldown = state.cooldown_count > 0
        reduce = jnp.logical_and(~in_cooldown, plateau == self.patience)
        scale = jnp.where(reduce, state.scale * self.factor, state.scale)
        scale = jnp.where(in_cooldown, state.scale, jnp.maximum(scale, self.min_scale))
        cooldown = jnp.where(reduce, self.cooldown, 0)
        cooldown = jnp.where(in_cooldown, state.cooldown_count - 1, cooldown)
        plateau = jnp.where(in_cooldown | reduce, 0, plateau)
        new_state = ReduceLROnPlateauState(
            scale=scale,
            best_value=best,
            plateau_count=plateau,
            cooldown_count=cooldown,
            count=jnp.zeros([], jnp.int32),
            avg_value=jnp.zeros_like(state.avg_value),
        )
        return match_state(new_state, state, "reduce_on_plateau")

    def update_state(self, updates, state, params=None, *, value=None, **extra_args):
        require_value(value, "reduce_on_plateau")
        count = safe_increment(state.count)
        avg = state.avg_value
        new_avg = (state.count * avg + jnp.asarray(value).astype(avg.dtype)) / count
        state = state._replace(avg_value=new_avg.astype(avg.dtype), count=count)
        state = jax.lax.cond(
            count == self.accumulation_size,
            self._end_of_window,
            lambda s: s,
            state,
        )
        scale = state.scale
        return jax.tree.map(lambda g: scale * g, updates), state
