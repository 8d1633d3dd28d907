"""Pieces shared by the Kronecker-factored preconditioners (Shampoo, SOAP).

A leaf's matrices come from Muon's dimension numbers (see
:class:`gradax.MuonDimensionNumbers`): the reduction (fan-in) and output
(fan-out) axes form a matrix, every other axis is a batch of independent
matrices, each with its own factors. A matrix may also be cut into blocks,
each one more batch entry. Under a mesh with Explicit axes the matrix axes
are gathered and the batch axes stay sharded, so every device works on its
own matrices; the factors' batch axes are sharded like the weight's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._compat import reshard, shard_map
from .._core.axes import explicit_sharding, restore
from .._core.numerics import work_dtype
from ..linalg.matrices import (
    full_dimension_numbers,
    matrix_axes,
    matrix_view,
)

P = jax.sharding.PartitionSpec


class Plan(NamedTuple):
    """How one leaf is preconditioned (static)."""

    to_matrices: Callable[[jax.Array], jax.Array]  # leaf -> (*batch, rows, cols)
    from_matrices: Callable[[jax.Array], jax.Array]
    batch_axes: tuple[int, ...]  # the leaf's axes that index its matrices
    rows: int
    cols: int
    left: int  # block size of the row factor; 0: no factor on that side
    right: int  # block size of the column factor; 0: none

    @property
    def factored(self) -> bool:
        return bool(self.left or self.right)


_UNFACTORED = Plan(lambda x: x, lambda y: y, (), 0, 0, 0, 0)


class TensorPlan(NamedTuple):
    """A leaf viewed as a tensor of rank >= 3 with a factor on every axis.

    Distributed Shampoo's layout for a leaf whose merged shape keeps three
    or more axes: each axis is cut into blocks of at most `block_size`
    (the last one zero-padded), and every block of the tensor has one
    factor per axis.
    """

    merged: tuple[int, ...]  # the tensor's shape
    blocks: tuple[int, ...]  # block size along each of the tensor's axes
    batch_axes: tuple[int, ...] = ()  # none: the whole leaf is gathered

    @property
    def factored(self) -> bool:
        return True

    def counts(self) -> tuple[int, ...]:
        """Blocks along each axis."""
        return tuple(-(-d // b) for d, b in zip(self.merged, self.blocks, strict=True))


def tensor_to_blocks(x: jax.Array, plan: TensorPlan) -> jax.Array:
    """A tensor of shape `plan.merged` as its blocks, `(n_blocks, *plan.blocks)`."""
    counts, sizes = plan.counts(), plan.blocks
    pad = [(0, n * b - d) for d, b, n in zip(plan.merged, sizes, counts, strict=True)]
    split = [v for n, b in zip(counts, sizes, strict=True) for v in (n, b)]
    x = jnp.pad(x, pad).reshape(split)
    k = len(counts)
    x = x.transpose([2 * i for i in range(k)] + [2 * i + 1 for i in range(k)])
    return x.reshape((-1, *sizes))


def tensor_from_blocks(y: jax.Array, plan: TensorPlan) -> jax.Array:
    """The inverse of :func:`tensor_to_blocks`."""
    counts, sizes = plan.counts(), plan.blocks
    k = len(counts)
    y = y.reshape((*counts, *sizes))
    y = y.transpose([v for i in range(k) for v in (i, k + i)])
    y = y.reshape([n * b for n, b in zip(counts, sizes, strict=True)])
    return y[tuple(slice(0, d) for d in plan.merged)]


_AXES = "abcdefghijklm"


def axis_gram(x: jax.Array, axis: int) -> jax.Array:
    """`(n, b_axis, b_axis)`: the Gram matrix of each block's slices along `axis`.

    `x` is `(n, *blocks)`; `axis` counts the block's axes from 0. Entry
    `[i, j]` sums `x[..., i, ...] * conj(x[..., j, ...])` over the other axes.
    """
    k = x.ndim - 1
    left = _AXES[:k]
    right = left[:axis] + "z" + left[axis + 1 :]
    return mm(f"n{left},n{right}->n{left[axis]}z", x, jnp.conj(x))


def apply_on_axis(x: jax.Array, matrix: jax.Array, axis: int) -> jax.Array:
    """Each block of `x` `(n, *blocks)` times `matrix` `(n, b, b)` along `axis`."""
    k = x.ndim - 1
    dims = _AXES[:k]
    out = dims[:axis] + "z" + dims[axis + 1 :]
    return mm(f"n{dims[axis]}z,n{dims}->n{out}", matrix, x)


def merged_shape(shape: tuple[int, ...], max_dim: int) -> tuple[int, ...]:
    """`shape` with runs of adjacent axes merged while their product <= `max_dim`.

    Axes of size 1 disappear (all ones: `(1,)`); a scalar gives `()`. This
    is how distributed Shampoo's `merge_small_dims` lays out a tensor (for
    example `(3, 3, 64, 128)` becomes `(576, 128)` and `(32, 64)` the
    vector `(2048,)` with `max_dim = 4096`).
    """
    if shape and all(d == 1 for d in shape):
        return (1,)
    merged, product = [], 1
    for d in shape:
        if product * d <= max_dim:
            product *= d
            continue
        if product > 1:
            merged.append(product)
        product = d
    if product > 1:
        merged.append(product)
    return tuple(merged)


def _side(n, block_size, max_dim) -> int:
    """A side's factor size: 0 (no factor) for 1 or beyond `max_dim`."""
    return 0 if not 1 < n <= max_dim else min(n, block_size)


