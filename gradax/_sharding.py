"""Small helpers for meshes whose axes are Explicit (sharding in types)."""

from __future__ import annotations

from typing import Any

import jax


def explicit_sharding(x: Any) -> jax.sharding.NamedSharding | None:
    """The sharding in ``x``'s type when its mesh has Explicit axes, else None.

    Under Auto axes (and on one device) the compiler chooses shardings, so
    there is nothing to carry over and this returns None.
    """
    sharding = getattr(x, "sharding", None)
    if sharding is None or isinstance(x, jax.core.Tracer):
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
