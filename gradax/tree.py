"""Tree math and state access: the ``optax.tree`` surface, for gradax states.

Every function has the name, arguments and numbers of its ``optax.tree``
counterpart. Two groups:

- arithmetic on pytrees of arrays (``add``, ``scale``, ``norm``, ``vdot``, the
  moment updates used by optimizers, ...), mapped leaf by leaf with
  :func:`jax.tree.map`, so ``None`` is an empty subtree;
- access by name inside nested states (``get``, ``get_all_with_path``,
  ``set``): a name is a dict key, a NamedTuple field or class name, or an
  attribute of a keyed pytree node such as a registered frozen dataclass.

This module shadows the builtins ``sum``, ``max``, ``min`` and ``set``; inside it
the builtins are reached through :mod:`builtins`.
"""

from __future__ import annotations

import builtins
import dataclasses
import functools
import inspect
import math
import operator
from collections.abc import Callable
from typing import Any, TypeVar

import jax
import jax.numpy as jnp

T = TypeVar("T")

KeyPath = tuple[Any, ...]
Filtering = Callable[[KeyPath, Any], bool]

# ---------------------------------------------------------------------------
# Access by name.
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class NamedTupleKey:
    """Path entry for the field ``name`` of a NamedTuple of class ``tuple_name``.

    Paths given to ``filtering`` callables, and returned by
    :func:`get_all_with_path`, use it in place of :class:`jax.tree_util.GetAttrKey`
    for NamedTuple fields, so that equal field names in different states (for
    example ``count`` in two chained transformations) can be told apart.

    Attributes:
        tuple_name: class name of the NamedTuple.
        name: name of the field.
    """

    tuple_name: str
    name: str

    def __str__(self) -> str:
        return f"{self.tuple_name}.{self.name}"


def _is_namedtuple(node: Any) -> bool:
    return isinstance(node, tuple) and hasattr(node, "_fields")


def _children(node: Any) -> tuple[list[tuple[Any, Any]], Any] | None:
    """One level of ``node``: ``([(entry, child), ...], treedef)``; None for a leaf."""
    flat, treedef = jax.tree_util.tree_flatten_with_path(
        node, is_leaf=lambda x: x is not node
    )
    if len(flat) == 1 and flat[0][0] == () and flat[0][1] is node:
        return None
    if _is_namedtuple(node):
        name = type(node).__name__
        flat = [((NamedTupleKey(name, e.name),), c) for (e,), c in flat]
    return [(path[0], child) for path, child in flat], treedef


# Stands for "no name": positional entries and plain containers match no key.
_UNNAMED = object()


def _class_name(node: Any, children: list[tuple[Any, Any]]) -> Any:
    """Name a search can match a whole node by (NamedTuples, dataclass nodes)."""
    named = (
        _is_namedtuple(node)
        or dataclasses.is_dataclass(node)
        or any(isinstance(e, jax.tree_util.GetAttrKey) for e, _ in children)
    )
    return type(node).__name__ if named else _UNNAMED


def _entry_name(entry: Any) -> Any:
    """Name a path entry can be searched by; ``_UNNAMED`` for positional ones."""
    if isinstance(entry, jax.tree_util.DictKey):
        return entry.key
    if isinstance(entry, (jax.tree_util.GetAttrKey, NamedTupleKey)):
        return entry.name
    return _UNNAMED


def _matches(name: Any, key: Any) -> bool:
    return name is not _UNNAMED and name == key


def _find(path: KeyPath, node: Any, key: Any, found: list[tuple[KeyPath, Any]]) -> None:
    level = _children(node)
    if level is None:
        return
    children, _ = level
    if _matches(_class_name(node, children), key):
        found.append((path, node))
    for entry, child in children:
        child_path = (*path, entry)
        if _matches(_entry_name(entry), key):
            found.append((child_path, child))
        _find(child_path, child, key, found)


