"""Decoupled weight decay: add_decayed_weights."""

from __future__ import annotations

from typing import Any

import jax

from .._core.declarations import NONNEGATIVE, hyper
from .._core.leaf_ops import arithmetic
from .._core.protocol import Alias, GradientTransformation, WeightDecaySchedule
from .._core.pytree import static_field
from ..combinators.masked import masked


def on_mask(stage: GradientTransformation, mask: Any) -> GradientTransformation:
    """`stage` on the leaves `mask` selects; on every leaf when `mask` is None."""
    return stage if mask is None else masked(stage, mask)


class _decay(GradientTransformation):
    """The stage add_decayed_weights builds (without its mask)."""

    weight_decay: Any = hyper(valid=NONNEGATIVE)

    # optax's name for the count a scheduled weight decay is read at.
    _count_state = WeightDecaySchedule

    def update_state(self, updates, state, params=None, **extra_args):
        if params is None:
            raise ValueError("add_decayed_weights needs params passed to update")
        if isinstance(self.weight_decay, (int, float)) and self.weight_decay == 0:
            return updates, state
        op, (wd,) = arithmetic((updates, params), (self.weight_decay,))
        return jax.tree.map(
            lambda g, p: None if g is None else op.add(g, op.mul(wd, p)),
            updates,
            params,
            is_leaf=lambda x: x is None,
        ), state


class add_decayed_weights(Alias):
    """Adds `weight_decay * params` to the updates.

    Args:
      weight_decay: a number >= 0, an array or a schedule.
      mask: a tree of booleans like the params (or a function of the params
        returning one); only True leaves decay.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.add_decayed_weights(0.1)
      >>> p = jnp.ones(2)
      >>> tx.update(jnp.zeros(2), tx.init(p), p)[0]
      Array([0.1, 0.1], dtype=float32)
    """

    weight_decay: Any = hyper(default=0.0, valid=NONNEGATIVE)
    mask: Any = static_field(default=None)

    def build(self):
        return on_mask(_decay(self.weight_decay), self.mask)
