"""8-bit blockwise storage of optimizer state (Dettmers et al., arXiv:2110.02861).

A state leaf made with a storage spec such as `int8_blockwise(256)` in place
of a dtype is a :class:`QuantizedArray`: one 8-bit code per element and one
float32 scale (the block's largest magnitude) per block. The code indexes a
*dynamic* map of 255 or 256 values in [-1, 1], dense near zero, so small
moments keep their relative precision.

The whole mechanism is here, behind the kernel's hook for state stored in
another form (gradax/_core/storage.py: `int8_blockwise` is a `StorageSpec`,
`QuantizedArray` a `StoredLeaf`): `gtree.zeros_like` creates a
:class:`QuantizedArray` for a spec, and the base class's `update` hands the
hooks float32 values (:meth:`QuantizedArray.load`) and stores what they
return the way `init` made it (`match_state` calls
:meth:`QuantizedArray.store_all`). An optimizer never sees a code.

`int8_blockwise(code="float")` stores each element as a small float
relative to a power-of-two scale instead (gradax/precision/_float_code.py):
cheaper to encode and decode, the same state tree and size.

Blocks: a leaf of shape `(..., n)` with `n >= block_size` is blocked along
its last axis, row by row (the last block of a row may be short). A leaf whose
last axis is shorter than a block is blocked along its flattened elements.
Leaves with fewer than `block_size` elements, and complex leaves, are not
quantized: they are stored in float32 (complex64).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from .._compat import reshard
from .._core.axes import explicit_sharding
from .._core.storage import StorageSpec, StoredLeaf, load_state, stops_loading
from . import _float_code

_DECADES = 7  # exponents 10^0 .. 10^-6 (10^-7 too for the unsigned map)
CODES = ("dynamic", "float")  # the values of `int8_blockwise(code=...)`


def _bits(signed: bool) -> int:
    """Bits of a code's magnitude: 7 after the sign, or all 8 when unsigned."""
    return 7 if signed else 8


def _zero_code(signed: bool, code: str) -> int:
    """The int8 code of 0 (the float code's are `±rank` or `rank - 128`)."""
    if code == "float":
        return 0 if signed else -128
    return _zero_index(signed) - 128


def _zero_index(signed: bool) -> int:
    """Index of 0 in the map: the signed map lists its negatives first."""
    return 2 ** _bits(signed) - 1 if signed else 0


def _magnitudes(rank: Any, signed: bool, xp: Any = jnp) -> Any:
    """The map's positive values, by rank `1 .. 2**bits - 1` (float32).

    Rank `r` lies in decade `E` when `2**e <= r < 2**(e+1)` with `e = bits
    - 1 - E` (the float exponent of `r`); decade `E` has `count = 2**e`
    values `10**-(E+1) (1 + 9 j / count)` for `j = r - count + 1 = 1 .. count`.
    Written as the exact integer `(9 j + count) 5**e 10**(8 - bits)` (at most
    `10**8`) times the float32 `1e-8`, NumPy and XLA compute the same float
    (tested bit for bit on the CPU): integer arithmetic, one conversion and
    one product, with no `a * b + c` a compiler could fuse into one
    rounding, and no division (XLA turns division by a constant into a
    product with its reciprocal). With this constant every decade's top is
    exactly the float32 `10**-E` (`1e-7` instead misses `1e-4` by one
    ulp). `xp` is `numpy` (to list the map) or `jax.numpy` (to decode).
    """
    bits = _bits(signed)
    rank = xp.asarray(rank, xp.int32)
    exponent = (xp.asarray(rank, xp.float32).view(xp.int32) >> 23) - 127
    count = xp.left_shift(xp.int32(1), exponent)
    numerator = 9 * rank - 8 * count + 9  # 9 j + count
    power_of_5 = xp.where(exponent & 1, 5, 1) * xp.where(exponent & 2, 25, 1)
    power_of_5 = power_of_5 * xp.where(exponent & 4, 625, 1)
    exact = (numerator * power_of_5 * 10 ** (8 - bits)).astype(xp.int32)
    return exact.astype(xp.float32) * xp.float32(1e-8)


@functools.cache
def dynamic_code_map(signed: bool) -> np.ndarray:
    """The sorted values of the 8-bit dynamic (tree) quantization map.

    An 8-bit code is read as: a sign bit (signed map only); then `E` zero
    bits, the dynamic exponent, giving the decade `10**-E`; then a one bit
    that ends the exponent; the remaining `F` bits are a linear fraction
    `k` on `[0.1, 1]`, so the value is `10**-E * (0.1 + 0.9 (k + 1) / 2**F)`.
    Each decade's values end at `10**-E`, so `1.0` (a block's largest
    magnitude) is exact and storing a loaded value again gives the same code.
    The code of all zeros (either sign) is `0`. These float32 values are
    the ones codes decode to (both computed by `_magnitudes`); they are
    within 1.2e-7 (relative) of the decimal values, and the powers of ten
    among them are exact.

    Args:
      signed: the map for signed values (first moments, 7 bits after the
        sign) or for non-negative ones (second moments, 8 bits).

    Returns:
      The distinct values in increasing order, float32: 255 for the signed
      map (`±1` down to `±1e-6` and 0), 256 for the unsigned one (1 down to
      `1e-7` and 0).

    Example:
      >>> m = dynamic_code_map(signed=False)
      >>> len(m), float(m[0]), float(m[-1])
      (256, 0.0, 1.0)

    References:
      Dettmers, 8-Bit Approximations for Parallelism in Deep Learning, 2016
      (arXiv:1511.04561); Dettmers et al., 8-bit Optimizers via Block-wise
      Quantization, 2022 (arXiv:2110.02861).
    """
    positive = _magnitudes(np.arange(1, 2 ** _bits(signed)), signed, np)
    zero = np.zeros(1, np.float32)
    if signed:
        return np.concatenate([-positive[::-1], zero, positive])
    return np.concatenate([zero, positive])


