"""Small helpers for meshes whose axes are Explicit (sharding in types)."""

from __future__ import annotations

from typing import Any

import jax


def explicit_sharding(x: Any) -> jax.sharding.NamedSharding | None:
    """The sharding in ``x``'s type when its mesh has Explicit axes, else None.

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
    return sharding


def ravel(x: jax.Array) -> jax.Array:
    """``jnp.ravel`` that also works on arrays sharded along Explicit axes.

    A sharded array cannot be raveled in place; the result is replicated.
    """
    if explicit_sharding(x) is not None:
        return jax.numpy.reshape(x, (-1,), out_sharding=jax.sharding.PartitionSpec())
    return jax.numpy.ravel(x)


def reshape_like(x: jax.Array, like: Any) -> jax.Array:
    """Reshape ``x`` to ``like``'s shape, and its Explicit sharding if any."""
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


def shard_state_like_params(state: Any, params: Any) -> Any:
    """Tie each state leaf shaped like a parameter to that parameter's sharding.

    Under ``jit`` with Auto mesh axes, a state leaf such as ``zeros_like(p)``
    does not depend on ``p``'s values, so the compiler is free to (and does)
    replicate it. ``shard_alike`` asks the partitioner to give both arrays the
    same sharding. A state leaf is matched to the parameter whose tree path is
    the longest suffix of the leaf's path (``mu['w']`` -> ``params['w']``) and
    that has the same shape. Explicit axes need none of this: the sharding is
    in the types and ``zeros_like`` keeps it.
    """
    param_leaves = jax.tree_util.tree_flatten_with_path(params)[0]
    if jax.device_count() == 1 or not _auto_axes_only():
        return state
    if not any(isinstance(p, jax.core.Tracer) for _, p in param_leaves):
        return state  # outside jit the state is built where the parameters live
    from jax.experimental.shard_alike import shard_alike

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
            if getattr(param, "shape", None) == getattr(leaf, "shape", ()) and (
                getattr(leaf, "ndim", 0) > 0
            ):
                return shard_alike(param, leaf)[1]
            return leaf
        return leaf

    return jax.tree_util.tree_map_with_path(tie, state, is_leaf=is_quantized)


def replicate(x: jax.Array) -> tuple[jax.Array, Any]:
    """A replicated copy of ``x`` and its Explicit sharding (None if none).

    Sharding in types forbids QR, top-k and contractions over a sharded axis;
    such code computes each matrix whole, then calls :func:`restore`.
    """
    sharding = explicit_sharding(x)
    if sharding is None:
        return x, None
    return jax.sharding.reshard(x, jax.sharding.PartitionSpec()), sharding


def restore(x: jax.Array, sharding: Any) -> jax.Array:
    """Give ``x`` back the sharding :func:`replicate` took away."""
    return x if sharding is None else jax.sharding.reshard(x, sharding.spec)


def match_sharding(new: jax.Array, old: Any) -> jax.Array:
    """``new`` with ``old``'s Explicit sharding (state stays stable in scan)."""
    sharding = explicit_sharding(old)
    if sharding is None or new is None:
        return new
    return jax.sharding.reshard(new, sharding.spec)