def _reshaped_plan(shape, merged, block_size, max_dim, vector) -> Plan:
    """A plan for a leaf viewed as the vector or matrix `merged` (rank <= 2)."""

    def side(n):
        return _side(n, block_size, max_dim)

    if len(merged) == 2:
        rows, cols = merged
        return Plan(
            lambda x: x.reshape(rows, cols),
            lambda y: y.reshape(shape),
            (),
            rows,
            cols,
            side(rows),
            side(cols),
        )
    n = merged[0] if len(merged) == 1 else 0
    if vector and side(n):
        # a vector is an (n, 1) matrix with a row factor only
        return Plan(
            lambda x: x.reshape(n, 1), lambda y: y.reshape(shape), (), n, 1, side(n), 0
        )
    return _UNFACTORED


def _plan(shape, dims, block_size, max_dim, vector) -> Plan:
    if dims is None:
        if len(shape) == 1:
            return _reshaped_plan(shape, shape, block_size, max_dim, vector)
        return _UNFACTORED
    view = matrix_view(shape, dims)
    ndim = len(shape)
    used = matrix_axes(dims.reduction_axis, ndim) + matrix_axes(dims.output_axis, ndim)
    batch_axes = tuple(a for a in range(ndim) if a not in used)
    rows, cols = view.fan_in, view.fan_out
    return Plan(
        view.to_matrices,
        view.from_matrices,
        batch_axes,
        rows,
        cols,
        _side(rows, block_size, max_dim),
        _side(cols, block_size, max_dim),
    )


def plans(
    spec,
    tree,
    *,
    block_size=None,
    max_dim=None,
    vector=False,
    merge_small_dims=0,
    skip_larger_than=None,
):
    """One :class:`Plan` per leaf of `tree` and the tree's definition.

    `spec` is a dimension-number spec as Muon takes it ("auto", None, one
    MuonDimensionNumbers, a tree or a function). A side longer than
    `max_dim` gets no factor; one longer than `block_size` is cut into
    blocks. With `vector`, a 1-D leaf is an `(n, 1)` matrix. With
    `merge_small_dims`, a leaf is laid out as its :func:`merged_shape`
    instead: a vector or a matrix, or a :class:`TensorPlan` for rank 3 or
    more (`max_dim` does not apply to those). A leaf with an axis longer than
    `skip_larger_than` gets no factor at all.
    """
    inf = float("inf")
    block_size, max_dim = block_size or inf, max_dim or inf
    dims = full_dimension_numbers(spec, tree, default_2d_only=True)
    # The tree's own structure: a None in it (an equinox-filtered model) is
    # no leaf, where in `dims` a None would be one (not a matrix).
    leaves, treedef = jax.tree.flatten(tree)
    flat_dims = treedef.flatten_up_to(dims)

    def plan(d, shape):
        if skip_larger_than is not None and any(n > skip_larger_than for n in shape):
            return _UNFACTORED
        if merge_small_dims:
            merged = merged_shape(shape, merge_small_dims)
            if len(merged) <= 2:
                return _reshaped_plan(shape, merged, block_size, max_dim, vector)
            sizes = tuple(int(min(n, block_size)) for n in merged)
            return TensorPlan(merged, sizes)
        return _plan(shape, d, block_size, max_dim, vector)

    out = [plan(d, tuple(x.shape)) for d, x in zip(flat_dims, leaves, strict=True)]
    return out, treedef


