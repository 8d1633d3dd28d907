"""Helpers shared by the wrappers that run an inner transformation conditionally.

Under `lax.cond` both branches must return the same types. The branch that
skips the inner transformation returns the old inner state and either zeros or
the incoming updates, shaped exactly like what the inner transformation would
have returned; :func:`cond_update` builds both branches that way.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from .._compat import zeros
from .._core.protocol import TransformationLike
from .._core.state_guard import match_state


def _zeros_like_shapes(shapes: Any) -> Any:
    # The shapes come from eval_shape, which keeps Explicit shardings.
    return jax.tree.map(
        lambda s: zeros(s.shape, s.dtype, out_sharding=s.sharding), shapes
    )


def _cast_to_shapes(updates: Any, shapes: Any, owner: str) -> Any:
    if jax.tree.structure(updates) != jax.tree.structure(shapes):
        raise TypeError(
            f"{owner}: the inner transformation returns updates with the tree "
            f"{jax.tree.structure(shapes)}, so the incoming updates (tree "
            f"{jax.tree.structure(updates)}) cannot be passed through unchanged "
            "on the steps it is skipped."
        )

    def cast(u, s):
        u = jnp.asarray(u)
        if u.shape != s.shape:
            raise TypeError(
                f"{owner}: the inner transformation changes an update's shape "
                f"from {u.shape} to {s.shape}; it cannot be skipped."
            )
        return u.astype(s.dtype)

    return jax.tree.map(cast, updates, shapes)


def cond_update(
    pred: Any,
    inner: TransformationLike,
    updates: Any,
    inner_state: Any,
    params: Any,
    extra_args: dict[str, Any],
    *,
    on_skip: str,
    owner: str,
) -> tuple[Any, Any]:
    """`inner.update` where `pred` holds, else skip it; both under one cond.

    Args:
      pred: a boolean scalar.
      inner: the inner transformation.
      updates: the updates passed to `inner`.
      inner_state: the state passed to `inner`; returned unchanged on skip.
      params: passed to `inner`.
      extra_args: passed to `inner`.
      on_skip: `"zeros"` to return zero updates on skip, `"pass"` to return
        `updates` unchanged.
      owner: the wrapper's name, for error messages.

    Returns:
      `(new_updates, new_inner_state)`, of the same types in both branches.
    """

    # The state is an operand, not a closure's constant: a state of numpy
    # arrays (restored from a pickle, run eagerly) is then an argument of
    # the program, as a jax array's is, so the two give the same bits.
    def run(inner_state):
        new_updates, new_state = inner.update(
            updates, inner_state, params, **extra_args
        )
        # A foreign (optax) inner state may come back with other dtypes.
        return new_updates, match_state(new_state, inner_state, owner)

    shapes, _ = jax.eval_shape(run, inner_state)

    def skip(inner_state):
        if on_skip == "zeros":
            return _zeros_like_shapes(shapes), inner_state
        return _cast_to_shapes(updates, shapes, owner), inner_state

    return jax.lax.cond(check_predicate(pred, owner), run, skip, inner_state)


def cond_inner_update(
    wrapper: Any,
    pred: Any,
    updates: Any,
    state: Any,
    params: Any,
    extra_args: dict,
    owner: str,
) -> tuple[Any, Any]:
    """:func:`cond_update` of `wrapper.inner` on `state.inner_state`, zeros on skip.

    For the wrappers that keep their inner transformation as `inner` and its
    state as `inner_state`; `owner` names the wrapper in errors.
    """
    return cond_update(
        pred,
        wrapper.inner,
        updates,
        state.inner_state,
        params,
        extra_args,
        on_skip="zeros",
        owner=owner,
    )


def check_predicate(pred: Any, owner: str) -> jax.Array:
    """`pred` as a boolean scalar, or a ValueError saying what it was."""
    pred = jnp.asarray(pred)
    if pred.shape != ():
        raise ValueError(
            f"{owner}: the condition must be a scalar, got an array of shape "
            f"{pred.shape} and dtype {pred.dtype}"
        )
    if pred.dtype != jnp.bool_:
        pred = pred != 0
    return pred


def all_finite(tree: Any) -> jax.Array:
    """Whether every element of every leaf of `tree` is finite."""
    result = jnp.array(True)
    for leaf in jax.tree.leaves(tree):
        result = jnp.logical_and(result, jnp.all(jnp.isfinite(leaf)))
    return result
