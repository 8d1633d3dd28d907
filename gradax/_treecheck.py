"""Tree checks whose errors name every path where two trees differ."""

from __future__ import annotations

from typing import Any

import jax


def _paths(tree: Any) -> list[str]:
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return [jax.tree_util.keystr(path) or "<root>" for path, _ in leaves]


def tree_difference(a: Any, b: Any, name_a: str, name_b: str) -> str | None:
    """Describe every place two trees differ in structure, or None if they match."""
    def_a = jax.tree_util.tree_structure(a)
    def_b = jax.tree_util.tree_structure(b)
    if def_a == def_b:
        return None
    paths_a, paths_b = _paths(a), _paths(b)
    only_a = [p for p in paths_a if p not in set(paths_b)]
    only_b = [p for p in paths_b if p not in set(paths_a)]
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
    leaves_a = jax.tree_util.tree_flatten_with_path(a)[0]
    leaves_b = jax.tree_util.tree_leaves(b)
    bad = []
    for (path, x), y in zip(leaves_a, leaves_b, strict=True):
        shape_x, shape_y = getattr(x, "shape", None), getattr(y, "shape", None)
        if shape_x is not None and shape_y is not None and shape_x != shape_y:
            where = jax.tree_util.keystr(path) or "<root>"
            bad.append(f"{where}: {tuple(shape_x)} vs {tuple(shape_y)}")
    return bad


def require_params(params: Any, owner: str) -> None:
    """Refuse `params=None` for a transformation whose update reads them."""
    if params is None:
        raise ValueError(
            f"{owner}.update needs the parameters: call "
            "update(grads, state, params) (params=None was given)"
        )
