"""Access by name inside nested states: `get`, `set`, `map_params`, ..."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax

from .params_placeholder import ParamsPlaceholder

KeyPath = tuple[Any, ...]
"""A leaf's path in a tree, as ``jax.tree_util`` key entries."""
Filtering = Callable[[KeyPath, Any], bool]
"""A predicate ``(path, leaf) -> bool`` that selects leaves of a tree."""

# ---------------------------------------------------------------------------
# Access by name.
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class NamedTupleKey:
    """Path entry for the field `name` of a NamedTuple of class `tuple_name`.

    Paths given to `filtering` callables, and returned by
    :func:`get_all_with_path`, use it in place of :class:`jax.tree_util.GetAttrKey`
    for NamedTuple fields, so that equal field names in different states (for
    example `count` in two chained transformations) can be told apart.

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
    """One level of `node`: `([(entry, child), ...], treedef)`; None for a leaf."""
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
    """Name a path entry can be searched by; `_UNNAMED` for positional ones."""
    if isinstance(entry, jax.tree_util.DictKey):
        return entry.key
    if isinstance(entry, (jax.tree_util.GetAttrKey, NamedTupleKey)):
        return entry.name
    return _UNNAMED


def _matches(name: Any, key: Any) -> bool:
    return name is not _UNNAMED and name == key


def _holders(path: KeyPath, node: Any, key: Any, out: list) -> None:
    """The outermost nodes that hold a match (named `key`, or a child named so).

    Appends `(path, node, children)` in tree order; does not look inside them.
    """
    level = _children(node)
    if level is None:
        return
    children, _ = level
    if _matches(_class_name(node, children), key) or any(
        _matches(_entry_name(entry), key) for entry, _ in children
    ):
        out.append((path, node, children))
        return
    for entry, child in children:
        _holders((*path, entry), child, key, out)


def _find(path: KeyPath, node: Any, key: Any, found: list[tuple[KeyPath, Any]]) -> None:
    # optax's order: first the match of every outermost holder (in tree order),
    # then, holder by holder, the matches nested inside its children.
    holders: list[tuple[KeyPath, Any, list[tuple[Any, Any]]]] = []
    _holders(path, node, key, holders)
    for holder_path, holder, children in holders:
        if _matches(_class_name(holder, children), key):
            # A node named ``key`` is the match itself (as in optax).
            found.append((holder_path, holder))
            continue
        for entry, child in children:
            if _matches(_entry_name(entry), key):
                found.append(((*holder_path, entry), child))
    for holder_path, _, children in holders:
        for entry, child in children:
            _find((*holder_path, entry), child, key, found)


def get_all_with_path(
    tree: Any, key: Any, filtering: Filtering | None = None
) -> list[tuple[KeyPath, Any]]:
    """Finds every value stored under `key` in `tree`, with its path.

    A value matches when it is stored under a dict key `key`, a NamedTuple
    field `key`, or an attribute `key` of a keyed pytree node (a registered
    dataclass), or when it is itself a NamedTuple or dataclass node whose class
    is named `key`. The search goes on inside matches.

    Args:
        tree: pytree to search.
        key: name to look for.
        filtering: optional `filtering(path, value) -> bool`; only the matches
            it accepts are kept.

    Returns:
        A list of `(path, value)` in optax's order: first the outermost
        matches (in tree order), then, for each of them in turn, the matches
        nested inside it. A path is a tuple of JAX key entries, with
        :class:`NamedTupleKey` for NamedTuple fields;
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
    """Returns the single value stored under `key` in `tree`.

    Matches are those of :func:`get_all_with_path`.

    Args:
        tree: pytree to search.
        key: name to look for.
        default: returned when nothing matches.
        filtering: optional `filtering(path, value) -> bool` to narrow the
            matches.

    Returns:
        The matching value, or `default` if there is none.

    Raises:
        KeyError: if more than one value matches. A common case: a state with
            a schedule has two counts, Adam's and the schedule's
            (`ScaleByAdamState.count`, `ScaleByScheduleState.count`). The
            message names them and how to pick one: `filtering` on the last
            path entry (`str(path[-1]) == "ScaleByAdamState.count"`), or
            the state that holds it, by its class name
            (`get(state, "ScaleByAdamState").count`).

    Example:
        >>> get({"opt": {"count": 3}, "other": 1}, "count")
        3
    """
    found = get_all_with_path(tree, key, filtering)
    if len(found) > 1:
        paths = ", ".join(jax.tree_util.keystr(path) for path, _ in found)
        raise KeyError(
            f"Found {len(found)} values for {key!r}, at {paths}. "
            + _how_to_pick(found[0][0])
        )
    return found[0][1] if found else default


