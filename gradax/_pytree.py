"""Immutable dataclass pytrees: the base every gradax object is built on.

A subclass of :class:`Module` is turned into a frozen dataclass and registered
with JAX. Fields marked ``static_field()`` go into the tree definition (flags,
dtypes, masks, callables); every other field is a child of the pytree, so its
numbers become leaves that ``jit`` traces and ``grad`` differentiates.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np

_STATIC = "gradax_static"


def static_field(default: Any = dataclasses.MISSING, **kwargs: Any) -> Any:
    """A dataclass field stored in the tree definition instead of the leaves."""
    metadata = dict(kwargs.pop("metadata", {}), **{_STATIC: True})
    return dataclasses.field(default=default, metadata=metadata, **kwargs)


def _is_static(f: dataclasses.Field) -> bool:
    return bool(f.metadata.get(_STATIC, False))


def _safe_equal(a: Any, b: Any) -> bool:
    """Equality that never raises and treats arrays by value."""
    if a is b:
        return True
    if type(a) is not type(b):
        # A Python float and a NumPy scalar of the same value are still equal.
        if not (_is_number_like(a) and _is_number_like(b)):
            return False
    if isinstance(a, jax.core.Tracer) or isinstance(b, jax.core.Tracer):
        return False
    leaves_a, def_a = jax.tree_util.tree_flatten(a)
    leaves_b, def_b = jax.tree_util.tree_flatten(b)
    if def_a != def_b or len(leaves_a) != len(leaves_b):
        return False
    if def_a.num_nodes == 1 and def_a.num_leaves == 1 and leaves_a[0] is a:
        return _leaf_equal(a, b)
    return all(_safe_equal(x, y) for x, y in zip(leaves_a, leaves_b, strict=True))


def _is_number_like(x: Any) -> bool:
    return isinstance(x, (int, float, complex, np.number, np.ndarray, jax.Array))


def _leaf_equal(a: Any, b: Any) -> bool:
    if _is_number_like(a) and _is_number_like(b):
        try:
            a_arr, b_arr = np.asarray(a), np.asarray(b)
        except Exception:  # noqa: BLE001 - e.g. a deleted buffer
            return False
        return a_arr.shape == b_arr.shape and bool(np.array_equal(a_arr, b_arr))
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - objects whose == is not a bool
        return False


def _safe_hash(x: Any) -> int:
    try:
        return hash(x)
    except TypeError:
        leaves, treedef = jax.tree_util.tree_flatten(x)
        if treedef.num_leaves == 1 and leaves and leaves[0] is x:
            return hash((type(x), getattr(x, "shape", None)))
        return hash((treedef, tuple(_safe_hash(leaf) for leaf in leaves)))


class _Static:
    """Wraps a static value so the tree definition can hash and compare it.

    Masks and label trees are dicts (unhashable); wrapping them lets a
    transformation that holds one still be a ``jit`` argument.
    """

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Static) and _safe_equal(self.value, other.value)

    def __hash__(self) -> int:
        return _safe_hash(self.value)

    def __repr__(self) -> str:
        return repr(self.value)


class Module:
    """Base of all gradax objects: a frozen dataclass registered as a pytree.

    Subclasses declare fields with annotations. ``__post_init__`` hooks run only
    when a user builds the object; JAX rebuilds it from leaves without calling
    ``__init__``, so validation never sees tracers coming out of ``jit``.
    """

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        dataclasses.dataclass(frozen=True, eq=False, repr=False)(cls)
        fields = dataclasses.fields(cls)
        data = tuple(f.name for f in fields if not _is_static(f))
        static = tuple(f.name for f in fields if _is_static(f))
        cls._data_fields = data
        cls._static_fields = static
        keys = tuple(jax.tree_util.GetAttrKey(name) for name in data)

        def flatten_with_keys(obj):
            children = [(k, getattr(obj, n)) for k, n in zip(keys, data, strict=True)]
            aux = tuple(_Static(getattr(obj, n)) for n in static)
            return children, aux

        def flatten(obj):
            children = [getattr(obj, n) for n in data]
            aux = tuple(_Static(getattr(obj, n)) for n in static)
            return children, aux

        def unflatten(aux, children):
            obj = object.__new__(cls)
            for name, value in zip(data, children, strict=True):
                object.__setattr__(obj, name, value)
            for name, wrapped in zip(static, aux, strict=True):
                object.__setattr__(obj, name, wrapped.value)
            return obj

        jax.tree_util.register_pytree_with_keys(
            cls, flatten_with_keys, unflatten, flatten
        )

    def __post_init__(self) -> None:
        self._check()

    def _check(self) -> None:
        """Validate arguments at construction; subclasses override."""

    def replace(self, **changes: Any) -> Module:
        """A copy with some fields changed, validated like a new object."""
        return dataclasses.replace(self, **changes)

    def _with_fields(self, **values: Any) -> Module:
        """A copy with fields set directly, skipping validation (for tracers)."""
        obj = object.__new__(type(self))
        obj.__dict__.update(self.__dict__)
        obj.__dict__.update(values)
        return obj

    def _public_name(self) -> str:
        return type(self).__name__

    def __repr__(self) -> str:
        parts = []
        for f in dataclasses.fields(self):
            if not f.repr:
                continue
            parts.append(f"{f.name}={getattr(self, f.name)!r}")
        return f"{self._public_name()}({', '.join(parts)})"

    def __eq__(self, other: object) -> bool:
        if type(self) is not type(other):
            return NotImplemented
        return all(
            _safe_equal(getattr(self, f.name), getattr(other, f.name))
            for f in dataclasses.fields(self)
        )

    def __hash__(self) -> int:
        values = (getattr(self, f.name) for f in dataclasses.fields(self))
        return hash((type(self), tuple(_safe_hash(v) for v in values)))