def get_all_with_path(
    tree: Any, key: Any, filtering: Filtering | None = None
) -> list[tuple[KeyPath, Any]]:
    """Finds every value stored under ``key`` in ``tree``, with its path.

    A value matches when it is stored under a dict key ``key``, a NamedTuple
    field ``key``, or an attribute ``key`` of a keyed pytree node (a registered
    dataclass), or when it is itself a NamedTuple or dataclass node whose class
    is named ``key``. The search goes on inside matches.

    Args:
        tree: pytree to search.
        key: name to look for.
        filtering: optional ``filtering(path, value) -> bool``; only the matches
            it accepts are kept.

    Returns:
        A list of ``(path, value)`` in depth-first order. A path is a tuple of
        JAX key entries, with :class:`NamedTupleKey` for NamedTuple fields;
        :func:`jax.tree_util.keystr` prints it.

    Example:
        >>> from typing import NamedTuple
        >>> import jax
        >>> import jax.numpy as jnp
        >>> class State(NamedTuple):
        ...     count: jnp.ndarray
        ...     hyperparams: dict
        >>> state = State(jnp.zeros([]), {"learning_rate": 0.1})
        >>> [(jax.tree_util.keystr(p), v)
        ...  for p, v in get_all_with_path(state, "learning_rate")]
        [("State.hyperparams['learning_rate']", 0.1)]
    """
    found: list[tuple[KeyPath, Any]] = []
    _find((), tree, key, found)
    if filtering is not None:
        found = [(path, value) for path, value in found if filtering(path, value)]
    return found


def get(
    tree: Any,
    key: Any,
    default: Any | None = None,
    filtering: Filtering | None = None,
) -> Any:
    """Returns the single value stored under ``key`` in ``tree``.

    Matches are those of :func:`get_all_with_path`.

    Args:
        tree: pytree to search.
        key: name to look for.
        default: returned when nothing matches.
        filtering: optional ``filtering(path, value) -> bool`` to narrow the
            matches.

    Returns:
        The matching value, or ``default`` if there is none.

    Raises:
        KeyError: if more than one value matches.

    Example:
        >>> get({"opt": {"count": 3}, "other": 1}, "count")
        3
    """
    found = get_all_with_path(tree, key, filtering)
    if len(found) > 1:
        paths = ", ".join(jax.tree_util.keystr(path) for path, _ in found)
        raise KeyError(f"Found {len(found)} values for {key!r}, at {paths}.")
    return found[0][1] if found else default


def _replace(
    path: KeyPath, node: Any, values: dict[str, Any], filtering: Filtering | None
) -> Any:
    level = _children(node)
    if level is None:
        return node
    children, treedef = level
    name = _class_name(node, children)
    if name in values and (filtering is None or filtering(path, node)):
        return values[name]
    new_children, changed = [], False
    for entry, child in children:
        child_path = (*path, entry)
        name = _entry_name(entry)
        if (
            isinstance(name, str)
            and name in values
            and (filtering is None or filtering(child_path, child))
        ):
            new_child = values[name]
        else:
            new_child = _replace(child_path, child, values, filtering)
        changed = changed or new_child is not child
        new_children.append(new_child)
    return jax.tree_util.tree_unflatten(treedef, new_children) if changed else node


def set(tree: Any, filtering: Filtering | None = None, /, **kwargs: Any) -> Any:
    """Returns a copy of ``tree`` with the values stored under some names replaced.

    Every value that :func:`get_all_with_path` finds for a name in ``kwargs``
    (and ``filtering`` accepts) is replaced; the search does not go inside a
    replaced value. Nodes are rebuilt through their pytree registration, so
    frozen dataclasses and NamedTuples keep their types and static fields.

    Args:
        tree: pytree to update.
        filtering: optional ``filtering(path, value) -> bool``; only the matches
            it accepts are replaced.
        **kwargs: names and their new values.

    Returns:
        A pytree like ``tree`` with the new values.

    Raises:
        KeyError: if a name in ``kwargs`` matches nothing (after filtering).

    Example:
        >>> set({"lr": 0.1, "opt": {"count": 3}}, count=4)
        {'lr': 0.1, 'opt': {'count': 4}}
    """
    for key in kwargs:
        if not get_all_with_path(tree, key, filtering):
            detail = " that the filtering accepts" if filtering else ""
            raise KeyError(f"Found no value for {key!r}{detail} in {tree}.")
    return _replace((), tree, kwargs, filtering)