def n_blocks(plan: Plan) -> tuple[int, int]:
    return (-(-plan.rows // plan.left) if plan.left else 1), (
        -(-plan.cols // plan.right) if plan.right else 1
    )


def _reshape(x: jax.Array, shape: tuple[int, ...], batch: int) -> jax.Array:
    """Reshape the axes after the first `batch`, which keep their sharding."""
    sharding = explicit_sharding(x)
    if sharding is None:
        return x.reshape(shape)
    spec = tuple(sharding.spec)[:batch]
    return jnp.reshape(
        x, shape, out_sharding=P(*spec, *[None] * (len(shape) - len(spec)))
    )


def to_blocks(x: jax.Array, plan: Plan) -> jax.Array:
    """`(*batch, rows, cols)` to `(*batch, nr, nc, br, bc)`, zero-padded.

    Unchanged when the matrix is one block.
    """
    nr, nc = n_blocks(plan)
    if (nr, nc) == (1, 1):
        return x
    br, bc = plan.left or plan.rows, plan.right or plan.cols
    pad = [(0, 0)] * (x.ndim - 2) + [(0, nr * br - plan.rows), (0, nc * bc - plan.cols)]
    x = _reshape(jnp.pad(x, pad), (*x.shape[:-2], nr, br, nc, bc), x.ndim - 2)
    return jnp.moveaxis(x, -3, -2)


def from_blocks(y: jax.Array, plan: Plan) -> jax.Array:
    """The inverse of :func:`to_blocks`."""
    nr, nc = n_blocks(plan)
    if (nr, nc) == (1, 1):
        return y
    y = jnp.moveaxis(y, -2, -3)
    y = _reshape(y, (*y.shape[:-4], nr * y.shape[-3], -1), y.ndim - 4)
    return y[..., : plan.rows, : plan.cols]


def _kept_spec(
    x: Any, sharding: jax.sharding.NamedSharding, plan: Plan
) -> tuple[Any, ...]:
    """`x`'s partition spec with only its batch axes kept (sharded)."""
    spec = tuple(sharding.spec) + (None,) * (x.ndim - len(sharding.spec))
    return tuple(s if a in plan.batch_axes else None for a, s in enumerate(spec))


def gather(x: jax.Array, plan: Plan) -> tuple[jax.Array, Any]:
    """`x` with its matrix axes unsharded (Explicit axes), and its sharding.

    Batch axes keep their sharding, so no device sees another's matrices.
    """
    sharding = explicit_sharding(x)
    if sharding is None or not plan.factored:
        return x, None
    kept = _kept_spec(x, sharding, plan)
    if kept == tuple(sharding.spec):
        return x, None
    return reshard(x, P(*kept)), sharding


def ungather(x: jax.Array, sharding: Any) -> jax.Array:
    """Give `x` back the sharding :func:`gather` took away."""
    return restore(x, sharding)


def factor_zeros(param: Any, plan: Plan, size: int, dtype: Any = None) -> jax.Array:
    """Zeros `(*batch, [nr, nc,] size, size)` sharded like `param`'s batch."""
    batch = tuple(param.shape[a] for a in plan.batch_axes)
    blocks = n_blocks(plan)
    shape = batch + (blocks if blocks != (1, 1) else ()) + (size, size)
    dtype = dtype or work_dtype(param.dtype)
    sharding = explicit_sharding(param)
    if sharding is None:
        return jnp.zeros(shape, dtype)
    kept = _kept_spec(param, sharding, plan)
    spec = tuple(kept[a] for a in plan.batch_axes)
    spec += (None,) * (len(shape) - len(spec))
    mesh = sharding.mesh
    return jnp.zeros(shape, dtype, out_sharding=jax.NamedSharding(mesh, P(*spec)))


def factor_tree(plans: list[Plan | TensorPlan], treedef: Any, params: Any) -> Any:
    """Zero factor matrices `(left, right)` for each factored leaf, else None.

    A side that is not preconditioned (too long, or a vector's) holds None.
    """

    def factors(plan, p):
        if not plan.factored:
            return None
        if isinstance(plan, TensorPlan):
            n = math.prod(plan.counts())
            dtype = work_dtype(p.dtype)
            return tuple(jnp.zeros((n, b, b), dtype) for b in plan.blocks)
        return tuple(
            factor_zeros(p, plan, n) if n else None for n in (plan.left, plan.right)
        )

    leaves = treedef.flatten_up_to(params)
    return jax.tree.unflatten(
        treedef, [factors(s, p) for s, p in zip(plans, leaves, strict=True)]
    )


def mm(spec: str, *arrays: jax.Array) -> jax.Array:
    return jnp.einsum(spec, *arrays, precision=jax.lax.Precision.HIGHEST)


def gram(x: jax.Array, side: str) -> jax.Array:
    """`X X^H` (side "left") or `X^H X` ("right") of each matrix."""
    if side == "left":
        return mm("...ik,...jk->...ij", x, jnp.conj(x))
    return mm("...ki,...kj->...ij", jnp.conj(x), x)


def inverse_root(stat: jax.Array, exponent: float, epsilon: Any) -> jax.Array:
    """`(S + epsilon * lambda_max I)^(-1/exponent)` of Hermitian PSD `S`.

    Eigenvalues below `eigh`'s resolution (`n * eps(dtype) * lambda_max`)
    are taken as zero, so the damping, not rounding, sets the scale of a
    rank-deficient `S` in its null space. All of them then get the same
    factor, so the result does not depend on the basis `eigh` picks for
    that space. With no damping (`epsilon == 0`) the factor there is 0
    (the pseudo-inverse root) rather than `0 ** (-1/exponent) = inf`.
    """
    w, v = jnp.linalg.eigh(stat)
    top = jnp.maximum(w[..., -1:], 1e-16)
    resolution = stat.shape[-1] * jnp.finfo(w.dtype).eps
    w = jnp.where(w > resolution * top, w, 0)
    damped = w + epsilon * top
    positive = damped > 0
    root = jnp.where(positive, damped, 1) ** (-1.0 / exponent)
    scale = jnp.where(positive, root, 0).astype(v.dtype)
    return mm("...ij,...j,...kj->...ik", v, scale, jnp.conj(v))


def eigenbasis(stat: jax.Array) -> jax.Array:
    """Eigenvectors of Hermitian `S` as columns, largest eigenvalue first."""
    return jnp.linalg.eigh(stat)[1][..., ::-1]


def _qr(a: jax.Array) -> jax.Array:
    sharding = explicit_sharding(a)
    if sharding is None or all(s is None for s in sharding.spec):
        return jnp.linalg.qr(a)[0]
    # QR of a batch sharded along Explicit axes trips a sharding rule inside
    # JAX's QR; each device factors its own matrices instead.
    spec = sharding.spec
    local = shard_map(
        lambda m: jnp.linalg.qr(m)[0],
        mesh=sharding.mesh,
        in_specs=spec,
        out_specs=spec,
    )
    return local(a)


def refresh_basis(stat: jax.Array, q: jax.Array) -> tuple[jax.Array, jax.Array]:
    """One power iteration and QR from `q`, columns by estimated eigenvalue.

    Returns the new basis and the order (descending `diag(Q^H S Q)`) that
    was applied to the old columns.
    """
    estimate = jnp.real(mm("...ij,...ik,...kj->...j", jnp.conj(q), stat, q))
    order = jnp.argsort(estimate, axis=-1, descending=True)
    q = jnp.take_along_axis(q, order[..., None, :], axis=-1)
    return _qr(mm("...ij,...jk->...ik", stat, q)), order


def rotate(x: jax.Array, left: Any, right: Any, *, back: bool = False) -> jax.Array:
    """`Q_L^H X Q_R` (or, with `back`, `Q_L X Q_R^H`); None is identity."""
    if left is not None:
        if back:
            x = mm("...ij,...jk->...ik", left, x)
        else:
            x = mm("...ij,...ik->...jk", jnp.conj(left), x)
    if right is not None:
        if back:
            x = mm("...ik,...jk->...ij", x, jnp.conj(right))
        else:
            x = mm("...ij,...jk->...ik", x, right)
    return x
