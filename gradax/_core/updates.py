"""Applying updates to parameters: apply_updates, incremental and periodic updates."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from .protocol import Params, Updates
from .state_guard import cast_like
from .treecheck import check_same_structure


def apply_updates(params: Params, updates: Updates) -> Params:
    """Add updates to parameters, keeping each parameter's dtype.

    Args:
      params: the parameters.
      updates: a tree with the same structure (None leaves are skipped).

    Returns:
      `params + updates`, leaf by leaf, cast to the parameters' dtypes (and
      weak types).

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> gradax.apply_updates({"w": jnp.ones(2)}, {"w": jnp.ones(2)})["w"]
      Array([2., 2.], dtype=float32)
    """
    if params is None:
        return None  # as optax: an empty tree of parameters stays empty
    check_same_structure(updates, params, "updates", "params")

    def add(p, u):
        if p is None:
            return None
        p = jnp.asarray(p)
        # Keep a weakly typed parameter weak, so a jitted step taking the
        # result does not retrace on its second call.
        return cast_like(p + u, p)

    return jax.tree.map(add, params, updates, is_leaf=lambda x: x is None)


def incremental_update(new_tensors: Any, old_tensors: Any, step_size: Any) -> Any:
    """Polyak averaging: `step_size * new + (1 - step_size) * old`.

    Args:
      new_tensors: the new values (None gives None, as in optax).
      old_tensors: the running average, a tree like `new_tensors`.
      step_size: the weight of the new values, in [0, 1].

    Returns:
      The new running average.
    """
    if new_tensors is None:
        return None
    check_same_structure(new_tensors, old_tensors, "new_tensors", "old_tensors")
    return jax.tree.map(
        lambda new, old: (
            None if new is None else step_size * new + (1.0 - step_size) * old
        ),
        new_tensors,
        old_tensors,
        is_leaf=lambda x: x is None,
    )


def periodic_update(
    new_tensors: Any, old_tensors: Any, steps: Any, update_period: int
) -> Any:
    """`new_tensors` every `update_period` steps, else `old_tensors`.

    Args:
      new_tensors: the tree to return at a step that is a multiple of
        `update_period`.
      old_tensors: the tree to return otherwise (same structure).
      steps: the step count, an integer scalar.
      update_period: the period, a positive integer.

    Returns:
      `new_tensors` or `old_tensors`, chosen under `lax.cond`.
    """
    check_same_structure(new_tensors, old_tensors, "new_tensors", "old_tensors")
    return jax.lax.cond(
        jnp.mod(steps, update_period) == 0,
        lambda _: new_tensors,
        lambda _: old_tensors,
        None,
    )
