"""Weights seen as batches of matrices: dimension numbers and matrix views.

Muon (`gradax.orthogonal`) and the Kronecker-factored preconditioners
(`gradax.optimizers`: Shampoo, SOAP) both treat a weight as a batch of
`(fan_in, fan_out)` matrices. How a weight maps to its matrices lives here,
below both packages, so neither imports the other for it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import numpy as np

from .._core.pytree import is_tree_function


class MuonDimensionNumbers(NamedTuple):
    """The reduction (fan-in) and output (fan-out) axes of a weight.

    For `y = x @ W` the reduction axis is 0 and the output axis 1 (the
    default). Every other axis is a batch axis: each slice along it is its own
    matrix (stacked layers from `scan`). Several reduction axes are
    flattened together (a conv kernel `(h, w, c_in, c_out)` has reduction
    axes `(0, 1, 2)` and output axis 3).
    """

    reduction_axis: Any = 0
    output_axis: Any = 1


class MuonSplit(NamedTuple):
    """Dimension numbers that also cut the matrix into separate blocks.

    For the Muon family (`muon`, `normuon`, `adamuon`): each block is
    orthogonalized (and shape-scaled) as a matrix of its own, as
    microsoft/dion's `num_heads` and `split_sizes` do. `num_heads=H`
    cuts `split_axis` into H equal blocks: a `(d, H * dh)` attention
    kernel is H `(d, dh)` matrices. `split_sizes=(dq, dk, dv)` cuts it
    into blocks of those sizes: a fused `[q | k | v]` kernel. Blocks of one
    size are one batched Newton–Schulz call. `split_axis` is one of the
    matrix axes (None: the output axis, which must then be a single axis).
    `reduction_axis` and `output_axis` are as in
    :class:`MuonDimensionNumbers`; other axes stay batch axes (stacked
    layers). Give `num_heads` or `split_sizes`; other optimizers (dion,
    dion2, Shampoo, SOAP) refuse a split.

    Example:
      >>> import gradax
      >>> qkv = gradax.MuonSplit(1, 2, split_sizes=(64, 16, 16))  # (L, d, 96)
      >>> heads = gradax.MuonSplit(num_heads=4)  # (d, 4 * dh)
    """

    reduction_axis: Any = 0
    output_axis: Any = 1
    num_heads: int | None = None
    split_sizes: tuple[int, ...] | None = None
    split_axis: int | None = None


def is_dimension_numbers(x: Any) -> bool:
    """Whether `x` is a :class:`MuonDimensionNumbers` (or a :class:`MuonSplit`)."""
    return isinstance(x, (MuonDimensionNumbers, MuonSplit))


def has_split(dims: Any) -> bool:
    """Whether dimension numbers cut the matrix into blocks (heads, fused QKV)."""
    return isinstance(dims, MuonSplit) and (
        dims.num_heads is not None or dims.split_sizes is not None
    )


def is_routing_function(spec: Any) -> bool:
    """Whether a routing spec is a function of the params (not a tree)."""
    return not is_dimension_numbers(spec) and is_tree_function(spec)


def is_spec_leaf(x: Any) -> bool:
    """Stop at dimension numbers (and None) when mapping over a spec tree."""
    return x is None or is_dimension_numbers(x)


def matrix_axes(value: Any, ndim: int) -> tuple[int, ...]:
    """One or several axes (as in :class:`MuonDimensionNumbers`), non-negative."""
    values = (value,) if isinstance(value, int) else tuple(value)
    return tuple(v % ndim for v in values)


class MatrixView(NamedTuple):
    """How one weight maps to a batch of (fan_in, fan_out) matrices."""

    to_matrices: Callable[[jax.Array], jax.Array]
    from_matrices: Callable[[jax.Array], jax.Array]
    fan_in: int
    fan_out: int


def matrix_view(shape: tuple[int, ...], dims: MuonDimensionNumbers) -> MatrixView:
    """Reshape functions between a weight and its `(batch, fan_in, fan_out)`."""
    if has_split(dims):
        raise ValueError(
            f"dimension numbers {dims} split the matrix into blocks (num_heads or "
            "split_sizes), which only muon, normuon and adamuon do; this "
            "optimizer takes whole matrices: use MuonDimensionNumbers"
        )
    ndim = len(shape)
    if ndim < 2:
        raise ValueError(f"Muon needs weights of rank >= 2, got shape {shape}")
    reduction = matrix_axes(dims.reduction_axis, ndim)
    output = matrix_axes(dims.output_axis, ndim)
    if set(reduction) & set(output) or not reduction or not output:
        raise ValueError(
            f"dimension numbers {dims} need disjoint, non-empty reduction and "
            f"output axes for shape {shape}"
        )
    batch = tuple(a for a in range(ndim) if a not in reduction + output)
    order = batch + reduction + output
    inverse = tuple(sorted(range(ndim), key=order.__getitem__))
    fan_in = math.prod(shape[a] for a in reduction)
    fan_out = math.prod(shape[a] for a in output)
    batch_shape = tuple(shape[a] for a in batch)
    permuted = tuple(shape[a] for a in order)

    def to_matrices(x):
        return x.transpose(order).reshape((*batch_shape, fan_in, fan_out))

    def from_matrices(x):
        return x.reshape(permuted).transpose(inverse)

    return MatrixView(to_matrices, from_matrices, fan_in, fan_out)


def default_dimension_numbers(tree: Any, *, auto: bool = False) -> Any:
    """One entry per leaf: dimension numbers for matrices, None otherwise.

    With `auto=False` (optax's rule) only 2-D leaves are matrices. With
    `auto=True`, a 3-D leaf `(L, m, n)` is L stacked matrices and a 4-D
    leaf is a conv kernel `(h, w, c_in, c_out)` flattened to
    `(h w c_in, c_out)`.
    """

    def rule(x):
        if x.ndim == 2:
            return MuonDimensionNumbers(0, 1)
        if auto and x.ndim == 3:
            return MuonDimensionNumbers(1, 2)
        if auto and x.ndim == 4:
            return MuonDimensionNumbers((0, 1, 2), 3)
        return None

    return jax.tree.map(rule, tree)


def _is_value_wrapper(x: Any) -> bool:
    """Whether `x` is a flax variable: a node whose one child is `.value`."""
    if not type(x).__module__.startswith("flax."):
        return False
    children = jax.tree_util.tree_flatten_with_path(x, is_leaf=lambda y: y is not x)
    keys = [path for path, _ in children[0]]
    return keys == [(jax.tree_util.GetAttrKey("value"),)]


def without_variables(spec: Any) -> Any:
    """A spec tree with each flax variable (`nnx.Param`) replaced by its value.

    `nnx.Optimizer` gives `init` the `nnx.Param` variables and
    `update` their arrays; a spec built from the variables, stripped of
    them, is a prefix of both trees.
    """

    def unwrap(x):
        if not _is_value_wrapper(x):
            return x
        leaves = jax.tree_util.tree_flatten(x, is_leaf=lambda y: y is not x)[0]
        return leaves[0]

    return jax.tree.map(
        unwrap, spec, is_leaf=lambda x: is_spec_leaf(x) or _is_value_wrapper(x)
    )


def full_dimension_numbers(spec: Any, tree: Any, *, default_2d_only: bool) -> Any:
    """Expand a dimension-number spec to one entry per leaf of `tree`.

    `spec` is None (the default rule), "auto", one MuonDimensionNumbers for
    every leaf, a tree of them (a prefix of `tree`; None marks a leaf that is
    not a matrix; flax `nnx.Param` variables in it stand for their values),
    or a function of `tree` returning one of these.
    """
    dims = _spec_per_leaf(spec, tree, default_2d_only)
    # A leaf with no elements has nothing to orthogonalize or precondition
    # (and a 0-sided matrix has no shape scale): it is not a matrix. Looked
    # for in one pass over the shapes first: this runs at every update.
    sides = {n for x in jax.tree.leaves(tree) for n in np.shape(x)}
    if 0 not in sides:
        return dims
    return jax.tree.map(lambda x, d: None if 0 in np.shape(x) else d, tree, dims)


def _spec_per_leaf(spec: Any, tree: Any, default_2d_only: bool) -> Any:
    if is_routing_function(spec):
        spec = spec(tree)
    if spec is None:
        if default_2d_only:
            return default_dimension_numbers(tree)
        return jax.tree.map(lambda _: MuonDimensionNumbers(), tree)
    if isinstance(spec, str):
        if spec != "auto":
            raise ValueError(f"weight dimension numbers must be 'auto', got {spec!r}")
        return default_dimension_numbers(tree, auto=True)
    if is_dimension_numbers(spec):
        return jax.tree.map(lambda _: spec, tree)
    # A masked-out part (an empty node, such as gradax.MaskedNode) has no
    # leaves, so it maps to itself.
    spec = without_variables(spec)
    return jax.tree.map(
        lambda d, sub: jax.tree.map(lambda _: d, sub),
        spec,
        tree,
        # An empty node stands for the part below it, whatever wraps it there
        # (a flax variable around a MaskedNode).
        is_leaf=lambda x: is_spec_leaf(x) or (isinstance(x, tuple) and not x),
    )
