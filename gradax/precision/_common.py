"""What the precision wrappers share: which leaves they act on, and the
float32 view of 16-bit parameters that their inner transformations see."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._core.half import HALF_DTYPES as HALF_DTYPES
from .._core.half import is_half as is_half
from .._core.half import widen as widen
from ..combinators.masked import MaskedNode


def bits_to_float(bits: jax.Array) -> jax.Array:
    """The float32 whose IEEE bits are the uint32 `bits`."""
    return jax.lax.bitcast_convert_type(bits, jnp.float32)


def float_to_bits(x: jax.Array) -> jax.Array:
    """The IEEE bits of the float32 `x`, as uint32."""
    return jax.lax.bitcast_convert_type(x.astype(jnp.float32), jnp.uint32)


def step_to(new: jax.Array, old: jax.Array) -> jax.Array:
    """The float32 update that `apply_updates` turns from `old` into `new`.

    `old` and `new` are 16-bit values. `apply_updates` computes
    `(old + u).astype(old.dtype)`, the sum in float32. With
    `u = float32(new) - float32(old)` rounded to float32 the result is
    `new` exactly whenever `new` is zero or
    `|new| >= 2**-15 * |old|` (see master_weights' documentation for
    the derivation); both are 16-bit, so the difference needs at most
    `8 + 16` significant bits when the exponents differ by at most 15.
    """
    return new.astype(jnp.float32) - old.astype(jnp.float32)


def placeholder() -> Any:
    """The state node kept for a leaf the wrapper passes through.

    An empty node rather than a zero-size array: orbax refuses to save
    arrays with no elements.
    """
    return MaskedNode()


def refuse_float16(params: Any, owner: str) -> None:
    """Raise for float16 leaves, naming each path."""
    paths = [
        jax.tree_util.keystr(path) or "<root>"
        for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]
        if jnp.dtype(getattr(leaf, "dtype", np.float32)) == jnp.float16
    ]
    if paths:
        raise ValueError(
            f"{owner}: params must be bfloat16 (or float32 and wider, passed "
            f"through), got float16 at {', '.join(paths)}. A float32 master "
            "is not a float16 value plus 16 bits (float16 keeps 11 significant "
            "bits and 5 exponent bits), so no 16-bit residual makes it exact; "
            "cast these parameters to bfloat16, or use "
            "gradax.stochastic_rounding for float16."
        )
