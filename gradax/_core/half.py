"""The dtypes of the updates: the policies a transformation declares
(:meth:`GradientTransformation.update_dtypes`) and the base class applies.

- "grads": the gradients' dtypes, every transformation's;
- "widen_half": float32 for 16-bit parameters, whose gradients are widened
  before the update rule sees them (master_weights, stochastic_rounding:
  the update is the exact step to the new 16-bit value);
- "params" and "promote": the parameters' dtype, or the promotion of the
  two, the gradients widened to it first (cast_updates).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

HALF_DTYPES = (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))


def is_half(x: Any) -> bool:
    """Whether `x` is a bfloat16 or float16 array (or abstract array)."""
    dtype = getattr(x, "dtype", None)
    return dtype is not None and jnp.dtype(dtype) in HALF_DTYPES


def widen(tree: Any, params: Any) -> Any:
    """`tree` with each leaf where `params` is 16-bit cast to float32.

    Widening a 16-bit value to float32 is exact; a leaf already as wide (a
    float32 gradient) is left alone, and so is every leaf of a parameter
    that is not 16-bit.
    """

    def one(x: Any, p: Any) -> Any:
        if x is None or not is_half(p):
            return x
        dtype = jnp.dtype(getattr(x, "dtype", jnp.float32))
        if jnp.issubdtype(dtype, jnp.floating) and dtype.itemsize >= 4:
            return x
        return jnp.asarray(x).astype(jnp.float32)

    return jax.tree.map(one, tree, params, is_leaf=lambda x: x is None)


POLICIES = ("grads", "widen_half", "params", "promote")


def _cast_target(grad: Any, param: Any, policy: str) -> Any:
    """The dtype policy "params" or "promote" gives a leaf."""
    grad_dtype, param_dtype = jnp.result_type(grad), jnp.result_type(param)
    if policy == "params":
        return param_dtype
    return jnp.promote_types(grad_dtype, param_dtype)


def plan_update_dtypes(policy: str, updates: Any, params: Any) -> tuple[Any, Any]:
    """`(inputs, targets)`: the updates as the update rule takes them, and
    the dtypes its results are cast to (None: the inputs' own, as for every
    transformation).

    Widening is exact; a narrowing target ("params" for float32 gradients
    of 16-bit parameters) rounds once, to nearest, after the update rule ran
    in the wider dtype.
    """
    if policy == "widen_half":
        return widen(updates, params), None
    targets = jax.tree.map(
        lambda g, p: None if g is None else _cast_target(g, p, policy),
        updates,
        params,
        is_leaf=lambda x: x is None,
    )

    def widened(g: Any, target: Any) -> Any:
        if g is None:
            return g
        want = jnp.promote_types(jnp.result_type(g), target)
        return g if jnp.result_type(g) == want else jnp.asarray(g).astype(want)

    inputs = jax.tree.map(widened, updates, targets, is_leaf=lambda x: x is None)
    return inputs, targets


def cast_to(updates: Any, targets: Any) -> Any:
    """Each update leaf cast to its target dtype (None stays None)."""
    return jax.tree.map(
        lambda u, d: u if u is None or d is None else jnp.asarray(u).astype(d),
        updates,
        targets,
        is_leaf=lambda x: x is None,
    )
