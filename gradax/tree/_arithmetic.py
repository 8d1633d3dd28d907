"""Leafwise arithmetic and reductions: `add`, `scale`, `vdot`, `norm`, ..."""

from __future__ import annotations

import builtins
import math
import operator
from typing import Any

import jax
import jax.numpy as jnp

from .._compat import are_all_axes_explicit, tensordot, tree_reduce_associative

# ---------------------------------------------------------------------------
# Arithmetic.
# ---------------------------------------------------------------------------


def add(tree_x: Any, tree_y: Any, *other_trees: Any) -> Any:
    """Adds two or more pytrees leaf by leaf.

    Args:
        tree_x: first pytree.
        tree_y: second pytree, same structure.
        *other_trees: more pytrees to add.

    Returns:
        The sum, a pytree of the same structure.

    Example:
        >>> add({"a": 1.0}, {"a": 2.0}, {"a": 3.0})
        {'a': 6.0}
    """
    return jax.tree.map(lambda *xs: builtins.sum(xs), tree_x, tree_y, *other_trees)


def sub(tree_x: Any, tree_y: Any) -> Any:
    """Subtracts `tree_y` from `tree_x` leaf by leaf.

    Args:
        tree_x: first pytree.
        tree_y: second pytree, same structure.

    Returns:
        `tree_x - tree_y`.
    """
    return jax.tree.map(operator.sub, tree_x, tree_y)


def mul(tree_x: Any, tree_y: Any) -> Any:
    """Multiplies two pytrees leaf by leaf.

    Args:
        tree_x: first pytree.
        tree_y: second pytree, same structure.

    Returns:
        `tree_x * tree_y`.
    """
    return jax.tree.map(operator.mul, tree_x, tree_y)


def div(tree_x: Any, tree_y: Any) -> Any:
    """Divides `tree_x` by `tree_y` leaf by leaf.

    Args:
        tree_x: first pytree.
        tree_y: second pytree, same structure.

    Returns:
        `tree_x / tree_y`.
    """
    return jax.tree.map(operator.truediv, tree_x, tree_y)


def scale(scalar: Any, tree: Any) -> Any:
    """Multiplies every leaf of `tree` by `scalar`.

    Args:
        scalar: a scalar.
        tree: pytree.

    Returns:
        `scalar * tree`.
    """
    return jax.tree.map(lambda x: scalar * x, tree)


def add_scale(tree_x: Any, scalar: Any, tree_y: Any) -> Any:
    """Returns `tree_x + scalar * tree_y`, leaf by leaf.

    A `None` leaf in `tree_x` stays `None` whatever `tree_y` holds there.

    Args:
        tree_x: first pytree.
        scalar: a scalar.
        tree_y: second pytree, same structure.

    Returns:
        A pytree of the structure of `tree_x`.
    """
    scalar = jnp.asarray(scalar)
    return jax.tree.map(
        lambda x, y: None if x is None else x + scalar * y,
        tree_x,
        tree_y,
        is_leaf=lambda x: x is None,
    )


# One compiled program, as jnp.vdot (which optax calls on this JAX version) is:
# run op by op, XLA would compute the conjugate apart from the product and the
# complex result could differ from optax's in the last bit.
@jax.jit
def _vdot_leaf(a: Any, b: Any) -> jax.Array:
    a, b = jnp.asarray(a), jnp.asarray(b)
    if a.shape != b.shape:
        raise ValueError(f"vdot needs equal shapes, got {a.shape} and {b.shape}.")
    if jnp.iscomplexobj(a):
        a = jnp.conj(a)
    # Contract every axis directly (no reshape, which would fight sharding); the
    # scalar result is replicated on an explicitly sharded mesh.
    mesh = jax.typeof(a).sharding.mesh
    out_sharding = None
    if not mesh.empty and are_all_axes_explicit(mesh):
        out_sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    return tensordot(
        a,
        b,
        axes=a.ndim,
        precision=jax.lax.Precision.HIGHEST,
        out_sharding=out_sharding,
    )


def vdot(tree_x: Any, tree_y: Any) -> Any:
    """Returns the inner product `sum(conj(x) * y)` over all leaves.

    Args:
        tree_x: first pytree (conjugated when complex).
        tree_y: second pytree, same structure and shapes.

    Returns:
        A scalar, computed at the highest matmul precision.

    Example:
        >>> vdot({"a": jnp.array([1.0, 2.0])}, {"a": jnp.array([3.0, 4.0])})
        Array(11., dtype=float32)
    """
    return _reduce_add(jax.tree.leaves(jax.tree.map(_vdot_leaf, tree_x, tree_y)))


def _reduce_add(values: list[Any]) -> Any:
    total = 0
    for value in values:
        total = total + value
    return total


def sum(tree: Any, associative_reduction: bool = False) -> Any:
    """Returns the sum of all elements of all leaves.

    Args:
        tree: pytree.
        associative_reduction: add the per-leaf sums as a balanced tree
            (:func:`jax.tree.reduce_associative`), which can compile faster for
            large trees; floating-point results may differ in the last bits.

    Returns:
        A scalar; `0` for a tree without leaves.
    """
    sums = jax.tree.map(jnp.sum, tree)
    if associative_reduction:
        return tree_reduce_associative(operator.add, sums, identity=0)
    return _reduce_add(jax.tree.leaves(sums))


