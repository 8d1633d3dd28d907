"""Telling rounding noise from signal in matrix factorizations.

QR, `eigh` and the SVD of a rank-deficient matrix return columns for its
null space that rounding alone chooses: any orthonormal completion is as
right as another, and which one comes back depends on how the compiler
orders the floating-point operations (`jit` or eager, the number of
devices, the fusion). Products with those columns, such as the rotated
gradient of SOAP or the projected gradient of GaLore, are then rounding
noise of size about `eps * ||G||`. A method that normalizes each entry
(Adam) or each column (Dion) turns that noise into an O(1) update pointing
wherever the rounding went.

The optimizers here set such products to exactly zero before they are
normalized. A row (or column) counts as noise when its norm is below
:func:`noise_floor` times the norm of what it was computed from, a bound on
the rounding of a length-`n` product that holds with a wide margin:
measured on exactly rank-1 float32 matrices of sides 8 to 512, the
null-space entries of the rotated (`eigh`) and projected (SVD)
gradients were at most `1.5 eps ||G||_F` each and
`10 eps ||G||_F` per line, against a floor of `4 sqrt(n) eps` (11 eps at
n = 8, 90 eps at n = 512). A whole line that small is a basis vector in the
null space up to rounding, so dropping it loses nothing the arithmetic could
resolve, and the update no longer depends on the path the compiler took.

A column of Dion's `R = B^T P` needs one step more
(:func:`independent_columns`). Where `B Q` is rank-deficient, QR's completing
columns of `P` are orthogonal to the computed range of `B Q`, which is off
the true range by rounding amplified by how nearly dependent the columns of
`B Q` are: their `R` columns then reach far above the floor (measured up to
1800 `eps ||B||_F` on float32 products of rank 1 to 5, sides 12 to 256, with
Gaussian `Q`; the floor is 16 to 64 `eps` there), and no floor on their norm
separates them from the true columns of ill-conditioned matrices. Such a
column is `B^T` applied to the rounding error of its column of `P`, a small
vector along `B`'s range, so it lies in `B`'s row space, which the earlier
columns of `R` span. Its distance from that span is only the rounding of
the product: at most `1.05 eps ||B||_F` in the same draws and in rank-2 Dion
runs, while the true columns' distance was at least `4e4 eps ||B||_F`. On
full-rank matrices with condition numbers 1e3 to 1e5 (60-step Dion runs) no
column was dropped; the smallest distance was `62 eps ||B||_F`, at 1e5.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp


def noise_floor(n: int, dtype: Any) -> float:
    """The relative size below which a length-`n` product is rounding noise.

    `4 sqrt(n) eps(dtype)`: rounding errors of a length-`n` inner
    product grow like `sqrt(n) eps` in practice; the factor 4 leaves a
    margin over the largest noise measured (see the module docstring).
    `eps` is float32's at the least: products of half-precision factors
    carry noise of their own precision, which this floor leaves alone rather
    than drop true entries along with it.
    """
    eps = jnp.finfo(jnp.promote_types(dtype, jnp.float32)).eps
    return 4.0 * math.sqrt(max(n, 1)) * float(eps)


def frobenius(x: jax.Array) -> jax.Array:
    """The Frobenius norm of each matrix (the last two axes), kept as (..., 1, 1)."""
    return jnp.sqrt(jnp.sum(jnp.abs(x) ** 2, axis=(-2, -1), keepdims=True))


def kept_lines(x: jax.Array, scale: jax.Array, n: int, axis: int) -> jax.Array:
    """Whether each line of `x` along `axis` is above the noise floor.

    A line (a row for `axis=-1`, a column for `axis=-2`) is kept when its
    norm exceeds `noise_floor(n) * scale`, `scale` being the norm of the
    matrix `x` was computed from. Whole lines, not single entries, are
    judged: a line is noise when its basis vector lies in the null space,
    while a single small entry of a true line is signal (a coordinate
    passing through zero) and must stay as computed. An all-zero input
    (`scale == 0`) keeps nothing.
    """
    norms = jnp.sqrt(jnp.sum(jnp.abs(x) ** 2, axis=axis, keepdims=True))
    return norms > (noise_floor(n, x.dtype) * scale).astype(norms.dtype)


def drop_null_lines(
    x: jax.Array, scale: jax.Array, n: int, axes: tuple[int, ...] = (-1, -2)
) -> jax.Array:
    """`x` with the lines that are rounding noise (see :func:`kept_lines`)
    along each of `axes` set to exactly zero."""
    keep = functools.reduce(
        jnp.logical_and, [kept_lines(x, scale, n, axis) for axis in axes]
    )
    return jnp.where(keep, x, jnp.zeros_like(x))


def independent_columns(x: jax.Array, scale: jax.Array, n: int) -> jax.Array:
    """Whether each column of the matrices `x` `(..., m, k)` adds a direction.

    Column `j` is kept when its distance from the span of the columns before
    it exceeds `noise_floor(n) * scale` (`scale` the norm of the matrix `x`
    was computed from, broadcasting against `(..., 1, 1)`), and every column
    before it is kept. Returns `(..., 1, k)` booleans.

    This is the test for the columns of a product `A^T P` whose `P` comes
    from a QR that rounding completed (Dion's `R = B^T P`): such a column
    lies in `A`'s row space, which the earlier columns span, so its distance
    from them is the product's rounding alone, however large its norm (see
    the module docstring). The distances are the diagonal of `x`'s QR. After
    a dropped column, the QR that made `P` orthogonalized the later ones
    against a direction rounding chose, so they are rounding's too: the kept
    columns are a leading run.
    """
    triangle = jnp.linalg.qr(x, mode="r")
    distance = jnp.abs(jnp.diagonal(triangle, axis1=-2, axis2=-1))
    # A column past the row count cannot add a direction.
    missing = x.shape[-1] - distance.shape[-1]
    if missing:
        pad = [(0, 0)] * (distance.ndim - 1) + [(0, missing)]
        distance = jnp.pad(distance, pad)
    floor = noise_floor(n, x.dtype) * jnp.asarray(scale)[..., 0, :]
    new = (distance > floor.astype(distance.dtype)).astype(jnp.int32)
    return (jax.lax.cummin(new, axis=new.ndim - 1) > 0)[..., None, :]
