"""Helpers shared by the loss modules: argument checks, axes, safe products.

The one numerical idea of the package lives here: :func:`mul_or_zero`, a
product in which a zero weight cancels an infinite value (`0 * -inf = 0`,
the convention behind `0 log 0 = 0`) with finite gradients on both sides.
Every loss that multiplies labels or targets by log-probabilities goes
through it, so masked classes (`-inf` logits) never produce a NaN.
"""

from __future__ import annotations

import operator
from typing import Any

import jax
import jax.numpy as jnp


def check_floating(x: Any, argname: str, fn_name: str) -> None:
    """Raise TypeError unless `x` has a floating-point dtype (as optax does)."""
    dtype = jax.dtypes.result_type(x)
    if not jnp.issubdtype(dtype, jnp.floating):
        raise TypeError(
            f"{fn_name}: {argname} must have a floating-point dtype, got {dtype}"
        )


def check_same_shape(a: Any, b: Any, fn_name: str) -> None:
    """Raise ValueError when two arrays (or array-likes) differ in shape."""
    shape_a, shape_b = jnp.shape(a), jnp.shape(b)
    if shape_a != shape_b:
        raise ValueError(f"{fn_name}: shapes differ, {shape_a} and {shape_b}")


def check_rank(x: Any, rank: int, argname: str, fn_name: str) -> None:
    """Raise ValueError unless `x` has `rank` dimensions."""
    if jnp.ndim(x) != rank:
        raise ValueError(
            f"{fn_name}: {argname} must have rank {rank}, got shape {jnp.shape(x)}"
        )


def default_float() -> Any:
    """The default floating dtype: float32, or float64 with x64 enabled."""
    return jax.dtypes.canonicalize_dtype(jnp.float64)


def normalize_axes(axis: Any, ndim: int) -> tuple[int, ...]:
    """An int or a tuple of ints as a tuple of non-negative axes of `ndim`."""
    axes = (axis,) if not isinstance(axis, tuple) else axis
    result = []
    for ax in axes:
        ax = operator.index(ax)
        if not -ndim <= ax < ndim:
            raise ValueError(f"axis {ax} is out of bounds for {ndim} dimensions")
        result.append(ax % ndim)
    return tuple(result)


def expand_where(where: Any, axis: Any, ndim: int) -> Any:
    """A `where` mask over the batch dimensions, given the reduced axes back.

    A mask with as many dimensions as the logits is returned as is; one with
    fewer (one flag per example) gets size-one dimensions at `axis` so that
    it broadcasts against the logits.
    """
    if where is None:
        return None
    where = jnp.asarray(where)
    if where.ndim != ndim:
        where = jnp.expand_dims(where, axis)
    return where


def mul_or_zero(weight: Any, value: Any) -> jax.Array:
    """`weight * value`, but 0 where `weight` is 0 and `value` is not finite.

    Where the product is dropped, `value` is replaced by 0 before the
    multiplication too, so the derivatives with respect to both arguments are
    finite there (0 for `value`, whose weight is 0; 0 for `weight`, the
    finite stand-in of an infinite slope). Elsewhere this is the plain product
    and so are its derivatives.
    """
    weight, value = jnp.asarray(weight), jnp.asarray(value)
    dropped = (weight == 0) & ~jnp.isfinite(value)
    safe_value = jnp.where(dropped, jnp.zeros_like(value), value)
    product = weight * safe_value
    return jnp.where(dropped, jnp.zeros_like(product), product)
