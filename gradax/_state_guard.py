"""State stability: ``update`` gives back exactly the state types ``init`` made.

A state leaf whose dtype or weak type changes between steps breaks
``lax.cond``, ``lax.while_loop`` and ``lax.scan`` and makes ``jit`` retrace;
:func:`match_state` casts every leaf back, and raises on a change of
structure or shape, which no cast can mend.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ._quantized import is_quantized
from ._treecheck import tree_difference


def is_weakly_typed(x: Any) -> bool:
    """Whether an array or tracer is weakly typed (came from a Python scalar)."""
    return bool(getattr(x, "weak_type", False))


def cast(x: Any, dtype: np.dtype, weak_type: bool) -> jax.Array:
    """Cast ``x`` to ``dtype`` with the given weak type."""
    if weak_type:
        try:  # JAX has no public way to make a weakly typed array of a dtype.
            from jax._src.lax.lax import _convert_element_type

            return _convert_element_type(x, np.dtype(dtype), weak_type=True)
        except (ImportError, TypeError, AssertionError):
            pass
    return jax.lax.convert_element_type(x, dtype)


def _aval(x: Any) -> tuple[tuple[int, ...], Any, bool] | None:
    if not hasattr(x, "dtype") or not hasattr(x, "shape"):
        return None
    return tuple(x.shape), x.dtype, is_weakly_typed(x)


def match_state(new_state: Any, old_state: Any, owner: str) -> Any:
    """Return ``new_state`` cast to the structure/dtypes/weak types of the old.

    A leaf stored quantized in the old state (a ``QuantizedArray``, which the
    hooks read as a float32 array) is stored again the same way.
    """
    new_leaves, new_def = jax.tree_util.tree_flatten_with_path(
        new_state, is_leaf=is_quantized
    )
    old_leaves, old_def = jax.tree_util.tree_flatten(old_state, is_leaf=is_quantized)
    if new_def != old_def:
        message = tree_difference(new_state, old_state, "new state", "old state")
        raise TypeError(f"{owner}.update changed the structure of its state: {message}")
    out = []
    for (path, new), old in zip(new_leaves, old_leaves, strict=True):
        if is_quantized(old):
            out.append(new if is_quantized(new) else old.store_like(new))
            continue
        want, have = _aval(old), _aval(new)
        if want is None or have is None or want == have:
            out.append(new)
            continue
        if want[0] != have[0]:
            raise TypeError(
                f"{owner}.update changed the shape of state leaf "
                f"{jax.tree_util.keystr(path)} from {want[0]} to {have[0]}"
            )
        out.append(cast(new, want[1], want[2]))
    return jax.tree_util.tree_unflatten(new_def, out)


def match_dtypes(new_updates: Any, old_updates: Any) -> Any:
    """Cast updates back to the dtypes of the gradients they came from."""
    new_leaves, new_def = jax.tree_util.tree_flatten(new_updates)
    old_leaves, old_def = jax.tree_util.tree_flatten(old_updates)
    if new_def != old_def:
        return new_updates
    out = []
    for new, old in zip(new_leaves, old_leaves, strict=True):
        old_dtype = getattr(old, "dtype", None)
        if old_dtype is None or getattr(new, "dtype", old_dtype) == old_dtype:
            out.append(new)
        elif jnp.iscomplexobj(new) and not jnp.iscomplexobj(old):
            # A real gradient must not get an imaginary part; keep it visible.
            out.append(new)
        else:
            out.append(jax.lax.convert_element_type(new, old_dtype))
    return jax.tree_util.tree_unflatten(new_def, out)