@dataclasses.dataclass(frozen=True)
class int8_blockwise(StorageSpec):  # noqa: N801 - named like the function users call
    """Storage spec: 8-bit codes of a dynamic map and one float32 scale per block.

    Given wherever an optimizer takes `mu_dtype`, `nu_dtype` or
    `accumulator_dtype`, the moments are stored as :class:`QuantizedArray`
    leaves: an element :math:`x` of a block with largest magnitude :math:`s`
    is stored as the code of the map value nearest to :math:`x / s` (signed map
    for first moments, unsigned for second moments; see
    :func:`dynamic_code_map`). The update runs in float32 on the loaded values
    and stores its result again. A nonzero value is never stored as zero
    (a second moment stored as zero would turn Adam's step into `m / eps`;
    the "zero-point problem" of Li et al.). Leaves with fewer than
    `block_size` elements, and complex leaves, stay in float32 (complex64).

    With `code="float"` an element is stored as a small float instead: its
    exponent relative to the block's scale and its mantissa rounded to 3
    bits (first moments, after a sign bit, like float8 e4m3) or 4 bits
    (second moments), over the 16 binades below the scale. The scale is a
    power of two: the smallest at or above the block's largest magnitude
    rounded to the code. A value's error is at most `2**-4` (signed) or
    `2**-5` (unsigned) of itself, against the dynamic map's `0.007 s` in
    its top decade and 14% (signed) of the value at `0.01 s`; the range ends at
    about `2e-5 s` (the dynamic map's at `1e-6 s`, `1e-7 s` unsigned), below
    which a nonzero value is stored as the smallest one. Encoding and
    decoding are a few integer operations on the float's bits and the block
    maximum is taken over one byte an element, which makes the 8-bit step
    cheap on a CPU (see docs/memory.md, "Cost").

    State memory: 1 byte per element plus 4 bytes per block (`1 + 4 /
    block_size` bytes; 1.016 for 256), against 4 in float32, for either
    code.

    Peak memory: under `jit`, a leaf of at least
    `int8_blockwise.recompute_min_size` elements (a class-wide setting;
    None, the default, is `2**20` on XLA:CPU and no leaf on other backends)
    is stored without writing its new float32 values out: an elementwise
    update rule is traced once for the updates, once for the block maxima
    and once for the codes, each recomputing the moments from the old codes
    (the same numbers, bit for bit). Smaller leaves are stored from the
    update's values, whose float32 copies are small (on a CPU, recomputing
    them costs more time than it saves).
    `gradax.int8_blockwise.recompute_min_size = 0` recomputes every leaf.
    See docs/memory.md, "Peak memory of a training step".

    Args:
      block_size: elements per block, a positive integer (bitsandbytes uses
        2048 for large tensors; 256 keeps the error lower).
      code: `"dynamic"` (the default: bitsandbytes' dynamic map, scale the
        block's largest magnitude) or `"float"` (the small float above,
        scale a power of two).

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.adam(1e-3, mu_dtype=gradax.int8_blockwise(),
      ...                  nu_dtype=gradax.int8_blockwise())
      >>> state = tx.init({"w": jnp.zeros((4, 256))})
      >>> state[0].mu["w"].codes.dtype, state[0].mu["w"].scales.shape
      (dtype('int8'), (4, 1))

    References:
      Dettmers et al., 8-bit Optimizers via Block-wise Quantization, 2022
      (arXiv:2110.02861); Li et al., Memory Efficient Optimizers with 4-bit
      States, 2023 (arXiv:2309.01507).
    """

    block_size: int = 256
    code: str = "dynamic"

    # Leaves of at least this many elements are stored from recomputed
    # passes under `jit` (see `update_in_passes`): no float32 copy of them
    # is written out. Smaller ones are stored from the values the update
    # computed, as one pass (on a CPU their float32 temporaries fit in the
    # caches, where recomputing the decoding three times costs more). A
    # setting for every spec: `gradax.int8_blockwise.recompute_min_size = 0`
    # recomputes every leaf (the least memory on XLA:CPU); a huge value
    # none. None (the default): 2**20 on XLA:CPU, no leaf on other backends,
    # where XLA fuses the one pass better (compiled ahead of time for a TPU
    # chip, the recomputed passes needed up to twice the temporaries:
    # docs/memory.md, "The same steps compiled for a TPU").
    recompute_min_size: ClassVar[int | None] = None

    def __post_init__(self):
        size = self.block_size
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)):
            raise ValueError(
                f"block_size must be a positive integer, got {size!r} "
                f"({type(size).__name__})"
            )
        if size < 1:
            raise ValueError(f"block_size must be a positive integer, got {size}")
        if not isinstance(self.code, str) or self.code not in CODES:
            raise ValueError(f"code must be one of {CODES}, got {self.code!r}")

    def zeros_like(self, x: Any, *, signed: bool = True) -> Any:
        """Zeros shaped like `x` in this storage (a plain array when too small)."""
        if not _quantizes(x, self.block_size):
            dtype = jnp.complex64 if jnp.iscomplexobj(x) else jnp.float32
            return jnp.zeros_like(x, dtype=dtype)
        # The code of 0 and zero scales, without quantizing (XLA would
        # constant-fold a quantization of zeros at compile time).
        zero = _zero_code(signed, self.code)
        codes = jnp.full_like(x, zero, dtype=jnp.int8)
        # float32 whatever the parameters' dtype (also float64 under x64).
        scales = jnp.zeros(
            _blocked_shape(np.shape(x), self.block_size)[:-1], jnp.float32
        )
        return QuantizedArray(codes, scales, self.block_size, signed, self.code)

    def round_trip(self, x: Any, *, signed: bool = True) -> Any:
        """`x` as this storage holds it: stored and loaded again (float32)."""
        if not _quantizes(x, self.block_size):
            dtype = jnp.complex64 if jnp.iscomplexobj(x) else jnp.float32
            return jnp.asarray(x).astype(dtype)
        return QuantizedArray.store(x, self.block_size, signed, self.code).load()


