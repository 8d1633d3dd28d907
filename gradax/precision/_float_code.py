"""The `code="float"` 8-bit code: a small float relative to a power-of-two scale.

An element's code is its float32 bit pattern with the exponent taken
relative to its block's scale and the mantissa rounded to `m` bits: 3 for
signed values (7 bits after the sign, like float8 e4m3), 4 for non-negative
ones (8 bits). Rank `r` (`1 .. 2**bits - 1`) stands for the float whose bit
pattern is `bits(scale) - (top - r) * 2**(23 - m)`, `top = 2**bits - 1`:
rank `top` is the scale itself and each lower rank is one step of `m`
mantissa bits down, so the ranks cover `top / 2**m` binades below the scale
(15.9 signed, 15.9 unsigned) with a relative spacing of at most `2**-m`.
Rank 0 is zero.

The scale is a power of two, the smallest one at or above the block's
largest magnitude rounded to the code (so a loaded block stored again keeps
its scale and its codes; see :func:`exponents`). Encoding and decoding are
then integer additions and shifts of bit patterns: no division, no table,
no search, about ten operations an element each way, and identical on
every backend.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

_EXPONENT_ONE = 1 << 23  # one binade in a float32 bit pattern
_CAP = 0x7F000000  # bits of 2**127: larger maxima (inf, NaN) are capped


def mantissa_bits(signed: bool) -> int:
    """Mantissa bits of the float code: 3 after a sign bit, 4 unsigned."""
    return 3 if signed else 4


def top_rank(signed: bool) -> int:
    """The largest rank: 127 (signed) or 255 (unsigned)."""
    return 127 if signed else 255


def _shift(signed: bool) -> int:
    return 23 - mantissa_bits(signed)


def _bits(x: Any) -> jax.Array:
    return lax.bitcast_convert_type(jnp.asarray(x, jnp.float32), jnp.int32)


def exponents(values: jax.Array, signed: bool) -> jax.Array:
    """Each element's own scale exponent (uint8), to be maximized per block.

    The smallest power of two at or above `|x|` rounded to the code's
    mantissa, as its float32 exponent field (0 for zero; `|x|` above
    `2**127`, inf and NaN count as `2**127`). Both steps are monotone, so
    the largest of a block's exponents is its maximum's: the block
    maximum is taken over one byte an element, not four (on a CPU, XLA
    writes a reduction's input to memory first).
    """
    return exponents_of_magnitudes(magnitude_bits(values), signed)


def exponents_of_magnitudes(magnitudes: jax.Array, signed: bool) -> jax.Array:
    """:func:`exponents` of the values whose :func:`magnitude_bits` are given."""
    step = 1 << _shift(signed)
    bits = jnp.minimum(magnitudes, _CAP)
    rounded = (bits + step // 2) & ~(step - 1)  # the nearest code's pattern
    return ((rounded + _EXPONENT_ONE - 1) >> 23).astype(jnp.uint8)


def magnitude_bits(values: jax.Array) -> jax.Array:
    """`|x|`'s float32 bit pattern (int32): ordered as `|x|` is, NaN on top.

    The block maximum of these gives the block's exponent through
    :func:`exponents` (of the maximum's value), since that map is monotone:
    one operation an element where the reduction is fused with its input.
    """
    return _bits(values) & 0x7FFFFFFF


def scales_from_exponents(exponents: jax.Array) -> jax.Array:
    """float32 powers of two from exponent fields (0 gives the scale 0)."""
    return lax.bitcast_convert_type(exponents.astype(jnp.int32) << 23, jnp.float32)


def _base(scales: jax.Array, signed: bool) -> jax.Array:
    """The bit pattern rank 0 would have: `bits(scale) - top * step` (int32)."""
    return _bits(scales) - (top_rank(signed) << _shift(signed))


def encode(values: jax.Array, scales: jax.Array, signed: bool) -> jax.Array:
    """int8 codes of float32 `values`, `scales` broadcast to them.

    Nearest rank: within a binade the code's values are evenly spaced, as
    the bit patterns are, so rounding the pattern to a multiple of the
    step rounds the value to its nearest code (ties away from zero). A
    nonzero value below the lowest rank gets rank 1, never 0 (a second
    moment stored as zero would turn Adam's step into `m / eps`); NaN and
    values above the scale get the top rank. Signed codes are `±rank`;
    unsigned ones `rank - 128`. (Each step is written for few vector
    operations an element: the loop is compute-bound on a CPU.)
    """
    shift = _shift(signed)
    bits = _bits(values)
    magnitude = bits & 0x7FFFFFFF
    # Rounding half a step up, less the pattern of rank 0: one per block.
    offset = (1 << (shift - 1)) - _base(scales, signed)
    rank = (magnitude + offset) >> shift
    rank = jnp.clip(rank, 1, top_rank(signed))
    rank = jnp.where(magnitude > 0, rank, 0)
    if signed:
        negative = bits >> 31  # -1 or 0: (rank ^ -1) + 1 is -rank
        return ((rank ^ negative) - negative).astype(jnp.int8)
    return (rank - 128).astype(jnp.int8)


def decode(codes: jax.Array, scales: jax.Array, signed: bool) -> jax.Array:
    """float32 values of int8 `codes`, `scales` broadcast to them."""
    codes = codes.astype(jnp.int32)
    shift = _shift(signed)
    if signed:
        rank = jnp.abs(codes)
        base = _base(scales, signed)
    else:
        rank = codes + 128
        base = _base(scales, signed) + (128 << shift)  # rank 0 at code -128
    # At least the smallest subnormal: a tiny scale's low ranks would
    # otherwise fall below zero's bit pattern (nonzero stays nonzero).
    bits = jnp.maximum(base + ((rank if signed else codes) << shift), 1)
    bits = jnp.where(rank > 0, bits, 0)
    if signed:
        bits = bits | (codes & jnp.int32(-(2**31)))  # the code's sign bit
    return lax.bitcast_convert_type(bits, jnp.float32)
