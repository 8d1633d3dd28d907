"""Multiplying updates by a step size: scale, scale_by_learning_rate, schedules."""

from __future__ import annotations

from typing import Any

import jax

from .._core.declarations import ANY, LEARNING_RATE, hyper
from .._core.leaf_ops import arithmetic
from .._core.protocol import GradientTransformation
from .._core.pytree import static_field


def _scale_tree(updates: Any, factor: Any) -> Any:
    op, (factor,) = arithmetic((updates,), (factor,))
    return jax.tree.map(lambda g: op.mul(factor, g), updates)


class scale(GradientTransformation):
    """Multiplies every update by `step_size`.

    Args:
      step_size: any real number (a plain multiplier: negative flips the
        direction), an array or a schedule of the step count.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.scale(-0.5)
      >>> tx.update(jnp.ones(2), tx.init(jnp.ones(2)))[0]
      Array([-0.5, -0.5], dtype=float32)
    """

    step_size: Any = hyper(valid=ANY)

    def update_state(self, updates, state, params=None, **extra_args):
        return _scale_tree(updates, self.step_size), state


class scale_by_schedule(GradientTransformation):
    """Multiplies updates by `step_size_fn(count)`, count starting at 0.

    Args:
      step_size_fn: a schedule (any callable of the step count) of real
        multipliers.
    """

    step_size_fn: Any = hyper(valid=ANY)

    def update_state(self, updates, state, params=None, **extra_args):
        # The base class has already evaluated the schedule at this step.
        return _scale_tree(updates, self.step_size_fn), state


class scale_by_learning_rate(GradientTransformation):
    """Multiplies updates by `-learning_rate` (or `+` with flip_sign=False).

    Args:
      learning_rate: a real number, an array, a schedule, or None (no
        scaling). With `flip_sign` a negative one ascends, as in optax, and
        building the transformation warns (`HyperparameterWarning`).
      flip_sign: negate so that `apply_updates` descends. Without it the
        rate is a plain multiplier, like :class:`scale`'s, and a negative one
        is how it descends: no warning then.
    """

    learning_rate: Any = hyper(default=None, valid=LEARNING_RATE)
    flip_sign: bool = static_field(default=True, kw_only=True)

    def _unusual_values(self):
        # Without the flip, the sign is the user's way of choosing direction.
        return super()._unusual_values() if self.flip_sign else []

    def update_state(self, updates, state, params=None, **extra_args):
        if self.learning_rate is None:
            return updates, state
        factor = -self.learning_rate if self.flip_sign else self.learning_rate
        return _scale_tree(updates, factor), state