def moment_zeros(tree: Any, dtype: Any | None, *, nonnegative: bool) -> Any:
    """Zeros for a moment: `gtree.zeros_like`, with the map picked by sign.

    A storage spec stores a moment that stays >= 0 (a second moment) with its
    unsigned map, one more bit of precision; any other dtype is as
    `gtree.zeros_like` makes it.
    """
    if isinstance(dtype, int8_blockwise):
        return jax.tree.map(lambda x: dtype.zeros_like(x, signed=not nonnegative), tree)
    return jax.tree.map(lambda x: jnp.zeros_like(x, dtype=dtype), tree)


def _quantizes(x: Any, block_size: int) -> bool:
    size = math.prod(np.shape(x))
    return size >= block_size and not jnp.iscomplexobj(x)


def _blocked_shape(shape: tuple[int, ...], block_size: int) -> tuple[int, ...]:
    """The shape of the blocks view: `(..., blocks, block_size)`."""
    if _rowwise(shape, block_size):
        return (*shape[:-1], -(-shape[-1] // block_size), block_size)
    return (-(-math.prod(shape) // block_size), block_size)


def _rowwise(shape: tuple[int, ...], block_size: int) -> bool:
    return bool(shape) and shape[-1] >= block_size


def _block_spec(x: jax.Array, block_size: int) -> Any:
    """Explicit sharding of the blocks view of `x`, or None (Auto, one device).

    A sharded leading axis keeps its sharding. A sharded last axis keeps it
    when each shard holds whole blocks; otherwise, and for blocks over the
    flattened leaf, the blocks are replicated (the partitioner then moves data).
    """
    sharding = explicit_sharding(x)
    if sharding is None:
        return None
    P = jax.sharding.PartitionSpec
    spec = tuple(sharding.spec) + (None,) * (x.ndim - len(sharding.spec))
    if not _rowwise(x.shape, block_size):
        return jax.sharding.NamedSharding(sharding.mesh, P(None, None))
    last = spec[-1]
    names = () if last is None else (last if isinstance(last, tuple) else (last,))
    shards = math.prod(sharding.mesh.shape[name] for name in names)
    whole = x.shape[-1] % (shards * block_size) == 0
    return jax.sharding.NamedSharding(
        sharding.mesh, P(*spec[:-1], last if whole else None, None)
    )


def _to_blocks(x: jax.Array, block_size: int) -> jax.Array:
    shape = x.shape
    blocked = _blocked_shape(shape, block_size)
    out = _block_spec(x, block_size)
    if out is not None:
        x = reshard(x, jax.sharding.PartitionSpec(*out.spec[:-1]))
    if not _rowwise(shape, block_size):
        x = jnp.reshape(x, (-1,))
    padding = blocked[-2] * block_size - x.shape[-1]
    if padding:
        x = jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, padding)])
    if out is None:
        return x.reshape(blocked)
    return jnp.reshape(x, blocked, out_sharding=out)


def _from_blocks(blocks: jax.Array, like: jax.Array) -> jax.Array:
    """The blocks view back in the shape (and Explicit sharding) of `like`."""
    shape = like.shape
    flat_shape = (*blocks.shape[:-2], blocks.shape[-2] * blocks.shape[-1])
    blocks_sharding = explicit_sharding(blocks)
    if blocks_sharding is None:
        flat = blocks.reshape(flat_shape)
    else:
        spec = jax.sharding.PartitionSpec(*tuple(blocks_sharding.spec)[:-1])
        flat = jnp.reshape(blocks, flat_shape, out_sharding=spec)
    length = shape[-1] if len(blocks.shape) == len(shape) + 1 else math.prod(shape)
    if length != flat.shape[-1]:
        flat = flat[..., :length]
    sharding = explicit_sharding(like)
    if sharding is None:
        return flat.reshape(shape)
    if flat.shape == tuple(shape):  # blocked along whole rows: no reshape
        return reshard(flat, sharding.spec)
    out = jnp.reshape(flat, shape, out_sharding=jax.sharding.PartitionSpec())
    return reshard(out, sharding.spec)


def _per_element(scales: jax.Array, shape: tuple[int, ...], block_size: int):
    """Each element's block scale, in the stored array's shape.

    Decoding and encoding run elementwise in the parameter's shape, as the
    optimizer's update does, with only the scales broadcast over their
    blocks: XLA then fuses them with the update into loops over one shape.
    (Working in the `(..., blocks, block_size)` view instead made the 8-bit
    AdamW step 1.5x slower on a CPU.) Under Explicit mesh axes the blocks
    view is used, whose shardings are spelled out.
    """
    blocked = _blocked_shape(shape, block_size)
    per_element = jnp.broadcast_to(scales[..., None], (*scales.shape, block_size))
    padded = per_element.reshape(*scales.shape[:-1], blocked[-2] * block_size)
    length = shape[-1] if _rowwise(shape, block_size) else math.prod(shape)
    return padded[..., :length].reshape(shape)


def _encode(normalized: jax.Array, signed: bool) -> jax.Array:
    """Index in :func:`dynamic_code_map` of the value nearest to each element.

    Computed from the map's structure, not by searching it (a search costs
    eight gathers an element). In decade `E` (`10**-(E+1) < |a| <=
    10**-E`) the values are `10**-(E+1) (1 + 9 j / count)`, `j = 0 ..
    count` (`j = 0` is the top of the decade below, the same rank), and
    the rank of value `j` is `count - 1 + j`. So the nearest rank is
    `round(|a| * slope + offset)` with `slope = count 10**(E+1) / 9` and
    `offset = 8 count / 9 - 1`; the decade's pair is picked by comparisons
    with the float32 powers of ten (a chain of selects, cheaper than a
    logarithm). The rank is continuous where decades meet, so a value one
    rounding away from a power of ten gets its code from either side.
    """
    return _encode_magnitude(jnp.abs(normalized), normalized < 0, signed)


def _encode_magnitude(
    magnitude: jax.Array, negative: jax.Array, signed: bool
) -> jax.Array:
    """:func:`_encode` of the values of magnitude `magnitude` and sign `negative`."""
    bits = _bits(signed)
    lowest = _DECADES - 1 if signed else _DECADES  # the last decade's E

    def line(exponent: int) -> tuple[np.float32, np.float32]:
        count = 2.0 ** (bits - 1 - exponent)
        slope = count * 10.0 ** (exponent + 1) / 9
        return np.float32(slope), np.float32(8 * count / 9 - 1)

    slope, offset = line(0)
    for exponent in range(1, lowest + 1):
        below = magnitude <= np.float32(10.0**-exponent)
        next_slope, next_offset = line(exponent)
        slope = jnp.where(below, next_slope, slope)
        offset = jnp.where(below, next_offset, offset)
    # Clipped so that a NaN or inf (converted to 0 or the int32 limits) stays
    # a valid code; a nonzero value is never stored as zero (rank 0).
    rank = jnp.clip(jnp.round(magnitude * slope + offset), 0, 2**bits - 1)
    rank = jnp.where(magnitude > 0, jnp.maximum(rank, 1), 0).astype(jnp.int32)
    if not signed:
        return rank
    return _zero_index(signed) + jnp.where(negative, -rank, rank)


def _decode(index: jax.Array, signed: bool) -> jax.Array:
    """The map's value at each index (int32), computed rather than looked up.

    About thirty integer and float operations, all elementwise: they fuse
    into the update that reads the values and shard like it on any backend.
    A lookup in the 256-entry table is a gather instead, whose speed depends
    on the backend; on a 2-core CPU the two were within 13% of each other in
    the 8-bit AdamW step. Bit-equal to `dynamic_code_map(signed)[index]`.
    """
    if not signed:
        return jnp.where(index > 0, _magnitudes(index, signed), 0.0)
    offset = index - _zero_index(signed)
    rank = jnp.abs(offset)
    magnitude = jnp.where(rank > 0, _magnitudes(rank, signed), 0.0)
    return jnp.where(offset < 0, -magnitude, magnitude)


def encode_with_scales(
    values: jax.Array,
    scales: jax.Array,
    block_size: int,
    signed: bool,
    code: str = "dynamic",
) -> jax.Array:
    """int8 codes of float32 `values` (in their own shape) in blocks of `scales`.

    The elementwise half of :meth:`QuantizedArray.store`, given the scales
    (a block of scale 0 is all zeros). The benchmark also calls it with the
    scales a state already holds, to time encoding without the maximum.
    """
    if code == "float":
        per_element = _per_element(scales, values.shape, block_size)
        return _float_code.encode(values, per_element, signed)
    safe = _per_element(jnp.where(scales > 0, scales, 1.0), values.shape, block_size)
    # The sign read from `x`, not from `x / s`: the quotient then has one
    # use (its magnitude), so XLA fuses it into the encoding's loop instead
    # of writing it out (it does not fuse a division whose value a loop
    # reads twice). The codes are the same: `s > 0`.
    index = _encode_magnitude(jnp.abs(values / safe), values < 0, signed)
    return (index - 128).astype(jnp.int8)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class QuantizedArray(StoredLeaf):
    """An array stored as 8-bit codes and one float32 scale per block.

    Made by optimizers' `init` from a storage spec (see
    :class:`int8_blockwise`); its value is `map[codes] * scale` of each
    element's block. Its leaves are `codes` (int8, the array's shape, so
    they shard like it) and `scales` (float32, one per block); the block
    size and the map are static.

    Attributes:
      codes: int8 array of the stored array's shape: index into the map,
        offset by -128.
      scales: float32 array of each block's largest magnitude, shaped
        `(..., blocks)` when blocked along the last axis, else `(blocks,)`.
      block_size: elements per block.
      signed: whether the signed map is used (else the unsigned one).
      code: `"dynamic"` or `"float"` (see :class:`int8_blockwise`).

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> q = gradax.QuantizedArray.store(jnp.linspace(-1.0, 1.0, 256), 64, True)
      >>> float(abs(q.load() - jnp.linspace(-1.0, 1.0, 256)).max()) < 8e-3
      True
    """

    codes: jax.Array
    scales: jax.Array
    block_size: int = dataclasses.field(metadata=dict(static=True))
    signed: bool = dataclasses.field(metadata=dict(static=True))
    code: str = dataclasses.field(default="dynamic", metadata=dict(static=True))

    @property
    def shape(self) -> tuple[int, ...]:
        """The stored array's shape."""
        return tuple(self.codes.shape)

    @classmethod
    def store(
        cls, x: Any, block_size: int, signed: bool, code: str = "dynamic"
    ) -> QuantizedArray:
        """Quantizes `x` (computed in float32) into blocks of `block_size`."""
        x = jnp.asarray(x)
        values = x.astype(jnp.float32)
        if code == "float":
            return cls._store_float(x, values, block_size, signed)
        blocks = _to_blocks(values, block_size)
        scales = jnp.max(jnp.abs(blocks), axis=-1)
        if explicit_sharding(x) is None:
            codes = encode_with_scales(values, scales, block_size, signed, code)
            return cls(codes, scales, block_size, signed, code)
        safe = jnp.where(scales > 0, scales, 1.0)
        index = _encode(blocks / safe[..., None], signed)
        codes = _from_blocks((index - 128).astype(jnp.int8), x)
        return cls(codes, scales, block_size, signed)

    @classmethod
    def _store_float(cls, x, values, block_size, signed) -> QuantizedArray:
        exponents = _float_code.exponents(values, signed)
        top = jnp.max(_to_blocks(exponents, block_size), axis=-1)
        scales = _float_code.scales_from_exponents(top)
        if explicit_sharding(x) is None:
            codes = encode_with_scales(values, scales, block_size, signed, "float")
        else:
            blocks = _to_blocks(values, block_size)
            codes = _float_code.encode(blocks, scales[..., None], signed)
            codes = _from_blocks(codes, x)
        return cls(codes, scales, block_size, signed, "float")

    def load(self) -> jax.Array:
        """The stored values, float32."""
        if self.code == "float":
            return self._load_float()
        if explicit_sharding(self.codes) is None:
            values = _decode(self.codes.astype(jnp.int32) + 128, self.signed)
            return values * _per_element(self.scales, self.shape, self.block_size)
        index = _to_blocks(self.codes, self.block_size).astype(jnp.int32) + 128
        values = _decode(index, self.signed) * self.scales[..., None]
        return _from_blocks(values, self.codes)

    def _load_float(self) -> jax.Array:
        if explicit_sharding(self.codes) is None:
            scales = _per_element(self.scales, self.shape, self.block_size)
            return _float_code.decode(self.codes, scales, self.signed)
        codes = _to_blocks(self.codes, self.block_size)
        values = _float_code.decode(codes, self.scales[..., None], self.signed)
        return _from_blocks(values, self.codes)

    def with_codes(self, codes: jax.Array) -> QuantizedArray:
        """This array with other codes (e.g. resharded), same scales."""
        return dataclasses.replace(self, codes=codes)

    def store_like(self, x: Any) -> QuantizedArray:
        """`x` stored with this array's block size and map."""
        if jnp.shape(x) != self.shape:
            raise TypeError(
                f"cannot store an array of shape {jnp.shape(x)} in a quantized "
                f"state leaf of shape {self.shape}"
            )
        return QuantizedArray.store(x, self.block_size, self.signed, self.code)

    @classmethod
    def store_all(
        cls,
        values: list[Any],
        olds: list[Any],
        to_encode: list[Any] | None = None,
    ) -> list[Any]:
        """Each of `values` stored like the :class:`QuantizedArray` at its index.

        The same codes as `[old.store_like(x) for ...]`. A signed and an
        unsigned leaf of one code, shape and block size (in an Adam-like
        state: a parameter's first and second moment, paired in tree order)
        are stored together (:func:`_store_pair`); the others alone (issue 35,
        the 8-bit AdamW step: see docs/memory.md, "Cost").

        `to_encode`, when given, holds the same values computed a second time
        (see :meth:`update_in_passes`): the block maxima are taken of `values`
        and the codes encoded from `to_encode`, so that XLA computes each in
        its own loop and writes neither out in float32.
        """
        encode = values if to_encode is None else to_encode
        stored: list[Any] = [None] * len(values)
        # (code, shape, block size, signed) -> indices of leaves without a pair
        unpaired: dict[tuple, list[int]] = {}
        for index, (x, old) in enumerate(zip(values, olds, strict=True)):
            if jnp.shape(x) != old.shape or explicit_sharding(x) is not None:
                stored[index] = old.store_like(x)  # (a wrong shape raises there)
                continue
            kind = (old.code, old.shape, old.block_size)
            partners = unpaired.get((*kind, not old.signed))
            if partners:
                first = partners.pop(0)
                pair = (values[first], values[index]), (olds[first], old)
                if to_encode is not None:
                    pair = (*pair, (encode[first], encode[index]))
                stored[first], stored[index] = _store_pair(*pair)
            else:
                unpaired.setdefault((*kind, old.signed), []).append(index)
        for index, done in enumerate(stored):
            if done is None:
                stored[index] = _store_alone(values[index], olds[index], encode[index])
        return stored

    @classmethod
    def update_in_passes(
        cls,
        update_state: Callable,
        updates: Any,
        stored: Any,
        loaded: Any,
        params: Any,
        extra_args: dict,
    ) -> tuple[Any, Any]:
        """`update_state(updates, loaded, params)`, its 8-bit leaves stored again.

        The kernel's hook (gradax/_core/storage.py), called for a state with
        quantized leaves; `loaded` is `load_state(stored)`. Under a trace, the
        new value of each quantized leaf feeds three things: its block maxima,
        its codes, and the update. Computed once, XLA writes it out in float32
        for all three (4 bytes a parameter for each moment, more than the
        8-bit state saves), so here the update rule is traced three times:
        one for the updates (fused with the caller's `apply_updates`), one
        for the block maxima (fused with the reduction), one for the codes.
        The last two read the gradients minus a zero that comes out of
        `lax.optimization_barrier`, so that XLA cannot merge the passes. Each
        pass recomputes the moments from the old codes
        and the gradients, so no float32 moment exists as a whole; the
        arithmetic is the same, so the codes and updates are those of one
        pass, bit for bit. What the extra passes compute besides the quantized
        leaves is dead code that XLA removes.

        Only for update rules that are elementwise in the moments, the
        gradients and the parameters (:func:`_elementwise`, read from the
        rule's jaxpr): a reduction or a product over them (Muon's
        orthogonalization) computed in another program may sum in another
        order, and the numbers must stay those of one pass, bit for bit. Such
        rules are traced once, as before.

        Eagerly (no trace) it is one call.
        The returned state has the quantized leaves stored (`match_state`
        passes them through) and every other leaf as the update rule made it.
        """
        new_updates, new_state = update_state(updates, loaded, params, **extra_args)
        olds, treedef = jax.tree_util.tree_flatten(stored, is_leaf=stops_loading)
        try:
            news = treedef.flatten_up_to(new_state)
        except (TypeError, ValueError):  # a changed structure: match_state says so
            return new_updates, new_state
        passes = [
            i
            for i, (new, old) in enumerate(zip(news, olds, strict=True))
            if is_quantized(old)
            and not is_quantized(new)
            and isinstance(old.codes, jax.core.Tracer)
            and jnp.shape(new) == old.shape
            and explicit_sharding(new) is None
            and math.prod(old.shape) >= _recompute_min_size()
        ]
        if not passes or not _elementwise(
            update_state, (updates, loaded, params), extra_args, treedef, passes
        ):
            return new_updates, new_state

        def again(tag: int) -> list[Any]:
            # Every new moment derives from the gradients, so gradients
            # minus a zero of this pass's own make the passes distinct. Arrays
            # passed through the barrier themselves cost memory on jax 0.12's
            # XLA:CPU (an 8-bit sgd step on a 1024x1024 leaf: 5.02 bytes a
            # parameter of temporaries with codes, scales and params there,
            # 1.05 without; see _minus_zero).
            grads = _minus_zero(updates, tag)
            _, state = update_state(grads, load_state(stored), params, **extra_args)
            leaves = treedef.flatten_up_to(state)
            return [leaves[i] for i in passes]

        for_scales, for_codes = again(1), again(2)
        done = cls.store_all(for_scales, [olds[i] for i in passes], for_codes)
        for i, quantized in zip(passes, done, strict=True):
            news[i] = quantized
        return new_updates, treedef.unflatten(news)


def _store_alone(x: Any, old: QuantizedArray, to_encode: Any) -> QuantizedArray:
    """`old.store_like(x)`, its codes encoded from `to_encode` (equal to `x`)."""
    if to_encode is x:
        return old.store_like(x)
    values = jnp.asarray(x).astype(jnp.float32)
    magnitudes = _to_blocks(_float_code.magnitude_bits(values), old.block_size)
    top = _block_max_bits(magnitudes)
    if old.code == "float":
        exponents = _float_code.exponents_of_magnitudes(top, old.signed)
        scales = _float_code.scales_from_exponents(exponents)
    else:
        scales = jax.lax.bitcast_convert_type(top, jnp.float32)
    encode = jnp.asarray(to_encode).astype(jnp.float32)
    codes = encode_with_scales(encode, scales, old.block_size, old.signed, old.code)
    return QuantizedArray(codes, scales, old.block_size, old.signed, old.code)


def _block_max_bits(magnitudes: jax.Array) -> jax.Array:
    """The largest of each block's `|x|` bit patterns (int32, last axis).

    A variadic reduction, the patterns paired with themselves shifted
    right by one (whose maximum is never the larger): XLA:CPU fuses it
    with the loop that computes the values, where a lone `max` goes to a
    library call that reads its input from memory (written out first),
    and a pair it can prove redundant becomes a lone `max` again.
    """
    zero = jnp.zeros((), jnp.int32)
    axis = (magnitudes.ndim - 1,)
    top, half = jax.lax.reduce(
        (magnitudes, magnitudes >> 1), (zero, zero), _pairwise_max, axis
    )
    return jnp.maximum(top, half)


def _store_pair(values: tuple, olds: tuple, to_encode: tuple | None = None) -> tuple:
    """Two leaves of one code and blocking, stored in two loops, not four.

    Their block maxima come from one variadic reduction over `|x|`'s bit
    patterns (ordered as `|x|` is). XLA:CPU fuses it with the loop that
    computes both moments, which then reads the gradient and both old
    codes once; a lone `max` it hands to a library call after writing its
    input out (`|x|` in float32 for the dynamic map). On a CPU their codes
    then come from one loop as well (see :func:`_one_loop_on_cpu`), encoded
    from `to_encode` when given (the same values, computed again).
    """
    floats = [jnp.asarray(x).astype(jnp.float32) for x in values]
    if to_encode is None:
        encode = floats
    else:
        encode = [jnp.asarray(x).astype(jnp.float32) for x in to_encode]
    block_size, code = olds[0].block_size, olds[0].code
    magnitudes = tuple(
        _to_blocks(_float_code.magnitude_bits(x), block_size) for x in floats
    )
    zero = jnp.zeros((), jnp.int32)
    largest = jax.lax.reduce(
        magnitudes, (zero, zero), _pairwise_max, (magnitudes[0].ndim - 1,)
    )
    if code == "float":
        scales = [
            _float_code.scales_from_exponents(
                _float_code.exponents_of_magnitudes(top, old.signed)
            )
            for top, old in zip(largest, olds, strict=True)
        ]
    else:  # the dynamic map's scale: the largest |x| itself
        scales = [jax.lax.bitcast_convert_type(top, jnp.float32) for top in largest]
    codes = tuple(
        encode_with_scales(x, s, block_size, old.signed, code)
        for x, s, old in zip(encode, scales, olds, strict=True)
    )
    codes = _one_loop_on_cpu(codes)
    return tuple(
        QuantizedArray(c, s, block_size, old.signed, code)
        for c, s, old in zip(codes, scales, olds, strict=True)
    )


def _pairwise_max(a: tuple, b: tuple) -> tuple:
    return jnp.maximum(a[0], b[0]), jnp.maximum(a[1], b[1])


def _one_loop_on_cpu(codes: tuple) -> tuple:
    """The same two int8 arrays, computed in one XLA:CPU loop.

    XLA's CPU backend makes no loop with two outputs out of two
    elementwise results, but it does for a variadic reduction. So each
    array is paired with int8's minimum along a new axis of size 2 and
    reduced by `max` over it, which gives the array back, bit for bit (a
    reduction over an axis of size 1 is simplified away first). On the
    8-bit AdamW step this took the two encoding loops' time from about
    2.1 to 1.4 ms on 4M parameters (2-core CPU). Other backends fuse
    multi-output loops themselves and get the arrays as they are.
    """
    if jax.default_backend() != "cpu":
        return codes
    low = jnp.int8(-128)
    padded = tuple(jnp.stack([c, jnp.full_like(c, low)], axis=-1) for c in codes)
    return jax.lax.reduce(padded, (low, low), _pairwise_max, (codes[0].ndim,))


def one_loop(arrays: tuple) -> tuple:
    """The same arrays (of 8-, 16- or 32-bit integers), computed in one loop.

    XLA:CPU computes two elementwise results of one input in two loops,
    and writes out whatever both read (see :func:`_one_loop_on_cpu`, whose
    trick this is: a variadic reduction over an axis of size 2, each array
    paired with its dtype's minimum). Used by `master_weights` so that a
    parameter's new high and low halves come from one pass over the update.
    """
    if jax.default_backend() != "cpu":
        return arrays
    lows = tuple(jnp.array(jnp.iinfo(a.dtype).min, a.dtype) for a in arrays)
    padded = tuple(
        jnp.stack([a, jnp.full_like(a, low)], axis=-1)
        for a, low in zip(arrays, lows, strict=True)
    )

    def maxima(a: tuple, b: tuple) -> tuple:
        return tuple(jnp.maximum(x, y) for x, y in zip(a, b, strict=True))

    return jax.lax.reduce(padded, lows, maxima, (arrays[0].ndim,))


def is_quantized(x: Any) -> bool:
    """Whether `x` is a :class:`QuantizedArray`."""
    return isinstance(x, QuantizedArray)


def _minus_zero(tree: Any, tag: int) -> Any:
    """`tree` with a zero XLA cannot see through subtracted from each float leaf.

    The zero comes out of `lax.optimization_barrier` (with `tag`, so two
    passes get two zeros), so XLA can neither fold the difference nor merge
    two passes' values; `x - 0` is `x` exactly (signed zeros, infinities
    and NaN too). A subtraction, not a product with a one: XLA:CPU lets
    LLVM contract a multiply and an add into one FMA, and a product feeding
    `m * decay + g` gives the add two multiplies to choose from, so the
    recomputed moment could round differently from one pass's (an 8-bit
    sgd momentum did, on jaxlib 0.12.1). Only a scalar passes the barrier:
    an array there is materialized (a bfloat16 gradient's float32 copy)
    and, if donated, copied first by jax 0.12's XLA:CPU.
    """

    zeros: dict[Any, Any] = {}  # one barrier'd zero per dtype, not per leaf

    def shift(x: Any) -> Any:
        if not isinstance(x, jax.Array) or not jnp.issubdtype(x.dtype, jnp.floating):
            return x
        if x.dtype not in zeros:
            zeros[x.dtype] = _barrier(jnp.zeros((), x.dtype), tag)
        return x - zeros[x.dtype]

    return jax.tree_util.tree_map(shift, tree)


def _barrier(tree: Any, tag: int) -> Any:
    """`tree` with its arrays passed through one `lax.optimization_barrier`.

    `tag` (a constant passed through with them) tells the barriers of two
    passes apart: XLA would merge two barriers of the same operands.
    """
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    moved = [
        i
        for i, x in enumerate(leaves)
        if isinstance(x, jax.Array)
        and not jax.dtypes.issubdtype(x.dtype, jax.dtypes.extended)
    ]
    if moved:
        out, _ = jax.lax.optimization_barrier(
            ([leaves[i] for i in moved], jnp.int32(tag))
        )
        for i, x in zip(moved, out, strict=True):
            leaves[i] = x
    return treedef.unflatten(leaves)


# Primitives that compute each output element from the same element of
# their inputs (and scalars): a rule made of these gives the same numbers
# however XLA fuses it. Calls (jit, custom_jvp/vjp) are looked into.
_ELEMENTWISE = frozenset(
    """abs acos acosh add and asin asinh atan atan2 atanh bitcast_convert_type
    cbrt ceil clamp conj convert_element_type copy copy_p cos cosh div eq erf
    erf_inv erfc exp exp2 expm1 floor ge gt imag integer_pow is_finite le lgamma
    digamma log log1p logistic lt max min mul ne neg nextafter not or pow real
    reduce_precision rem round rsqrt select_n shift_left shift_right_arithmetic
    shift_right_logical sign sin sinh sqrt square stop_gradient sub tan tanh
    xor""".split()
)
_CALLS = {
    "jit": "jaxpr",
    "pjit": "jaxpr",
    "custom_jvp_call": "call_jaxpr",
    "custom_vjp_call": "call_jaxpr",
    "closed_call": "call_jaxpr",
}


def _recompute_min_size() -> float:
    """The smallest leaf stored from recomputed passes (see
    `int8_blockwise.recompute_min_size`); infinity for none."""
    size = int8_blockwise.recompute_min_size
    if size is not None:
        return size
    return 2**20 if jax.default_backend() == "cpu" else math.inf


def _elementwise(update_state, args, extra_args, treedef, passes) -> bool:
    """Whether the rule's outputs are elementwise in its array inputs.

    Traced once more (`jax.make_jaxpr`, no computation): the quantized
    leaves' loaded values, the gradients and the parameters are followed
    through the rule; any other primitive that reads them (a reduction, a
    product, a reshape) makes the answer False.
    """
    updates, loaded, params = args

    def rule(updates, loaded, params):
        return update_state(updates, loaded, params, **extra_args)

    try:
        closed = jax.make_jaxpr(rule)(updates, loaded, params)
    except Exception:  # noqa: BLE001 - the real call works; take one pass
        return False
    state_leaves = treedef.flatten_up_to(loaded)
    chosen = set(passes)
    sources = [True] * len(jax.tree_util.tree_leaves(updates))
    for i, leaf in enumerate(state_leaves):
        count = len(jax.tree_util.tree_leaves(leaf))
        sources += [i in chosen] * count
    sources += [True] * len(jax.tree_util.tree_leaves(params))
    if len(sources) != len(closed.jaxpr.invars):
        return False
    return _follows_elementwise(closed.jaxpr, sources) is not None


def _follows_elementwise(jaxpr, marked: list[bool]) -> list[bool] | None:
    """Which outputs derive from the marked inputs, or None where a
    non-elementwise primitive reads a marked value."""
    from jax.extend.core import Var  # (literals are not variables)

    derived = {v for v, m in zip(jaxpr.invars, marked, strict=True) if m}

    def reads(eqn) -> list[bool]:
        return [isinstance(v, Var) and v in derived for v in eqn.invars]

    for eqn in jaxpr.eqns:
        inputs = reads(eqn)
        if not any(inputs):
            continue
        name = eqn.primitive.name
        if name in _ELEMENTWISE:
            outputs = [True] * len(eqn.outvars)
        elif name in _CALLS and _CALLS[name] in eqn.params:
            inner = eqn.params[_CALLS[name]]
            inner = getattr(inner, "jaxpr", inner)
            outputs = _follows_elementwise(inner, inputs)
            if outputs is None:
                return None
        else:
            return None
        derived.update(v for v, m in zip(eqn.outvars, outputs, strict=True) if m)
    return [isinstance(v, Var) and v in derived for v in jaxpr.outvars]
