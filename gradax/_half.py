"""16-bit parameters and their float32 view: what the precision wrappers
declare (``_widens_half_updates``) and the base class applies."""

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
