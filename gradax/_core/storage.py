"""State leaves kept in another form than the array an update rule reads.

A storage spec (a :class:`StorageSpec`, such as `gradax.int8_blockwise`) is
given where an optimizer takes a state dtype, and `init` makes
:class:`StoredLeaf` leaves from it. The kernel's whole rule for them: the
hooks never see the stored form. The base class's `update` hands them each
leaf's array (:func:`load_state`), and the state guard stores what they
return like the leaf it replaces (:func:`store_all`, in `match_state`).

The form itself belongs to its domain: the 8-bit codes are in
gradax/precision/int8.py. A leaf type may store several leaves together, or
trace the update rule in several passes so that their float32 values are
never written out whole (:meth:`StoredLeaf.update_in_passes`); the kernel
only hands it the state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeGuard

import jax


class StorageSpec:
    """A state storage given in place of a dtype (base class).

    `gtree.zeros_like` and `gtree.cast` ask it for its zeros and for the
    values it holds; optimizers' `init` make their state that way.
    """

    def zeros_like(self, x: Any) -> Any:
        """Zeros shaped like `x` in this storage (a stored leaf or an array)."""
        raise NotImplementedError

    def round_trip(self, x: Any) -> Any:
        """`x` as this storage holds it: stored and loaded again."""
        raise NotImplementedError


class StoredLeaf:
    """A state leaf (a pytree node) that stands for an array (base class).

    A subclass writes :meth:`load` and :meth:`store_like`; update rules
    then read and return plain arrays in its place.
    """

    def load(self) -> jax.Array:
        """The array this leaf stands for, as an update rule reads it."""
        raise NotImplementedError

    def store_like(self, x: Any) -> StoredLeaf:
        """`x` stored in this leaf's form (the same shape)."""
        raise NotImplementedError

    @classmethod
    def store_all(cls, values: list[Any], olds: list[Any]) -> list[Any]:
        """Each of `values` stored like the leaf of this type at its index.

        One by one here; a subclass may store some together.
        """
        return [old.store_like(x) for x, old in zip(values, olds, strict=True)]

    @classmethod
    def update_in_passes(
        cls,
        update_state: Callable,
        updates: Any,
        stored: Any,
        loaded: Any,
        params: Any,
        extra_args: dict,
    ) -> tuple[Any, Any]:
        """`update_state(updates, loaded, params, **extra_args)`, in one pass.

        `loaded` is `load_state(stored)`. A subclass may trace the rule again
        to store its leaves from recomputed values; the leaves it returns
        already stored, `match_state` passes through.
        """
        return update_state(updates, loaded, params, **extra_args)


def is_storage_spec(dtype: Any) -> TypeGuard[StorageSpec]:
    """Whether `dtype` is a storage spec (not a dtype)."""
    return isinstance(dtype, StorageSpec)


def is_stored(x: Any) -> bool:
    """Whether `x` is a :class:`StoredLeaf`."""
    return isinstance(x, StoredLeaf)


def stops_loading(x: Any) -> bool:
    """Whether :func:`load_state` goes no deeper than `x`: a stored leaf, or
    a state node marked ``_loads_itself`` (host-offloaded state, loaded by
    its own transformation, where it is moved to the device)."""
    return is_stored(x) or getattr(type(x), "_loads_itself", False) is True


# Which stored leaves a state holds is a property of its tree definition
# (a stored leaf is a pytree node, a self-loading state a NamedTuple type):
# read once per structure, not by a Python call per node at every update.
_STRUCTURES_SEEN = 1024  # a training run has a few; a bound all the same
_holds_any: dict[Any, bool] = {}
_loads_kinds: dict[Any, tuple] = {}


def _by_structure(cache: dict[Any, Any], state: Any, compute: Callable) -> Any:
    treedef = jax.tree_util.tree_structure(state)
    try:
        known = cache.get(treedef)
    except TypeError:  # a node whose static data cannot be hashed
        return compute(state)
    if known is None:
        known = compute(state)
        if len(cache) < _STRUCTURES_SEEN:
            cache[treedef] = known
    return known


def holds_stored(state: Any) -> bool:
    """Whether `state` has a :class:`StoredLeaf` anywhere in it."""

    def compute(tree: Any) -> bool:
        leaves = jax.tree_util.tree_leaves(tree, is_leaf=is_stored)
        return any(is_stored(leaf) for leaf in leaves)

    return _by_structure(_holds_any, state, compute)


def _loaded_kinds(state: Any) -> tuple[type[StoredLeaf], ...]:
    """The types of the leaves :func:`load_state` loads in `state` (stored
    ones not inside a self-loading node), in tree order."""

    def compute(tree: Any) -> tuple[type[StoredLeaf], ...]:
        leaves = jax.tree_util.tree_leaves(tree, is_leaf=stops_loading)
        return tuple(dict.fromkeys(type(x) for x in leaves if is_stored(x)))

    return _by_structure(_loads_kinds, state, compute)


def load_state(state: Any) -> Any:
    """`state` with every :class:`StoredLeaf` replaced by its array."""
    if not _loaded_kinds(state):
        return state
    return jax.tree.map(
        lambda x: x.load() if is_stored(x) else x, state, is_leaf=stops_loading
    )


def update_in_passes(
    update_state: Callable,
    updates: Any,
    stored: Any,
    loaded: Any,
    params: Any,
    extra_args: dict,
) -> tuple[Any, Any]:
    """`update_state(updates, loaded, params, **extra_args)`, where `loaded`
    is `load_state(stored)`, run by the type of the first stored leaf (see
    :meth:`StoredLeaf.update_in_passes`)."""
    kinds = () if loaded is stored else _loaded_kinds(stored)
    if not kinds:
        return update_state(updates, loaded, params, **extra_args)
    return kinds[0].update_in_passes(
        update_state, updates, stored, loaded, params, extra_args
    )


def store_all(values: list[Any], olds: list[Any]) -> list[Any]:
    """Each of `values` stored like the :class:`StoredLeaf` at its index,
    the leaves of each type by that type (which may store some together)."""
    by_kind: dict[type, list[int]] = {}
    for index, old in enumerate(olds):
        by_kind.setdefault(type(old), []).append(index)
    stored: list[Any] = [None] * len(values)
    for kind, indices in by_kind.items():
        done = kind.store_all([values[i] for i in indices], [olds[i] for i in indices])
        for index, leaf in zip(indices, done, strict=True):
            stored[index] = leaf
    return stored