class _ParamsPlaceholder:
    """Marks where the parameters go in a state built by ``init``."""


jax.tree_util.register_pytree_node(
    _ParamsPlaceholder, lambda _: ((), None), lambda _, __: _ParamsPlaceholder()
)


def map_params(
    initable: Any,
    f: Callable[..., Any],
    state: Any,
    /,
    *rest: Any,
    transform_non_params: Callable[..., Any] | None = None,
    is_leaf: Callable[[Any], bool] | None = None,
) -> Any:
    """Applies ``f`` to every copy of the parameter tree inside an optimizer state.

    The copies are found by calling ``init`` on a placeholder: each part of the
    state that ``init`` builds from the parameters is mapped with ``f``. A typical
    use is turning parameter sharding specs into state sharding specs.

    Args:
        initable: a transformation with an ``init`` method, or an init function.
        f: function mapped over each parameter-shaped subtree of ``state``, leaf
            by leaf, together with the matching leaves of ``rest``.
        state: the optimizer state.
        *rest: trees shaped like the parameters, passed to ``f`` as extra
            arguments.
        transform_non_params: optional function applied to every other part of
            the state; by default those parts are kept.
        is_leaf: passed to :func:`jax.tree.map` when mapping ``f``.

    Returns:
        A tree shaped like ``state``.
    """
    init = initable.init if hasattr(initable, "init") else initable
    template = init(_ParamsPlaceholder())

    def map_part(marker: Any, value: Any) -> Any:
        if isinstance(marker, _ParamsPlaceholder):
            return jax.tree.map(f, value, *rest, is_leaf=is_leaf)
        if transform_non_params is not None:
            return transform_non_params(value)
        return value

    return jax.tree.map(
        map_part,
        template,
        state,
        is_leaf=lambda x: isinstance(x, _ParamsPlaceholder),
    )


# ---------------------------------------------------------------------------
# Dtypes and constructors.
# ---------------------------------------------------------------------------


def cast(tree: Any, dtype: Any | None) -> Any:
    """Casts every leaf of ``tree`` to ``dtype``.

    Args:
        tree: pytree of arrays.
        dtype: target dtype; ``None`` returns ``tree`` unchanged.

    Returns:
        The cast tree.
    """
    if dtype is None:
        return tree
    return jax.tree.map(lambda x: _astype(x, dtype), tree)


def _astype(x: Any, dtype: Any) -> Any:
    return x.astype(dtype) if hasattr(x, "astype") else jnp.asarray(x, dtype)


def cast_like(tree: T, other_tree: Any) -> T:
    """Casts each leaf of ``tree`` to the dtype of the same leaf of ``other_tree``.

    Leaves of ``other_tree`` without a ``dtype`` leave theirs unchanged.

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
    """Returns the dtype of the leaves of ``tree``.

    Args:
        tree: pytree of arrays.
        mixed_dtype_handler: what to do when the leaves differ: ``None`` raises,
            ``"promote"`` returns their promoted dtype, ``"highest"`` and
            ``"lowest"`` the highest and lowest of them in the promotion order
            (a ValueError if two of them are not ordered).

    Returns:
        A dtype; JAX's default float dtype for a tree without leaves.

    Raises:
        ValueError: on mixed dtypes with ``mixed_dtype_handler=None``, on
            unordered dtypes with ``"highest"``/``"lowest"``, or on an unknown
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
    """Returns a tree of zeros shaped like ``tree``.

    Args:
        tree: pytree of arrays.
        dtype: optional dtype of the zeros; by default each leaf's.

    Returns:
        A tree of the same structure.
    """
    return jax.tree.map(lambda x: jnp.zeros_like(x, dtype=dtype), tree)


