"""Optimizer state kept in host memory, streamed to the device for each update."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax

from .._compat import memory_space
from .._core.declarations import OneOf, hyper
from .._core.protocol import (
    GradientTransformation,
    TransformationLike,
    read_through_to_inner,
    transformation_field,
)


class OffloadedState(NamedTuple):
    """State of :class:`offload_state`: the inner state, in host memory.

    Reading an attribute it lacks reads the inner state's (`state.mu`).
    """

    inner_state: Any

    # The base class hands a hook its state read as float32 (quantized leaves
    # loaded); this state is loaded by the inner transformation, on the device.
    _loads_itself = True

    __getattr__ = read_through_to_inner


def _to(state: Any, space: Any) -> Any:
    return jax.tree.map(lambda x: jax.device_put(x, space), state)


def _is_committed(x: Any) -> bool:
    return (
        isinstance(x, jax.Array)
        and not isinstance(x, jax.core.Tracer)
        and bool(getattr(x, "committed", False))
    )


def _home(params: Any) -> Any:
    """Where to put a state leaf the params' devices should hold: their one
    device, or a replicated sharding over their mesh; None for params JAX
    may move (uncommitted) or traced."""
    committed = [x for x in jax.tree.leaves(params) if _is_committed(x)]
    if not committed:
        return None
    sharding = committed[0].sharding
    if isinstance(sharding, jax.sharding.NamedSharding):
        return jax.sharding.NamedSharding(sharding.mesh, jax.sharding.PartitionSpec())
    if len(sharding.device_set) == 1:
        return next(iter(sharding.device_set))  # jax.device_put takes a device
    return None


def _placed(state: Any, home: Any) -> Any:
    """Leaves made on the default device (a count) moved to `home` first:
    moving an uncommitted leaf to host memory commits it to the default
    device, and a step then mixes it with params on another."""
    if home is None:
        return state
    return jax.tree.map(
        lambda x: (
            x
            if _is_committed(x) or not isinstance(x, jax.Array)
            else jax.device_put(x, home)
        ),
        state,
    )


class offload_state(GradientTransformation):
    """Keeps a transformation's state in host memory between updates.

    `init` places the inner state in host memory (`pinned_host`);
    `update` copies it to the device, runs the inner update there, and
    copies the new state back. Parameters, gradients and updates stay where
    they are, and the numbers are those of the inner transformation, bit for
    bit: only where the state lives changes. Inside `jit` the copies are
    part of the compiled program, so XLA can overlap them with compute.

    Cost: each update moves the state across the host link twice (read and
    write). AdamW in float32 moves 16 bytes per parameter a step; with
    8-bit moments (:class:`gradax.int8_blockwise`) about 4. On a GPU whose
    host link is much slower than its memory this bounds the step time from
    below (see docs/memory.md); on the CPU backend host and device memory are
    the same RAM.

    Why a wrapper and not an `init` argument: it works for every
    transformation (gradax or optax) without an argument in each, and an
    offloaded state differs from the plain one only by this wrapper's node,
    so a checkpoint can be loaded with or without it by reading
    `state.inner_state`.

    Args:
      tx: the transformation whose state to keep in host memory.
      memory_kind: `"pinned_host"` (JAX's host memory space; the only host
        kind JAX 0.10 tracks inside `jit`) or `"device"` (no offload,
        for switching it off from a configuration).

    Returns:
      A transformation whose state is an :class:`OffloadedState`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.offload_state(gradax.adam(1e-3))
      >>> state = tx.init(jnp.ones(3))
      >>> state.inner_state[0].mu.sharding.memory_kind
      'pinned_host'

    References:
      JAX memory kinds (`jax.memory.Space`, `jax.device_put`); MaxText's
      `optimizer_memory_host_offload`.
    """

    tx: TransformationLike = transformation_field()
    memory_kind: str = hyper(
        default="pinned_host", valid=OneOf(("pinned_host", "device")), static=True
    )

    def _space(self) -> Any:
        if self.memory_kind == "device":
            return memory_space("Device")
        return memory_space("Host")

    def init_state(self, params):
        inner = _placed(self.tx.init(params), _home(params))
        return OffloadedState(_to(inner, self._space()))

    def update_state(self, updates, state, params=None, **extra_args):
        old = state.inner_state
        on_device = _to(old, memory_space("Device"))
        updates, new = self.tx.update(updates, on_device, params, **extra_args)
        # Each leaf goes back to the memory it came from (the types of the
        # state stay those of the input, as lax.cond and scan require).
        new = jax.tree.map(
            lambda n, o: jax.device_put(n, jax.typeof(o).memory_space), new, old
        )
        return updates, OffloadedState(new)
