"""Symmetric products for Newton–Schulz: compute one triangle, mirror it.

In a Newton–Schulz step `X <- a X + (b A + c A A) X` with `A = X X^H`,
two of the three products have a Hermitian result: `A` itself, and
`A A`, which equals `A A^H` because `A` is Hermitian. Both are
`L R^H` for an `L R^H` known to be Hermitian, so only the blocks on and
above the diagonal need computing; the ones below are the conjugate
transposes of their mirrors. With `k` row blocks that is `k (k + 1) / 2`
of the `k^2` block products (Flash-Muon, nil0x9/flash-muon, does the same
with the tiles of a GPU kernel).

On the CPU the blocks are ordinary XLA matmuls, in a loop: an outer one
over the row blocks `i` (the block of `L` sliced once) and an inner one
over `j >= i`, one `dot` in its body, writing each tile and its mirror into
place. A loop, not one `dot` a pair: XLA's CPU compiler spends about as
long on each `dot`, slice and copy it is given as on a whole plain product.
Twenty `k = 4` products in a row, measured on a 2-core CPU, compiled in
6 times the plain products' time written out (10 dots and the assembly
each) and in 2.3 times as loops; and a Muon step holds dozens of such
products. On a GPU a Pallas kernel (gradax/orthogonal/_pallas_symmetric.py)
skips the tiles below the diagonal and writes each computed tile to its
mirror as well.

For the same reason :func:`loop_rows` runs the Newton–Schulz steps of
the symmetric methods in a loop: each product is then traced and compiled
once for all steps, not once a step.

Each entry is still one dot product of the same length in the same dtype as
in `L @ R^H`, so the rounding is that of the plain product; the blocks
off the diagonal are exact mirrors, which in the plain product they need
not be.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from .._compat import JAX_VERSION

# Below this many rows a block's product is too small to amortize the extra
# matmul calls and the assembly (measured on a 2-core CPU, see cpu_blocks).
MIN_BLOCK_ROWS = 128
BLOCKS_MAX = 16


def _mT(x: jax.Array) -> jax.Array:  # noqa: N802 - the usual math name
    return jnp.conj(jnp.swapaxes(x, -1, -2))


def cpu_blocks(m: int) -> int:
    """How many row blocks to cut an `m`-row product into on the CPU.

    Measured on a 2-core x86 CPU, float32 Newton–Schulz side by side with
    the plain products (`m` from 256 to 4096): more blocks cut more of the
    product away (`k (k + 1) / 2` of `k^2`) but run smaller matmuls;
    blocks of at least 128 rows and at most 16 of them did best (at 2048
    rows, 16 blocks 0.72 of the plain time, 8 blocks 0.74, 4 blocks 0.77).
    The largest count in that range that divides `m`; 1 (the plain
    product) when there is none.
    """
    for blocks in range(min(BLOCKS_MAX, m // MIN_BLOCK_ROWS), 1, -1):
        if m % blocks == 0:
            return blocks
    return 1


def hermitian_products(
    m: int,
    dtype: Any,
    mm: Callable[[Any, Any], jax.Array],
    backend: str | None = None,
) -> Callable[[jax.Array, jax.Array], jax.Array]:
    """`hermitian(l, r) = l @ r^H` for `m`-row products known Hermitian.

    On a GPU (`backend`, default JAX's), the Pallas kernel where it takes
    the size and dtype; elsewhere the blocked XLA product with
    :func:`cpu_blocks` blocks.
    """
    # The kernel's block specs need jax 0.6.1 (pl.squeezed).
    if (backend or jax.default_backend()) == "gpu" and JAX_VERSION >= (0, 6, 1):
        from . import _pallas_symmetric  # Pallas only when a GPU asks for it

        if _pallas_symmetric.supports(m, dtype):
            return _pallas_symmetric.hermitian_product
    blocks = cpu_blocks(m)
    return lambda left, right: hermitian_product(left, right, blocks, mm)


def hermitian_product(
    left: jax.Array,
    right: jax.Array,
    blocks: int,
    mm: Callable[[Any, Any], jax.Array],
) -> jax.Array:
    """`left @ right^H` for a product known to be Hermitian, by blocks.

    Args:
      left, right: arrays `(..., m, n)` with `left @ right^H` Hermitian
        (`right is left`, or two commuting Hermitian matrices).
      blocks: row blocks `k`; `m` must be a multiple of `k`. 1 is the
        plain product.
      mm: the matmul to use (it carries the precision).

    Returns:
      The `(..., m, m)` product; its blocks off the diagonal are exact
      mirrors of each other.
    """
    m = left.shape[-2]
    if blocks <= 1:
        return mm(left, _mT(right))
    if m % blocks:
        raise ValueError(f"blocks must divide the rows, got {blocks} for {m} rows")
    size = m // blocks
    axis = left.ndim - 2

    def row_of_tiles(i, out):
        row = i * size
        batch_corner = (jnp.zeros_like(row),) * axis  # the indices' dtype
        # Sliced once for its row of tiles: the slices are copies, and for
        # long rows (1024 x 4096) copying them per tile cost a tenth.
        lb = jax.lax.dynamic_slice_in_dim(left, row, size, axis)

        def tile(j, out):
            col = j * size
            rb = jax.lax.dynamic_slice_in_dim(right, col, size, axis)
            product = mm(lb, _mT(rb)).astype(out.dtype)
            # The mirror goes in tile by tile: one transpose of the whole
            # result after the loop cost more than the blocks saved.
            out = jax.lax.dynamic_update_slice(
                out, _mT(product), (*batch_corner, col, row)
            )
            return jax.lax.dynamic_update_slice(out, product, (*batch_corner, row, col))

        return jax.lax.fori_loop(i, blocks, tile, out)

    out = jnp.zeros((*left.shape[:-1], m), jnp.result_type(left, right))
    return jax.lax.fori_loop(0, blocks, row_of_tiles, out)


def loop_rows(
    step: Callable[[Any, tuple[Any, Any, Any], jax.Array], Any],
    carry: Any,
    rows: Sequence[Sequence[Any]],
    dtype: Any,
) -> Any:
    """`carry = step(carry, (a, b, c), t)` for each row `t`, in a loop.

    The rows (Python floats or scalar arrays, traced ones included) are
    stacked into one `(T, 3)` array of `dtype`, the dtype each coefficient
    is cast to where it is used, so the values are those an unrolled loop
    would use. `t` is the step's index, a traced integer.
    """
    if not rows:
        return carry
    table = jnp.stack([jnp.stack([jnp.asarray(v, dtype) for v in row]) for row in rows])

    def body(t, carry):
        return step(carry, (table[t, 0], table[t, 1], table[t, 2]), t)

    return jax.lax.fori_loop(0, len(rows), body, carry)