def ones_like(tree: Any, dtype: Any | None = None) -> Any:
    """Returns a tree of ones shaped like ``tree``.

    Args:
        tree: pytree of arrays.
        dtype: optional dtype of the ones; by default each leaf's.

    Returns:
        A tree of the same structure.
    """
    return jax.tree.map(lambda x: jnp.ones_like(x, dtype=dtype), tree)


def full_like(tree: Any, fill_value: Any, dtype: Any | None = None) -> Any:
    """Returns a tree shaped like ``tree`` filled with ``fill_value``.

    Args:
        tree: pytree of arrays.
        fill_value: the value of every element.
        dtype: optional dtype; by default each leaf's.

    Returns:
        A tree of the same structure.
    """
    return jax.tree.map(lambda x: jnp.full_like(x, fill_value, dtype=dtype), tree)


def split_key_like(rng_key: Any, target_tree: Any) -> Any:
    """Splits ``rng_key`` into one key per leaf of ``target_tree``.

    Args:
        rng_key: a PRNG key.
        target_tree: pytree whose structure the keys take.

    Returns:
        A tree of keys with the structure of ``target_tree``.
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
    """Returns a random tree with the shapes (and shardings) of ``target_tree``.

    Args:
        rng_key: a PRNG key; each leaf gets its own split of it.
        target_tree: pytree of arrays.
        sampler: called as ``sampler(key, shape, dtype)``, with
            ``out_sharding=`` the leaf's sharding when it accepts that argument.
        dtype: dtype passed to ``sampler``; by default each leaf's.

    Returns:
        A tree of the same structure with samples from ``sampler``.

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
        input_tree: pytree that may hold ``jax.random.key`` arrays.

    Returns:
        The tree with key arrays replaced by ``jax.random.key_data`` of them,
        other leaves unchanged (useful to compare states numerically).
    """

    def unwrap(x: Any) -> Any:
        if isinstance(x, jax.Array) and jax.dtypes.issubdtype(
            x.dtype, jax.dtypes.prng_key
        ):
            return jax.random.key_data(x)
        return x

    return jax.tree.map(unwrap, input_tree)


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
    """Subtracts ``tree_y`` from ``tree_x`` leaf by leaf.

    Args:
        tree_x: first pytree.
        tree_y: second pytree, same structure.

    Returns:
        ``tree_x - tree_y``.
    """
    return jax.tree.map(operator.sub, tree_x, tree_y)


def mul(tree_x: Any, tree_y: Any) -> Any:
    """Multiplies two pytrees leaf by leaf.

    Args:
        tree_x: first pytree.
        tree_y: second pytree, same structure.

    Returns:
        ``tree_x * tree_y``.
    """
    return jax.tree.map(operator.mul, tree_x, tree_y)


def div(tree_x: Any, tree_y: Any) -> Any:
    """Divides ``tree_x`` by ``tree_y`` leaf by leaf.

    Args:
        tree_x: first pytree.
        tree_y: second pytree, same structure.

    Returns:
        ``tree_x / tree_y``.
    """
    return jax.tree.map(operator.truediv, tree_x, tree_y)


def scale(scalar: Any, tree: Any) -> Any:
    """Multiplies every leaf of ``tree`` by ``scalar``.

    Args:
        scalar: a scalar.
        tree: pytree.

    Returns:
        ``scalar * tree``.
    """
    return jax.tree.map(lambda x: scalar * x, tree)


def add_scale(tree_x: Any, scalar: Any, tree_y: Any) -> Any:
    """Returns ``tree_x + scalar * tree_y``, leaf by leaf.

    A ``None`` leaf in ``tree_x`` stays ``None`` whatever ``tree_y`` holds there.

    Args:
        tree_x: first pytree.
        scalar: a scalar.
        tree_y: second pytree, same structure.

    Returns:
        A pytree of the structure of ``tree_x``.
    """
    scalar = jnp.asarray(scalar)
    return jax.tree.map(
        lambda x, y: None if x is None else x + scalar * y,
        tree_x,
        tree_y,
        is_leaf=lambda x: x is None,
    )


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
    if not mesh.empty and mesh.are_all_axes_explicit:
        out_sharding = jax.sharding.NamedSharding(mesh, jax.P())
    return jnp.tensordot(
        a,
        b,
        axes=a.ndim,
        precision=jax.lax.Precision.HIGHEST,
        out_sharding=out_sharding,
    )


def vdot(tree_x: Any, tree_y: Any) -> Any:
    """Returns the inner product ``sum(conj(x) * y)`` over all leaves.

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
        A scalar; ``0`` for a tree without leaves.
    """
    sums = jax.tree.map(jnp.sum, tree)
    if associative_reduction:
        return jax.tree.reduce_associative(operator.add, sums, identity=0)
    return _reduce_add(jax.tree.leaves(sums))


def _reduce_extreme(tree: Any, leaf_fn: Any, pair_fn: Any, start: float) -> Any:
    result = start
    for leaf in jax.tree.leaves(tree):
        if jnp.size(leaf) != 0:
            result = pair_fn(result, leaf_fn(leaf))
    return result


def max(tree: Any) -> Any:
    """Returns the largest element over all leaves (``-inf`` if there is none).

    Args:
        tree: pytree.

    Returns:
        A scalar.
    """
    return _reduce_extreme(tree, jnp.max, jnp.maximum, -math.inf)


def min(tree: Any) -> Any:
    """Returns the smallest element over all leaves (``inf`` if there is none).

    Args:
        tree: pytree.

    Returns:
        A scalar.
    """
    return _reduce_extreme(tree, jnp.min, jnp.minimum, math.inf)


def _abs_sq(x: Any) -> Any:
    """``|x|**2`` for real or complex ``x``, in the real dtype of ``x``."""
    if jnp.iscomplexobj(x):
        return jnp.square(jnp.real(x)) + jnp.square(jnp.imag(x))
    return jnp.square(x)


def norm(tree: Any, ord: int | str | float | None = None, squared: bool = False) -> Any:
    """Returns the vector norm of all elements of ``tree``, flattened together.

    Complex elements count by their modulus.

    Args:
        tree: pytree.
        ord: ``None`` or ``2`` (Euclidean), ``1``, or ``inf`` (also ``"inf"`` or
            ``"infinity"``).
        squared: return the square of the norm.

    Returns:
        A scalar array.

    Raises:
        ValueError: for any other ``ord``.

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
    """Clips every element of ``tree`` to ``[min_value, max_value]``.

    Args:
        tree: pytree.
        min_value: lower bound, or ``None`` for none.
        max_value: upper bound, or ``None`` for none.

    Returns:
        A pytree of the same structure.
    """
    return jax.tree.map(lambda x: jnp.clip(x, min_value, max_value), tree)


