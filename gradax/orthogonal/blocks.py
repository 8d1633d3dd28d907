"""A weight cut into blocks orthogonalized separately: per head, fused QKV.

:class:`gradax.MuonSplit` with `num_heads` or `split_sizes`
cuts one axis of a matrix into blocks (microsoft/dion's options of the same
names). Blocks of one size become a batch axis next to the cut axis, so each
size is one stack of matrices and one batched Newton–Schulz call: H equal
heads are a reshape; a fused `[q | k | v]` with `dk == dv != dq` gives
two stacks. Without a split this is :func:`gradax.linalg.matrices.matrix_view`.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from ..linalg.matrices import (
    MatrixView,
    MuonDimensionNumbers,
    has_split,
    matrix_axes,
    matrix_view,
)
from ..linalg.matrices import MuonSplit as MuonSplit


class Blocks(NamedTuple):
    """A weight as stacks of matrices, one stack per block shape."""

    to_stacks: Callable[[jax.Array], tuple[jax.Array, ...]]
    from_stacks: Callable[[Sequence[jax.Array]], jax.Array]
    fans: tuple[tuple[int, int], ...]  # (fan_in, fan_out) of each stack
    counts: tuple[int, ...]  # number of matrices in each stack


def _positive_int(value: Any, name: str, dims: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r} in {dims}")
    return value


def split_of(shape: tuple[int, ...], dims: Any) -> tuple[int, tuple[int, ...]] | None:
    """The cut axis and the block sizes along it, or None without a split.

    Raises:
      ValueError: the split does not fit the shape (it names the field).
    """
    if not has_split(dims):
        return None
    if dims.num_heads is not None and dims.split_sizes is not None:
        raise ValueError(f"give num_heads or split_sizes, not both: {dims}")
    ndim = len(shape)
    matrix = matrix_axes(dims.reduction_axis, ndim) + matrix_axes(
        dims.output_axis, ndim
    )
    if dims.split_axis is None:
        output = matrix_axes(dims.output_axis, ndim)
        if len(output) != 1:
            raise ValueError(
                f"split_axis must be given when output_axis has several axes: {dims}"
            )
        axis = output[0]
    else:
        try:
            axis = operator.index(dims.split_axis) % ndim
        except TypeError:
            raise ValueError(
                f"split_axis must be an axis (an int), got {dims.split_axis!r}"
            ) from None
        if axis not in matrix:
            raise ValueError(
                f"split_axis {dims.split_axis} must be a reduction or output axis "
                f"of the weight of shape {shape}: {dims}"
            )
    size = shape[axis]
    if dims.num_heads is not None:
        heads = _positive_int(dims.num_heads, "num_heads", dims)
        if size % heads:
            raise ValueError(
                f"num_heads={heads} must divide axis {axis} (size {size}) of the "
                f"weight of shape {shape}"
            )
        return axis, (size // heads,) * heads
    sizes = tuple(
        _positive_int(s, "split_sizes entries", dims) for s in dims.split_sizes
    )
    if sum(sizes) != size:
        raise ValueError(
            f"split_sizes {sizes} must add up to axis {axis} (size {size}) of the "
            f"weight of shape {shape}"
        )
    return axis, sizes


def matrix_blocks(shape: tuple[int, ...], dims: Any) -> Blocks:
    """How a weight maps to stacks `(..., fan_in, fan_out)`, one per block size."""
    shape = tuple(shape)
    try:
        return _remembered_blocks(shape, dims)
    except TypeError:  # dims holding a list: not hashable
        return _blocks(shape, dims)


# A pure function of (shape, dims), asked for each matrix at every update
# and in every trace: worked out once per weight shape.
@functools.lru_cache(maxsize=4096)
def _remembered_blocks(shape: tuple[int, ...], dims: Any) -> Blocks:
    return _blocks(shape, dims)


def _blocks(shape: tuple[int, ...], dims: Any) -> Blocks:
    split = split_of(shape, dims)
    whole = MuonDimensionNumbers(dims.reduction_axis, dims.output_axis)
    if split is None:
        view = matrix_view(shape, whole)
        # The batch axes' product (not size // (fan_in fan_out): a side may be 0).
        sides = matrix_axes(whole.reduction_axis, len(shape)) + matrix_axes(
            whole.output_axis, len(shape)
        )
        count = math.prod(n for a, n in enumerate(shape) if a not in sides)
        return Blocks(
            lambda x: (view.to_matrices(x),),
            lambda stacks: view.from_matrices(stacks[0]),
            ((view.fan_in, view.fan_out),),
            (count,),
        )
    axis, sizes = split
    offsets = [sum(sizes[:i]) for i in range(len(sizes))]
    groups: dict[int, list[int]] = {}
    for i, size in enumerate(sizes):
        groups.setdefault(size, []).append(i)

    def moved(axes: Any) -> tuple[int, ...]:
        # The cut axis becomes (blocks, size): the size axis keeps the cut
        # axis's role, the new blocks axis is a batch axis.
        return tuple(a + 1 if a >= axis else a for a in matrix_axes(axes, len(shape)))

    inner = MuonDimensionNumbers(moved(dims.reduction_axis), moved(dims.output_axis))
    stacked_shapes = [
        (*shape[:axis], len(members), size, *shape[axis + 1 :])
        for size, members in groups.items()
    ]
    views = [matrix_view(s, inner) for s in stacked_shapes]
    contiguous = len(groups) == 1  # equal blocks: a reshape, no copies

    def to_stacks(x):
        out = []
        for (size, members), stacked_shape, view in zip(
            groups.items(), stacked_shapes, views, strict=True
        ):
            if contiguous:
                stacked = x.reshape(stacked_shape)
            else:
                pieces = [
                    jax.lax.slice_in_dim(x, offsets[i], offsets[i] + size, axis=axis)
                    for i in members
                ]
                stacked = jnp.stack(pieces, axis=axis)
            out.append(view.to_matrices(stacked))
        return tuple(out)

    def from_stacks(stacks):
        if contiguous:
            return views[0].from_matrices(stacks[0]).reshape(shape)
        pieces: list[Any] = [None] * len(sizes)
        for members, view, stack in zip(groups.values(), views, stacks, strict=True):
            stacked = view.from_matrices(stack)
            for j, i in enumerate(members):
                pieces[i] = jax.lax.index_in_dim(stacked, j, axis=axis, keepdims=False)
        return jnp.concatenate(pieces, axis=axis)

    fans = tuple((v.fan_in, v.fan_out) for v in views)
    counts = tuple(
        math.prod(s) // (fi * fo)
        for s, (fi, fo) in zip(stacked_shapes, fans, strict=True)
    )
    return Blocks(to_stacks, from_stacks, fans, counts)


def block_view(shape: tuple[int, ...], dims: Any) -> MatrixView:
    """One stack of matrices (no split, or equal blocks) as a :class:`MatrixView`.

    Raises:
      ValueError: `split_sizes` of different sizes (more than one stack).
    """
    blocks = matrix_blocks(shape, dims)
    if len(blocks.fans) != 1:
        raise ValueError(
            f"split_sizes of different sizes ({dims.split_sizes}) are supported by "
            "muon; normuon and adamuon need equal blocks (num_heads, or equal "
            "split_sizes)"
        )
    fan_in, fan_out = blocks.fans[0]
    return MatrixView(
        lambda x: blocks.to_stacks(x)[0],
        lambda m: blocks.from_stacks((m,)),
        fan_in,
        fan_out,
    )
