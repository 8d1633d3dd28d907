"""A Pallas kernel for a Hermitian product `L R^T`: the upper tiles only.

Flash-Muon's idea (nil0x9/flash-muon), written here from the description:
the output `(m, m)` is cut into `tile x tile` tiles on a grid; the
program for tile `(i, j)` returns at once when `j < i`; otherwise it
accumulates `L_i R_j^T` over the contraction in `k_tile` steps and
writes the tile both at `(i, j)` and, transposed, at `(j, i)`. About
half of the tiles' work is skipped.

This module imports `jax.experimental.pallas`, so
gradax/orthogonal/_symmetric.py imports it only on a GPU backend (or a
test asks for it): `import gradax` does not load Pallas.

Real dtypes only (the GPU's Newton–Schulz runs in bfloat16 or float16;
float32 keeps XLA's products and their precision settings). Shapes that
are not multiples of the tiles are padded with zeros, which add nothing
to the products, and the padding is cut off the result.
"""

# jax_names: needs jax 0.6.1 (pl.squeezed); _symmetric.py imports it only there.

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

# Output tile and contraction step: powers of two, as Triton needs.
TILE = 128
K_TILE = 64
# The half-precision dtypes the GPU path takes (see the module docstring).
DTYPES = (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))


def supports(m: int, dtype) -> bool:
    """Whether the kernel takes an `m`-row product in `dtype` on a GPU.

    Half precision, and at least two tiles of rows (below that there is no
    lower tile to skip).
    """
    return jnp.dtype(dtype) in DTYPES and m >= 2 * TILE


def _pad_to(x: jax.Array, axis: int, multiple: int) -> jax.Array:
    extra = -x.shape[axis] % multiple
    if not extra:
        return x
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, extra)
    return jnp.pad(x, widths)


def _kernel(left_ref, right_ref, out_ref, *, tile: int, k_tile: int, steps: int):
    i, j = pl.program_id(1), pl.program_id(2)

    @pl.when(j >= i)
    def _upper():
        def accumulate(k, acc):
            cols = pl.ds(k * k_tile, k_tile)
            a = left_ref[pl.ds(i * tile, tile), cols]
            b = right_ref[pl.ds(j * tile, tile), cols]
            # a @ b^T, accumulated in float32 whatever the inputs' dtype.
            return acc + jax.lax.dot_general(
                a, b, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32
            )

        acc = jax.lax.fori_loop(
            0, steps, accumulate, jnp.zeros((tile, tile), jnp.float32)
        )
        result = acc.astype(out_ref.dtype)
        out_ref[pl.ds(i * tile, tile), pl.ds(j * tile, tile)] = result

        @pl.when(j > i)
        def _mirror():
            out_ref[pl.ds(j * tile, tile), pl.ds(i * tile, tile)] = result.T


@functools.partial(jax.jit, static_argnames=("tile", "k_tile", "interpret"))
def hermitian_product(
    left: jax.Array,
    right: jax.Array,
    *,
    tile: int = TILE,
    k_tile: int = K_TILE,
    interpret: bool = False,
) -> jax.Array:
    """`left @ right^T` for real `(..., m, n)` arrays whose product is
    symmetric, computing only the tiles on and above the diagonal.

    `interpret=True` runs the kernel in Pallas's interpreter (any
    backend; the tests use it on the CPU).
    """
    if left.shape != right.shape:
        raise ValueError(f"left and right differ in shape: {left.shape}, {right.shape}")
    *batch, m, n = left.shape
    dtype = jnp.result_type(left, right)

    def prepare(x):
        x = x.astype(dtype).reshape(-1, m, n)
        return _pad_to(_pad_to(x, 1, tile), 2, k_tile)

    lp, rp = prepare(left), prepare(right)
    count, mp, np_ = lp.shape
    tiles = mp // tile
    # Each program sees one whole matrix of the batch and slices its tiles.
    matrix = pl.BlockSpec((pl.squeezed, mp, np_), lambda b, i, j: (b, 0, 0))
    out = pl.pallas_call(
        functools.partial(_kernel, tile=tile, k_tile=k_tile, steps=np_ // k_tile),
        out_shape=jax.ShapeDtypeStruct((count, mp, mp), dtype),
        grid=(count, tiles, tiles),
        in_specs=[matrix, matrix],
        out_specs=pl.BlockSpec((pl.squeezed, mp, mp), lambda b, i, j: (b, 0, 0)),
        interpret=interpret,
    )(lp, rp)
    return out[:, :m, :m].reshape(*batch, m, m)