def where(condition: Any, tree_x: Any, tree_y: Any) -> Any:
    """Selects ``tree_x`` where ``condition`` holds and ``tree_y`` elsewhere.

    Args:
        condition: boolean (scalar or broadcastable to every leaf).
        tree_x: pytree taken where ``condition`` is true.
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
    """Returns the total number of elements in the leaves of ``tree``.

    Args:
        tree: pytree.

    Returns:
        A Python int.
    """
    return builtins.sum(jnp.size(leaf) for leaf in jax.tree.leaves(tree))


def batch_shape(tree: Any, shape: tuple[int, ...] = ()) -> Any:
    """Broadcasts every leaf to leading batch dimensions ``shape``.

    Args:
        tree: pytree.
        shape: the batch dimensions to put in front of each leaf's shape.

    Returns:
        A pytree whose leaves have shape ``(*shape, *leaf.shape)``.
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
        A boolean scalar (``True`` for trees without leaves).
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


# ---------------------------------------------------------------------------
# Moments (optimizer hot paths).
#
# A hyperparameter such as ``decay`` may be a Python number, an array or a
# tracer. Weakly typed values (Python numbers, ``jnp.asarray(0.9)``) already
# adopt the dtype of the arrays they meet. A strongly typed one (a float32 array
# meeting bfloat16 moments) would promote the result, so it is cast to the
# arrays' dtype first: the moment keeps its dtype and weak_type, and strict
# dtype promotion does not object.
# ---------------------------------------------------------------------------