def _how_to_pick(path: KeyPath) -> str:
    """How to ask `get` for the value at `path` alone."""
    last = path[-1] if path else None
    if isinstance(last, NamedTupleKey):
        return (
            "Pick one with filtering=lambda path, _: str(path[-1]) == "
            f"{str(last)!r}, or get the state that holds it: "
            f"get(tree, {last.tuple_name!r}).{last.name}; get_all_with_path "
            "lists them all."
        )
    return (
        "Pick one with filtering=lambda path, _: jax.tree_util.keystr(path) == "
        f"{jax.tree_util.keystr(path)!r}; get_all_with_path lists them all."
    )


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
    """Returns a copy of `tree` with the values stored under some names replaced.

    Every value that :func:`get_all_with_path` finds for a name in `kwargs`
    (and `filtering` accepts) is replaced; the search does not go inside a
    replaced value. Nodes are rebuilt through their pytree registration, so
    frozen dataclasses and NamedTuples keep their types and static fields.

    Args:
        tree: pytree to update.
        filtering: optional `filtering(path, value) -> bool`; only the matches
            it accepts are replaced.
        **kwargs: names and their new values.

    Returns:
        A pytree like `tree` with the new values.

    Raises:
        KeyError: if a name in `kwargs` matches nothing (after filtering).

    Example:
        >>> set({"lr": 0.1, "opt": {"count": 3}}, count=4)
        {'lr': 0.1, 'opt': {'count': 4}}
    """
    for key in kwargs:
        if not get_all_with_path(tree, key, filtering):
            detail = " that the filtering accepts" if filtering else ""
            raise KeyError(f"Found no value for {key!r}{detail} in {tree}.")
    return _replace((), tree, kwargs, filtering)


def map_params(
    initable: Any,
    f: Callable[..., Any],
    state: Any,
    /,
    *rest: Any,
    transform_non_params: Callable[..., Any] | None = None,
    is_leaf: Callable[[Any], bool] | None = None,
) -> Any:
    """Applies `f` to every copy of the parameter tree inside an optimizer state.

    The copies are found by calling `init` on a placeholder: each part of the
    state that `init` builds from the parameters is mapped with `f`. A typical
    use is turning parameter sharding specs into state sharding specs.

    Args:
        initable: a transformation with an `init` method, or an init function.
        f: function mapped over each parameter-shaped subtree of `state`, leaf
            by leaf, together with the matching leaves of `rest`.
        state: the optimizer state.
        *rest: trees shaped like the parameters, passed to `f` as extra
            arguments.
        transform_non_params: optional function applied to every other part of
            the state; by default those parts are kept.
        is_leaf: passed to :func:`jax.tree.map` when mapping `f`.

    Returns:
        A tree shaped like `state`.
    """
    init = initable.init if hasattr(initable, "init") else initable
    template = init(ParamsPlaceholder())

    def map_part(marker: Any, value: Any) -> Any:
        if isinstance(marker, ParamsPlaceholder):
            return jax.tree.map(f, value, *rest, is_leaf=is_leaf)
        if transform_non_params is not None:
            return transform_non_params(value)
        return value

    return jax.tree.map(
        map_part,
        template,
        state,
        is_leaf=lambda x: isinstance(x, ParamsPlaceholder),
    )
