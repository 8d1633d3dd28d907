"""Orthogonalize many sharded matrices without collectives inside the loop.

Letting the compiler partition Newton–Schulz over a sharded matrix puts an
all-reduce of the Gram matrix inside every step. Instead, same-shape matrices
are stacked and the *stack* axis is sharded over every device of the mesh:
each device orthogonalizes whole matrices, so the iteration is local. The
only collectives are the re-layout before the loop and the one after it, so
their number does not depend on the number of steps.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from .._compat import reshard
from .._core.axes import explicit_sharding

P = jax.sharding.PartitionSpec


def current_mesh() -> Any | None:
    """The mesh set with `jax.set_mesh` (or `with mesh:`), if any."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh is None or mesh.empty or mesh.size <= 1:
        return None
    if any(t == jax.sharding.AxisType.Manual for t in mesh.axis_types):
        # Inside shard_map each device already runs its own program.
        return None
    return mesh


def _layout(x: jax.Array, mesh: Any, spec: Any) -> jax.Array:
    """Put `x` in the layout `spec` over `mesh` (Auto or Explicit axes)."""
    if explicit_sharding(x) is not None:
        return reshard(x, spec)
    return jax.lax.with_sharding_constraint(x, jax.NamedSharding(mesh, spec))


def orthogonalize_many(
    matrices: Sequence[jax.Array],
    orthogonalize: Callable[[jax.Array], jax.Array],
    mesh: Any,
) -> list[jax.Array]:
    """`[orthogonalize(m) for m in matrices]`, spread over `mesh`.

    Args:
      matrices: arrays of shape `(..., m, n)`.
      orthogonalize: maps a stack `(k, m, n)` to its orthogonalization.
      mesh: the device mesh; all of its axes are used for the stack axis.

    Returns:
      The orthogonalized matrices, each with its input's shape, dtype and
      (for Explicit axes) sharding.
    """
    devices = mesh.size
    stack_spec = P(tuple(mesh.axis_names), None, None)
    groups: dict[tuple, list[int]] = {}
    flat = []
    for i, x in enumerate(matrices):
        m, n = x.shape[-2:]
        wide = x if m <= n else jnp.swapaxes(x, -1, -2)
        batch = math.prod(x.shape[:-2])
        flat.append(wide.reshape(batch, *wide.shape[-2:]))
        groups.setdefault((wide.shape[-2:], x.dtype), []).append(i)
    out: list[Any] = [None] * len(matrices)
    for indices in groups.values():
        # Explicit axes need equal shardings to concatenate; under Auto axes
        # the compiler turns the re-layout into an all-to-all by itself.
        pieces = [flat[i] for i in indices]
        if any(explicit_sharding(x) is not None for x in pieces):
            pieces = [_layout(x, mesh, P()) for x in pieces]
        stack = jnp.concatenate(pieces)
        count = stack.shape[0]
        padded = -(-count // devices) * devices
        if padded != count:
            # Zero matrices orthogonalize to zero and keep the shards equal.
            stack = jnp.pad(stack, ((0, padded - count), (0, 0), (0, 0)))
        stack = _layout(stack, mesh, stack_spec)
        result = _layout(orthogonalize(stack), mesh, stack_spec)
        if explicit_sharding(result) is not None:
            result = _layout(result, mesh, P())
        offset = 0
        for i in indices:
            x = matrices[i]
            size = flat[i].shape[0]
            piece = result[offset : offset + size]
            offset += size
            m, n = x.shape[-2:]
            piece = piece.reshape(*x.shape[:-2], *piece.shape[-2:])
            if m > n:
                piece = jnp.swapaxes(piece, -1, -2)
            sharding = explicit_sharding(x)
            if sharding is not None:
                piece = reshard(piece, sharding.spec)
            out[i] = piece
    return out