def _coefficient(value: Any, dtype: Any) -> Any:
    if jax.typeof(value).weak_type:
        return value
    return jnp.asarray(value).astype(dtype)


def _ema(new: Any, old: Any, decay: Any) -> Any:
    """``(1 - decay) * new + decay * old`` without promoting their dtype."""
    dtype = jnp.result_type(new, old)
    return _coefficient(1 - decay, dtype) * new + _coefficient(decay, dtype) * old


# Compiled (and inlined when traced) so eager calls round ``decay**count`` the
# way a compiled update does, and the way optax does.
@functools.partial(jax.jit, inline=True)
def bias_correction(moment: Any, decay: Any, count: Any) -> Any:
    """Divides a moment estimate by ``1 - decay**count``.

    Corrects the bias towards zero of an exponential moving average started at
    zero; the correction vanishes as ``count`` grows.

    Args:
        moment: pytree of moment estimates.
        decay: the moving average's decay rate.
        count: number of updates so far (at least 1).

    Returns:
        The corrected moment, with each leaf's dtype.
    """
    correction = 1 - decay**count
    return jax.tree.map(lambda t: t / correction.astype(t.dtype), moment)


def update_moment(updates: Any, moments: Any, decay: Any, order: Any) -> Any:
    """Updates the moving average of the ``order``-th power of the updates.

    ``moments <- (1 - decay) * updates**order + decay * moments``, leaf by
    leaf; ``None`` updates give ``None``.

    Args:
        updates: pytree of updates.
        moments: pytree of moving averages, same structure.
        decay: decay rate (number, array or tracer).
        order: the power of the updates.

    Returns:
        The new moments, in the dtype of ``updates`` and ``moments``.
    """
    return jax.tree.map(
        lambda g, t: None if g is None else _ema(g**order, t, decay),
        updates,
        moments,
        is_leaf=lambda x: x is None,
    )


def update_infinity_moment(updates: Any, moments: Any, decay: Any, eps: Any) -> Any:
    """Updates the decaying infinity norm of the updates.

    ``moments <- maximum(|updates| + eps, decay * moments)``, leaf by leaf;
    ``None`` updates give ``None``.

    Args:
        updates: pytree of updates.
        moments: pytree of running maxima, same structure.
        decay: decay rate (number, array or tracer).
        eps: small constant added to ``|updates|``.

    Returns:
        The new moments, in the dtype of ``updates`` and ``moments``.
    """

    def update(g: Any, t: Any) -> Any:
        if g is None:
            return None
        g = jnp.abs(g)
        dtype = jnp.result_type(g, t)
        return jnp.maximum(g + _coefficient(eps, dtype), _coefficient(decay, dtype) * t)

    return jax.tree.map(update, updates, moments, is_leaf=lambda x: x is None)


def update_moment_per_elem_norm(
    updates: Any, moments: Any, decay: Any, order: Any
) -> Any:
    """Updates the moving average of ``|updates|**order``, for complex updates too.

    ``moments <- (1 - decay) * |updates|**order + decay * moments``; for real
    updates ``|g|**order`` is ``g**order``, as in :func:`update_moment`.

    Args:
        updates: pytree of (possibly complex) updates.
        moments: pytree of real moving averages, same structure.
        decay: decay rate (number, array or tracer).
        order: the power of the element-wise modulus.

    Returns:
        The new moments, in the real dtype of ``updates`` and ``moments``.
    """

    def power(g: Any) -> Any:
        if not jnp.iscomplexobj(g):
            return g**order
        half = order / 2
        modulus_sq = jnp.real(jnp.conj(g) * g)  # optax's formula, bit for bit
        return modulus_sq ** (int(half) if float(half).is_integer() else half)

    return jax.tree.map(
        lambda g, t: None if g is None else _ema(power(g), t, decay),
        updates,
        moments,
        is_leaf=lambda x: x is None,
    )
