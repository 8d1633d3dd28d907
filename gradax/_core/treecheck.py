"""One walk over two trees that names every place where they differ.

Every comparison of two trees in gradax goes through :func:`differences`:
the update's tree and shape checks (updates against params), the state a
hook returns against the one it was given (`match_state`), and the state
guard's diagnosis of a state that is not the one `init` makes. The
callers differ only in what they make of a difference: a list of leaf
paths, a cast, or a message with a hint. `carry_state` walks one tree with
the same :func:`children`.

Two trees of one structure (the case of every step of a training loop)
are compared leaf by leaf from their flattening, without the walk.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import numpy as np

_keystr = jax.tree_util.keystr


def is_leaf(x: Any) -> bool:
    """Whether `x` is a leaf of a pytree (not a node, not None)."""
    return jax.tree_util.tree_structure(x).num_leaves == 1 and is_terminal(x)


def is_terminal(x: Any) -> bool:
    """Whether nothing lies below `x`: a leaf, or a node without children.

    The walk compares such a node (`()`, `EmptyState()`) as a whole, as
    it compares a leaf; None is an empty tree, not a terminal.
    """
    return x is not None and jax.tree_util.treedef_is_leaf(
        jax.tree_util.tree_structure(x)
    )


def children(x: Any) -> list[tuple[Any, Any]]:
    """One level of `x`'s children, with their keys, in flattening order."""
    flat = jax.tree_util.tree_flatten_with_path(x, is_leaf=lambda y: y is not x)[0]
    return [(path[0], child) for path, child in flat if path]


def field_names(x: Any) -> tuple[str, ...] | None:
    """A NamedTuple's field names; None for anything else."""
    fields = getattr(type(x), "_fields", None)
    return tuple(fields) if isinstance(x, tuple) and fields is not None else None


class Difference(NamedTuple):
    """One place where `given` differs from `expected`.

    `kind` is "shape" (two leaves of other shapes), "leaf" (a leaf where
    the other tree has a node) or "node" (two nodes that do not
    correspond: another class, other fields, keys or length). Nothing below
    a differing node is compared.
    """

    kind: str
    path: tuple
    expected: Any
    given: Any


def _same_type(expected: Any, given: Any) -> bool:
    return type(expected) is type(given)


def _correspond(expected: Any, given: Any, same_class: Callable) -> bool:
    """Whether two nodes hold their children under the same keys.

    NamedTuples correspond by class and fields, dicts by their keys, plain
    lists and tuples by their length (a list restored for a tuple is the
    same state), any other node by its class and its children's keys.
    """
    fields = field_names(expected)
    if fields is not None:
        return field_names(given) == fields and same_class(expected, given)
    if isinstance(expected, dict):
        return isinstance(given, dict) and set(expected) == set(given)
    if isinstance(expected, (list, tuple)):
        plain = field_names(given) is None and isinstance(given, (list, tuple))
        return plain and len(expected) == len(given)
    keys = [k for k, _ in children(expected)] == [k for k, _ in children(given)]
    return type(expected) is type(given) and keys


def _walk(
    expected: Any,
    given: Any,
    path: tuple,
    same_class: Callable[[Any, Any], bool],
    out: list[Difference],
) -> None:
    if not jax.tree_util.tree_leaves(expected) and not jax.tree_util.tree_leaves(given):
        return  # None, (), EmptyState() and MaskedNode() stand for each other
    if is_terminal(expected) or is_terminal(given):
        if not (is_terminal(expected) and is_terminal(given)):
            out.append(Difference("leaf", path, expected, given))
        elif np.shape(expected) != np.shape(given) or (
            is_leaf(expected) != is_leaf(given)  # `{}` and a scalar: both `()`
        ):
            out.append(Difference("shape", path, expected, given))
        return
    if not _correspond(expected, given, same_class):
        out.append(Difference("node", path, expected, given))
        return
    pairs = children(expected)
    if isinstance(expected, dict):  # by key: an OrderedDict has its own order
        given_children = [given[key.key] for key, _ in pairs]
    else:  # the same keys in the same order
        given_children = [g for _, g in children(given)]
    for (key, e), g in zip(pairs, given_children, strict=True):
        _walk(e, g, (*path, key), same_class, out)