def _reduce_extreme(tree: Any, leaf_fn: Any, pair_fn: Any, start: float) -> Any:
    result = start
    for leaf in jax.tree.leaves(tree):
        if jnp.size(leaf) != 0:
            result = pair_fn(result, leaf_fn(leaf))
    return result


def max(tree: Any) -> Any:
    """Returns the largest element over all leaves (`-inf` if there is none).

    Args:
        tree: pytree.

    Returns:
        A scalar.
    """
    return _reduce_extreme(tree, jnp.max, jnp.maximum, -math.inf)


def min(tree: Any) -> Any:
    """Returns the smallest element over all leaves (`inf` if there is none).

    Args:
        tree: pytree.

    Returns:
        A scalar.
    """
    return _reduce_extreme(tree, jnp.min, jnp.minimum, math.inf)


def _abs_sq(x: Any) -> Any:
    """`|x|**2` for real or complex `x`, in the real dtype of `x`.

    Not `gradax._core.numerics.abs_sq`: for complex `x` this is optax's formula
    for `tree.norm`, `re**2 + im**2`, which eager XLA rounds differently
    from `(conj(x) * x).real` in the last bit; norms keep optax's numbers.
    """
    if jnp.iscomplexobj(x):
        return jnp.square(jnp.real(x)) + jnp.square(jnp.imag(x))
    return jnp.square(x)


def norm(tree: Any, ord: int | str | float | None = None, squared: bool = False) -> Any:
    """Returns the vector norm of all elements of `tree`, flattened together.

    Complex elements count by their modulus.

    Args:
        tree: pytree.
        ord: `None` or `2` (Euclidean), `1`, or `inf` (also `"inf"` or
            `"infinity"`).
        squared: return the square of the norm.

    Returns:
        A scalar array.

    Raises:
        ValueError: for any other `ord`.

    Example:
        >>> norm({"a": jnp.array([3.0]), "b": jnp.array([4.0])})
        Array(5., dtype=float32)
    """
    if ord is None or ord == 2:
        sq = sum(jax.tree.map(_abs_sq, tree))
        return jnp.asarray(sq if squared else jnp.sqrt(sq))
    if ord == 1:
        result = sum(jax.tree.map(jnp.abs, tree))
    elif ord == math.inf or ord in ("inf", "infinity"):
        result = max(jax.tree.map(jnp.abs, tree))
    else:
        raise ValueError(f"Unsupported ord={ord!r}; use None, 1, 2 or inf.")
    return jnp.asarray(_abs_sq(result) if squared else result)


def clip(tree: Any, min_value: Any | None = None, max_value: Any | None = None) -> Any:
    """Clips every element of `tree` to `[min_value, max_value]`.

    Args:
        tree: pytree.
        min_value: lower bound, or `None` for none.
        max_value: upper bound, or `None` for none.

    Returns:
        A pytree of the same structure.
    """
    return jax.tree.map(lambda x: jnp.clip(x, min_value, max_value), tree)


def where(condition: Any, tree_x: Any, tree_y: Any) -> Any:
    """Selects `tree_x` where `condition` holds and `tree_y` elsewhere.

    Args:
        condition: boolean (scalar or broadcastable to every leaf).
        tree_x: pytree taken where `condition` is true.
        tree_y: pytree taken where it is false, same structure.

    Returns:
        A pytree of the same structure.
    """
    return jax.tree.map(lambda x, y: jnp.where(condition, x, y), tree_x, tree_y)


def conj(tree: Any) -> Any:
    """Returns the complex conjugate of every leaf.

    Args:
        tree: pytree.

    Returns:
        A pytree of the same structure.
    """
    return jax.tree.map(jnp.conj, tree)


def real(tree: Any) -> Any:
    """Returns the real part of every leaf.

    Args:
        tree: pytree.

    Returns:
        A pytree of the same structure.
    """
    return jax.tree.map(jnp.real, tree)


def size(tree: Any) -> int:
    """Returns the total number of elements in the leaves of `tree`.

    Args:
        tree: pytree.

    Returns:
        A Python int.
    """
    return builtins.sum(jnp.size(leaf) for leaf in jax.tree.leaves(tree))


def batch_shape(tree: Any, shape: tuple[int, ...] = ()) -> Any:
    """Broadcasts every leaf to leading batch dimensions `shape`.

    Args:
        tree: pytree.
        shape: the batch dimensions to put in front of each leaf's shape.

    Returns:
        A pytree whose leaves have shape `(*shape, *leaf.shape)`.
    """
    return jax.tree.map(lambda x: jnp.broadcast_to(x, (*shape, *jnp.shape(x))), tree)


def allclose(
    a: Any, b: Any, rtol: Any = 1e-05, atol: Any = 1e-08, equal_nan: bool = False
) -> Any:
    """Tells whether two pytrees are equal within tolerance, leaf by leaf.

    Args:
        a: first pytree.
        b: second pytree, same structure.
        rtol: relative tolerance, as in :func:`jax.numpy.allclose`.
        atol: absolute tolerance.
        equal_nan: count NaNs in the same places as equal.

    Returns:
        A boolean scalar (`True` for trees without leaves).
    """
    close = jax.tree.map(
        lambda x, y: jnp.allclose(x, y, rtol=rtol, atol=atol, equal_nan=equal_nan),
        a,
        b,
    )
    result = True
    for leaf in jax.tree.leaves(close):
        result = result & leaf
    return result
