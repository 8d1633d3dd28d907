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
    """The mesh set with `jax.set_mesh` (`jax.sharding.use_mesh`), if any.

    Not the older `with mesh:` context, which sets no mesh JAX's public
    functions can read (its abstract mesh stays empty): under it pass the
    mesh itself (`distributed=mesh`).
    """
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


def _between(pieces: list, devices: int, mesh: Any) -> Any:
    """The common layout (Explicit axes) that `pieces` (stacks `(k, m, n)`
    of one shape) take to be concatenated, and the result to be cut back
    into them; None under Auto axes.

    Replicated: when any piece is replicated (a re-layout from it is a
    local slice). When all are split, as `shard_state` splits momenta, the
    rows `m` split over the whole mesh where it divides them: moving
    between that and the stack's split is an all-to-all, 1/n of what
    gathering each piece whole would move.
    """
    shardings = [explicit_sharding(x) for x in pieces]
    if all(s is None for s in shardings):
        return None
    split = all(s is not None and any(e is not None for e in s.spec) for s in shardings)
    if split and pieces[0].shape[-2] % devices == 0:
        return P(None, tuple(mesh.axis_names), None)
    return P()


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
        between = _between(pieces, devices, mesh)
        if between is not None:
            pieces = [_layout(x, mesh, between) for x in pieces]
        stack = jnp.concatenate(pieces)
        count = stack.shape[0]
        padded = -(-count // devices) * devices
        if padded != count:
            # Zero matrices orthogonalize to zero and keep the shards equal.
            stack = jnp.pad(stack, ((0, padded - count), (0, 0), (0, 0)))
        stack = _layout(stack, mesh, stack_spec)
        result = _layout(orthogonalize(stack), mesh, stack_spec)
        if between is not None:
            result = _layout(result, mesh, between)
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