def differences(
    expected: Any,
    given: Any,
    *,
    same_class: Callable[[Any, Any], bool] = _same_type,
) -> list[Difference]:
    """Every place where `given` differs from `expected`, outermost first.

    Trees with no leaves stand for each other (None, `()`, `EmptyState()`),
    leaves are compared by shape only, and `same_class` says which
    NamedTuples of the same fields correspond (the state guard accepts
    optax's count states for gradax's).
    """
    flat_e, def_e = jax.tree_util.tree_flatten_with_path(expected)
    flat_g, def_g = jax.tree_util.tree_flatten(given)
    if def_e == def_g:  # one structure: only the leaves' shapes can differ
        return [
            Difference("shape", path, e, g)
            for (path, e), g in zip(flat_e, flat_g, strict=True)
            if np.shape(e) != np.shape(g)
        ]
    out: list[Difference] = []
    _walk(expected, given, (), same_class, out)
    return out


def _leaf_paths(tree: Any, prefix: tuple) -> list[str]:
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return [_keystr((*prefix, *path)) or "<root>" for path, _ in leaves]


def tree_difference(a: Any, b: Any, name_a: str, name_b: str) -> str | None:
    """Describe every place two trees differ in structure, or None if they match."""
    def_a = jax.tree_util.tree_structure(a)
    def_b = jax.tree_util.tree_structure(b)
    if def_a == def_b:
        return None
    only_a, only_b = [], []
    for d in differences(a, b):
        if d.kind == "shape" and is_leaf(d.expected) and is_leaf(d.given):
            continue  # structure only (an empty node has a shape, `(0,)`)
        paths_a = _leaf_paths(d.expected, d.path)
        paths_b = _leaf_paths(d.given, d.path)
        set_a, set_b = set(paths_a), set(paths_b)
        only_a += [p for p in paths_a if p not in set_b]
        only_b += [p for p in paths_b if p not in set_a]
    parts = []
    if only_a:
        parts.append(f"{name_a} has leaves that {name_b} lacks: {', '.join(only_a)}")
    if only_b:
        parts.append(f"{name_b} has leaves that {name_a} lacks: {', '.join(only_b)}")
    if not parts:
        parts.append(
            f"{name_a} and {name_b} have the same leaf paths but different "
            f"container types: {def_a} vs {def_b}"
        )
    return "; ".join(parts)


def check_same_structure(a: Any, b: Any, name_a: str, name_b: str) -> None:
    """Raise ValueError naming every differing path of two trees."""
    message = tree_difference(a, b, name_a, name_b)
    if message is not None:
        raise ValueError(f"Tree mismatch: {message}.")


def shape_differences(a: Any, b: Any) -> list[str]:
    """`"path: shape_a vs shape_b"` for each leaf whose shape differs.

    The trees must have the same structure; leaves without a shape (None,
    Python numbers) are not compared.
    """
    bad = []
    for d in differences(a, b):
        shape_x = getattr(d.expected, "shape", None)
        shape_y = getattr(d.given, "shape", None)
        if shape_x is not None and shape_y is not None:
            where = _keystr(d.path) or "<root>"
            bad.append(f"{where}: {tuple(shape_x)} vs {tuple(shape_y)}")
    return bad


def require_params(params: Any, owner: str) -> None:
    """Refuse `params=None` for a transformation whose update reads them."""
    if params is None:
        raise ValueError(
            f"{owner}.update needs the parameters: call "
            "update(grads, state, params) (params=None was given)"
        )


def canonical_key(entry: Any) -> Any:
    """A path entry as an int (a position) or a name, whatever the container.

    A NamedTuple field and the dict key that orbax restores it as, a tuple
    index and the list index, or a list index and the integer key of flax
    nnx's `State` that stands for the list, become equal. Orbax writes
    integer dict keys as strings of digits; they count as positions too.
    """
    if isinstance(entry, jax.tree_util.SequenceKey):
        return entry.idx
    if isinstance(entry, jax.tree_util.FlattenedIndexKey):
        return entry.key
    if isinstance(entry, jax.tree_util.GetAttrKey):
        return entry.name
    if isinstance(entry, jax.tree_util.DictKey):
        key = entry.key
        return int(key) if isinstance(key, str) and key.isdigit() else key
    return str(entry)
