"""Symmetric products for Newton–Schulz: compute one triangle, mirror it.

In a Newton–Schulz step `X <- a X + (b A + c A A) X` with `A = X X^H`,
two of the three products have a Hermitian result: `A` itself, and
`A A`, which equals `A A^H` because `A` is Hermitian. Both are
`L R^H` for an `L R^H` known to be Hermitian, so only the blocks on and
above the diagonal need computing; the ones below are the conjugate
transposes of their mirrors. With `k` row blocks that is `k (k + 1) / 2`
of the `k^2` block products (Flash-Muon, nil0x9/flash-muon, does the same
with the tiles of a GPU kernel).

On the CPU the blocks are ordinary XLA matmuls, one a pair `i <= j` of
row blocks, and the result is assembled by concatenation. On a GPU a
Pallas kernel (gradax/orthogonal/_pallas_symmetric.py) skips the tiles
below the diagonal and writes each computed tile to its mirror as well.

Each entry is still one dot product of the same length in the same dtype as
in `L @ R^H`, so the rounding is that of the plain product; the blocks
off the diagonal are exact mirrors, which in the plain product they need
not be.
"""

from __future__ import annotations

from collections.abc import Callable
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
    lb = [left[..., i * size : (i + 1) * size, :] for i in range(blocks)]
    rb = [right[..., i * size : (i + 1) * size, :] for i in range(blocks)]
    grid: list[list[Any]] = [[None] * blocks for _ in range(blocks)]
    # One matmul a block pair (measured faster on the CPU than batching the
    # pairs of one diagonal, or one product a row panel).
    for i in range(blocks):
        for j in range(i, blocks):
            tile = mm(lb[i], _mT(rb[j]))
            grid[i][j] = tile
            if i != j:
                grid[j][i] = _mT(tile)
    rows = [jnp.concatenate(row, axis=-1) for row in grid]
    return jnp.concatenate(rows, axis=-2)
