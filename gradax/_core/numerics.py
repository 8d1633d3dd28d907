"""Numerical helpers shared by the whole package, in one place.

Numerically safe norms and counters with optax's public names, and the
internal `abs_sq` and `real_dtype` every module uses instead of a copy.

`safe_norm` and `safe_root_mean_squares` clamp from below without the NaN
gradient that `jnp.maximum(jnp.linalg.norm(x), m)` has at `x = 0`;
`safe_increment` adds one to a counter without wrapping around.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from .storage import is_storage_spec


def abs_sq(x: jax.Array) -> jax.Array:
    """`|x|**2` element-wise, in the real dtype of `x` (the one copy)."""
    if jnp.iscomplexobj(x):
        return (jnp.conj(x) * x).real
    return x * x


def canonical_dtype(dtype: Any) -> Any:
    """A state dtype as JAX stores it (float64 is float32 without x64), or None.

    A state made in this dtype does not warn that float64 is unavailable;
    None (the params' dtypes) stays None.
    """
    if dtype is None or is_storage_spec(dtype):
        return dtype
    return jax.dtypes.canonicalize_dtype(dtype)


def plain_dtype(dtype: Any, default: Any) -> Any:
    """`dtype` for a state leaf kept as a plain array, `default` if None.

    A storage spec (`int8_blockwise`) quantizes moments shaped like the
    parameters; the other leaves of such a state (Dion's basis `Q`,
    NorMuon's per-neuron second moment) stay float32.
    """
    if is_storage_spec(dtype):
        return jnp.dtype(jnp.float32)
    return default if dtype is None else dtype


def real_dtype(dtype: Any) -> Any:
    """The real counterpart of a dtype (float32 for complex64); a real dtype,
    integer ones included, is its own (so `init` takes what optax's does)."""
    dtype = jnp.dtype(dtype)
    complex_ = jnp.issubdtype(dtype, jnp.complexfloating)
    return jnp.finfo(dtype).dtype if complex_ else dtype


def safe_norm(
    x: Any,
    min_norm: Any,
    ord: int | float | str | None = None,  # noqa: A002 - numpy's name
    axis: int | tuple[int, ...] | None = None,
    keepdims: bool = False,
) -> jax.Array:
    """`max(norm(x), min_norm)` whose gradient is 0, not NaN, below the floor.

    Where the norm is at most `min_norm` the result is `min_norm` and the
    norm is re-evaluated on ones instead of `x`, so the discarded branch has
    a finite derivative.

    Args:
      x: an array.
      min_norm: the floor of the result.
      ord: order of the norm, as in `jnp.linalg.norm`.
      axis: the axis (or pair of axes) to take the norm over; None for all of
        a vector or matrix, as in `jnp.linalg.norm`.
      keepdims: keep the reduced axes with size one.

    Returns:
      The clamped norm.

    Example:
      >>> import jax, jax.numpy as jnp, gradax
      >>> jax.grad(lambda x: gradax.safe_norm(x, 1e-3))(jnp.zeros(2))
      Array([0., 0.], dtype=float32)
      >>> gradax.safe_norm(jnp.array([3.0, 4.0]), 1.0)
      Array(5., dtype=float32)
    """
    norm = jnp.linalg.norm(x, ord=ord, axis=axis, keepdims=True)
    below = norm <= min_norm
    safe_x = jnp.where(below, jnp.ones_like(x), x)
    if not keepdims:
        norm = jnp.squeeze(norm, axis=axis)
        below = norm <= min_norm
    safe = jnp.linalg.norm(safe_x, ord=ord, axis=axis, keepdims=keepdims)
    return jnp.where(below, min_norm, safe)


def safe_root_mean_squares(x: Any, min_rms: Any) -> jax.Array:
    """`max(sqrt(mean(|x|**2)), min_rms)` with a finite gradient at zero.

    Args:
      x: an array (real or complex).
      min_rms: the floor of the result.

    Returns:
      The clamped root mean square, a scalar.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> gradax.safe_root_mean_squares(jnp.array([3.0, 4.0]), 0.1)
      Array(3.535534, dtype=float32)
    """
    rms = jnp.sqrt(jnp.mean(abs_sq(x)))
    below = rms <= min_rms
    safe_x = jnp.where(below, jnp.ones_like(x), x)
    return jnp.where(below, min_rms, jnp.sqrt(jnp.mean(abs_sq(safe_x))))


def safe_increment(count: Any) -> Any:
    """`count + 1`, staying at the largest value of the dtype instead of wrapping.

    Args:
      count: an integer or floating-point counter (an array or a number).

    Returns:
      The incremented counter, with the dtype of `count`.

    Raises:
      ValueError: for a counter that is neither integer nor floating point.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> gradax.safe_increment(jnp.asarray(2147483647, jnp.int32))
      Array(2147483647, dtype=int32)
    """
    dtype = jnp.asarray(count).dtype
    if jnp.issubdtype(dtype, jnp.integer):
        top = jnp.iinfo(dtype).max
    elif jnp.issubdtype(dtype, jnp.floating):
        top = jnp.finfo(dtype).max
    else:
        raise ValueError(
            f"safe_increment needs an integer or floating-point count, got dtype "
            f"{dtype}"
        )
    top = jnp.asarray(top, dtype)
    return jnp.where(count < top, count + jnp.asarray(1, dtype), top)


safe_int32_increment = safe_increment
"""The same function as :func:`safe_increment` (optax's older name)."""


def work_dtype(dtype: Any) -> Any:
    """At least float32 (complex stays complex): the dtype to compute in.

    Matrix arithmetic on bfloat16 or float16 leaves (Muon's variants, Shampoo,
    SOAP) runs in this dtype and rounds back once at the end.
    """
    return jnp.promote_types(dtype, jnp.float32)
