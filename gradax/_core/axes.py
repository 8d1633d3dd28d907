"""Small helpers for meshes whose axes are Explicit (sharding in types)."""

from __future__ import annotations

from typing import Any

import jax

from .._compat import explicit_meshes_supported, require_explicit_meshes, reshard


def explicit_sharding(x: Any) -> jax.sharding.NamedSharding | None:
    """The sharding in `x`'s type when its mesh has Explicit axes, else None.

    Under Auto axes (and on one device) the compiler chooses shardings, so
    there is nothing to carry over and this returns None.
    """
    # Never ask a tracer for ``.sharding``: it raises, and the error message
    # walks the whole traced program for the value's origin (a third of the
    # trace time of a large jitted program).
    tracer = isinstance(x, jax.core.Tracer)
    sharding = None if tracer else getattr(x, "sharding", None)
    if sharding is None:
        try:
            sharding = jax.typeof(x).sharding
        except TypeError:
            return None
    mesh = getattr(sharding, "mesh", None)
    axis_types = getattr(mesh, "axis_types", ())
    if not any(t == jax.sharding.AxisType.Explicit for t in axis_types):
        return None
    require_explicit_meshes()
    return sharding


def ravel(x: jax.Array) -> jax.Array:
    """`jnp.ravel` that also works on arrays sharded along Explicit axes.

    A sharded array cannot be raveled in place; the result is replicated.
    """
    if explicit_sharding(x) is not None:
        return jax.numpy.reshape(x, (-1,), out_sharding=jax.sharding.PartitionSpec())
    return jax.numpy.ravel(x)


def reshape_like(x: jax.Array, like: Any) -> jax.Array:
    """Reshape `x` to `like`'s shape, and its Explicit sharding if any."""
    sharding = explicit_sharding(like)
    if sharding is not None:
        return jax.numpy.reshape(x, jax.numpy.shape(like), out_sharding=sharding)
    return jax.numpy.reshape(x, jax.numpy.shape(like))


def _auto_axes_only() -> bool:
    """Whether the mesh in context (if any) leaves shardings to the compiler."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh is None or mesh.empty:
        return True
    return all(t == jax.sharding.AxisType.Auto for t in mesh.axis_types)


def _tie_to(param: jax.Array, leaf: jax.Array) -> jax.Array:
    """`leaf`, unchanged, computed so that it depends on `param`'s values.

    No value is both NaN and finite, so `never` is False everywhere; but it
    is computed elementwise from `param`, so the partitioner gives it, and
    the `select` that reads it, `param`'s sharding. The branch never taken
    differs from `leaf` (so the compiler cannot fold the `select` away)
    and has its dtype and weak type (so `select` keeps them).
    """
    jnp = jax.numpy
    never = jnp.logical_and(jnp.isnan(param), jnp.isfinite(param))
    if never.shape != leaf.shape:  # a stack of parameter-shaped values
        never = jnp.broadcast_to(never, leaf.shape)
    other = jnp.logical_not(leaf) if leaf.dtype == bool else leaf + 1
    return jax.lax.select(never, other, leaf)


def _can_tie(param: Any, leaf: Any) -> bool:
    """Whether `leaf` is an array shaped like a floating `param` (or a stack
    of such arrays, as L-BFGS keeps), in the parameter's memory."""
    jnp = jax.numpy
    shape, like = tuple(getattr(leaf, "shape", ())), getattr(param, "shape", None)
    if like is None or not shape:
        return False
    stacked = len(like) > 0 and len(shape) == len(like) + 1 and shape[1:] == like
    if shape != like and not stacked:
        return False
    if not jnp.issubdtype(param.dtype, jnp.inexact):
        return False  # no NaN to reason about; such state is left to the compiler
    if not (leaf.dtype == bool or jnp.issubdtype(leaf.dtype, jnp.number)):
        return False
    # State already moved to another memory (offload_state) was tied before
    # it moved; ``select`` cannot mix memories.
    space = getattr(jax.typeof(leaf), "memory_space", None)
    return space is None or space == getattr(jax.typeof(param), "memory_space", None)


def shard_state_like_params(state: Any, params: Any) -> Any:
    """Tie each state leaf shaped like a parameter to that parameter's sharding.

    Under `jit` with Auto mesh axes, a state leaf such as `zeros_like(p)`
    does not depend on `p`'s values, so the compiler is free to (and does)
    replicate it, and the parameter's sharding is not known while tracing.
    Each such leaf is passed through an elementwise `select` whose (always
    false) predicate is computed from `p`: the partitioner then propagates
    `p`'s sharding to it, and its values are exactly the leaf's. This uses
    only `jax.numpy` and `jax.lax`, so it works on every jax gradax
    supports (`jax.experimental.shard_alike`, used before, was removed in
    jax 0.11.2). A state leaf is matched to the parameter whose tree path is
    the longest suffix of the leaf's path (`mu['w']` -> `params['w']`)
    and that has the same shape (or that shape with one leading axis, a
    stack of past values) and a floating or complex dtype. Explicit
    axes need none of this: the sharding is in the types and `zeros_like`
    keeps it.
    """
    param_leaves = jax.tree_util.tree_flatten_with_path(params)[0]
    if not explicit_meshes_supported():  # Explicit axes refused at init, by name
        for _, param in param_leaves:
            explicit_sharding(param)
    if jax.device_count() == 1 or not _auto_axes_only():
        return state
    if not any(isinstance(p, jax.core.Tracer) for _, p in param_leaves):
        return state  # outside jit the state is built where the parameters live

    def is_quantized(leaf: Any) -> bool:  # a gradax QuantizedArray
        return callable(getattr(leaf, "with_codes", None))

    by_path = {tuple(path): leaf for path, leaf in param_leaves}

    def tie(path: tuple, leaf: Any) -> Any:
        for start in range(len(path) + 1):
            param = by_path.get(tuple(path[start:]))
            if param is None:
                continue
            if is_quantized(leaf):  # its codes are shaped like the parameter
                return leaf.with_codes(tie(path, leaf.codes))
            if _can_tie(param, leaf):
                return _tie_to(param, leaf)
            return leaf
        return leaf

    return jax.tree_util.tree_map_with_path(tie, state, is_leaf=is_quantized)


def replicate(x: jax.Array) -> tuple[jax.Array, Any]:
    """A replicated copy of `x` and its Explicit sharding (None if none).

    Sharding in types forbids QR, top-k and contractions over a sharded axis;
    such code computes each matrix whole, then calls :func:`restore`.
    """
    sharding = explicit_sharding(x)
    if sharding is None:
        return x, None
    return reshard(x, jax.sharding.PartitionSpec()), sharding


def restore(x: jax.Array, sharding: Any) -> jax.Array:
    """Give `x` back the sharding :func:`replicate` took away."""
    return x if sharding is None else reshard(x, sharding.spec)


def match_sharding(new: jax.Array, old: Any) -> jax.Array:
    """`new` with `old`'s Explicit sharding (state stays stable in scan)."""
    sharding = explicit_sharding(old)
    if sharding is None or new is None:
        return new
    return reshard(new, sharding.spec)
