"""Dtypes and constructors: `cast`, `dtype`, `zeros_like`, `random_like`, ..."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeGuard, TypeVar

import jax
import jax.numpy as jnp

if TYPE_CHECKING:
    from .._core.storage import StorageSpec

T = TypeVar("T")


def _is_storage_spec(dtype: Any) -> TypeGuard[StorageSpec]:
    """Whether `dtype` is a storage spec such as `int8_blockwise`.

    Imported when asked, not at module import: `gradax.tree` loads on its
    own (tests load the file alone to check it creates no device arrays).
    """
    if dtype is None:
        return False
    from .._core.storage import is_storage_spec

    return is_storage_spec(dtype)


# ---------------------------------------------------------------------------
# Dtypes and constructors.
# ---------------------------------------------------------------------------


def cast(tree: Any, dtype: Any | None) -> Any:
    """Casts every leaf of `tree` to `dtype`.

    Args:
        tree: pytree of arrays.
        dtype: target dtype; `None` returns `tree` unchanged. A storage
            spec such as :class:`gradax.int8_blockwise` gives each leaf's
            values as that storage holds them (quantized and loaded again,
            float32).

    Returns:
        The cast tree.
    """
    if dtype is None:
        return tree
    if _is_storage_spec(dtype):
        return jax.tree.map(lambda x: dtype.round_trip(x), tree)
    return jax.tree.map(lambda x: _astype(x, dtype), tree)


def _astype(x: Any, dtype: Any) -> Any:
    return x.astype(dtype) if hasattr(x, "astype") else jnp.asarray(x, dtype)


def cast_like(tree: T, other_tree: Any) -> T:
    """Casts each leaf of `tree` to the dtype of the same leaf of `other_tree`.

    Leaves of `other_tree` without a `dtype` leave theirs unchanged.

    Args:
        tree: pytree to cast.
        other_tree: pytree of the same structure giving the dtypes.

    Returns:
        The cast tree.
    """
    return jax.tree.map(
        lambda x, o: _astype(x, o.dtype) if hasattr(o, "dtype") else x,
        tree,
        other_tree,
    )


def _lower(a: Any, b: Any) -> Any:
    promoted = jnp.promote_types(a, b)
    if promoted == a:
        return b
    if promoted == b:
        return a
    raise ValueError(f"Cannot order dtypes {a} and {b}: neither promotes to the other.")


def _higher(a: Any, b: Any) -> Any:
    return b if _lower(a, b) == a else a


def dtype(tree: Any, mixed_dtype_handler: str | None = None) -> Any:
    """Returns the dtype of the leaves of `tree`.

    Args:
        tree: pytree of arrays.
        mixed_dtype_handler: what to do when the leaves differ: `None` raises,
            `"promote"` returns their promoted dtype, `"highest"` and
            `"lowest"` the highest and lowest of them in the promotion order
            (a ValueError if two of them are not ordered).

    Returns:
        A dtype; JAX's default float dtype for a tree without leaves.

    Raises:
        ValueError: on mixed dtypes with `mixed_dtype_handler=None`, on
            unordered dtypes with `"highest"`/`"lowest"`, or on an unknown
            handler.

    Example:
        >>> dtype({"a": jnp.ones(2, jnp.float16), "b": jnp.ones(3)}, "highest")
        dtype('float32')
    """
    with_paths = jax.tree_util.tree_leaves_with_path(tree)
    if not with_paths:
        return jax.dtypes.canonicalize_dtype(float)
    dtypes = [jnp.asarray(leaf).dtype for _, leaf in with_paths]
    if mixed_dtype_handler is None:
        errors = [
            f"Expected dtype={dtypes[0]} for {jax.tree_util.keystr(path)} but got {d}."
            for (path, _), d in zip(with_paths, dtypes, strict=True)
            if d != dtypes[0]
        ]
        if errors:
            raise ValueError("\n".join(errors))
        return dtypes[0]
    reducers = {"promote": jnp.promote_types, "highest": _higher, "lowest": _lower}
    if mixed_dtype_handler not in reducers:
        raise ValueError(
            f"mixed_dtype_handler={mixed_dtype_handler!r} is invalid; use None, "
            "'promote', 'highest' or 'lowest'."
        )
    result = dtypes[0]
    for d in dtypes[1:]:
        result = reducers[mixed_dtype_handler](result, d)
    return result


def zeros_like(tree: Any, dtype: Any | None = None) -> Any:
    """Returns a tree of zeros shaped like `tree`.

    Args:
        tree: pytree of arrays.
        dtype: optional dtype of the zeros; by default each leaf's. A storage
            spec such as :class:`gradax.int8_blockwise` gives
            :class:`gradax.QuantizedArray` leaves (plain float32 zeros for
            leaves smaller than a block, signed map); an optimizer's
            `update` reads and writes them as float32 arrays.

    Returns:
        A tree of the same structure.
    """
    if _is_storage_spec(dtype):
        return jax.tree.map(lambda x: dtype.zeros_like(x), tree)
    return jax.tree.map(lambda x: jnp.zeros_like(x, dtype=dtype), tree)


def ones_like(tree: Any, dtype: Any | None = None) -> Any:
    """Returns a tree of ones shaped like `tree`.

    Args:
        tree: pytree of arrays.
        dtype: optional dtype of the ones; by default each leaf's.

    Returns:
        A tree of the same structure.
    """
    return jax.tree.map(lambda x: jnp.ones_like(x, dtype=dtype), tree)


def full_like(tree: Any, fill_value: Any, dtype: Any | None = None) -> Any:
    """Returns a tree shaped like `tree` filled with `fill_value`.

    Args:
        tree: pytree of arrays.
        fill_value: the value of every element.
        dtype: optional dtype; by default each leaf's.

    Returns:
        A tree of the same structure.
    """
    return jax.tree.map(lambda x: jnp.full_like(x, fill_value, dtype=dtype), tree)


def split_key_like(rng_key: Any, target_tree: Any) -> Any:
    """Splits `rng_key` into one key per leaf of `target_tree`.

    Args:
        rng_key: a PRNG key.
        target_tree: pytree whose structure the keys take.

    Returns:
        A tree of keys with the structure of `target_tree`.
    """
    treedef = jax.tree.structure(target_tree)
    keys = jax.random.split(rng_key, treedef.num_leaves)
    return jax.tree.unflatten(treedef, list(keys))


def random_like(
    rng_key: Any,
    target_tree: Any,
    sampler: Callable[..., Any] = jax.random.normal,
    dtype: Any | None = None,
) -> Any:
    """Returns a random tree with the shapes (and shardings) of `target_tree`.

    Args:
        rng_key: a PRNG key; each leaf gets its own split of it.
        target_tree: pytree of arrays.
        sampler: called as `sampler(key, shape, dtype)`, with
            `out_sharding=` the leaf's sharding when it accepts that argument.
        dtype: dtype passed to `sampler`; by default each leaf's.

    Returns:
        A tree of the same structure with samples from `sampler`.

    Example:
        >>> noise = random_like(jax.random.key(0), {"w": jnp.zeros((2, 3))})
        >>> noise["w"].shape
        (2, 3)
    """
    keys = split_key_like(rng_key, target_tree)
    takes_sharding = "out_sharding" in inspect.signature(sampler).parameters

    def sample(leaf: Any, key: Any) -> Any:
        leaf_dtype = dtype or leaf.dtype
        if takes_sharding:
            sharding = jax.typeof(leaf).sharding
            return sampler(key, leaf.shape, leaf_dtype, out_sharding=sharding)
        return sampler(key, leaf.shape, leaf_dtype)

    return jax.tree.map(sample, target_tree, keys)


def unwrap_random_key_data(input_tree: Any) -> Any:
    """Replaces typed PRNG keys in a tree by their raw key data.

    Args:
        input_tree: pytree that may hold `jax.random.key` arrays.

    Returns:
        The tree with key arrays replaced by `jax.random.key_data` of them,
        other leaves unchanged (useful to compare states numerically).
    """

    def unwrap(x: Any) -> Any:
        if isinstance(x, jax.Array) and jax.dtypes.issubdtype(
            x.dtype, jax.dtypes.prng_key
        ):
            return jax.random.key_data(x)
        return x

    return jax.tree.map(unwrap, input_tree)
