"""Data-parallel gradients that arrive already split the way ZeRO-1 wants them.

Plain data parallelism all-reduces the gradients: every device receives the
whole sum. With :class:`~gradax.shard_state` each device then updates only
its slice of the state, so most of that sum is thrown away. ZeRO-1 proper
(Rajbhandari et al.; DeepSpeed, MaxText) reduce-scatters the gradients
instead: each device receives the sum of its own slice only, and the
updates are all-gathered afterwards. A reduce-scatter plus an all-gather
move exactly an all-reduce's bytes, so the state is split with no traffic
added.

:func:`data_parallel_value_and_grad` is that gradient step: `shard_map` over
the data axis, each device differentiating its part of the batch, then a
`psum_scatter` on the dimension :func:`~gradax.sharding.zero_spec` picks for
the state (leaves it cannot split are averaged whole, as before).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from .._compat import shard_map
from .zero import axis_names, check_axes_on, mesh_of, zero_spec

P = jax.sharding.PartitionSpec

__all__ = ["data_parallel_value_and_grad"]


def _mesh(mesh: Any, axes: tuple[str, ...]) -> Any:
    owner = f"data_parallel_value_and_grad(axis={axes!r})"
    mesh = mesh_of(mesh, owner, "it")
    check_axes_on(axes, mesh.axis_names, owner)
    return mesh


def _varying(x: Any, name: Any) -> Any:
    """`x` marked as differing across `name`'s devices.

    Inside `shard_map` the gradient with respect to a replicated input is
    summed over the axis by the transpose itself (an all-reduce); with
    respect to a varying copy it is each device's own, which the
    `psum_scatter` below then sums, once.
    """
    if hasattr(jax.lax, "pcast"):
        return jax.lax.pcast(x, name, to="varying")
    # Its older name, looked up by string: jax 0.10 removed it, and the
    # static check of jax names (.ci/jax_names.py) reads attribute access.
    older = getattr(jax.lax, "pvary", None)
    if older is not None:
        return older(x, name)
    return x  # jax without varying types: no summing transpose either


def _scatter_dimension(spec: Any) -> int | None:
    """The dimension `zero_spec` split, or None for a leaf left whole."""
    if spec is None:
        return None
    return next(i for i, entry in enumerate(spec) if entry is not None)


def data_parallel_value_and_grad(
    fun: Callable[..., Any],
    *,
    axis: str | tuple[str, ...] = "data",
    mesh: Any = None,
    has_aux: bool = False,
) -> Callable[..., Any]:
    """`jax.value_and_grad(fun)` over a batch split on `axis`, reduce-scattered.

    The returned function takes `(params, *batch)`: the parameters
    replicated over `axis`, and batch arguments whose leading dimension is
    split over it. Each device differentiates `fun` on its part of the
    batch; the value (and `aux`, whose leaves must then be float arrays) is
    averaged over the axis, and each
    gradient leaf is averaged with a `psum_scatter`, so it comes back split
    over `axis` exactly as :class:`~gradax.shard_state` splits the state
    leaf shaped like it (:func:`~gradax.sharding.zero_spec`: the first
    dimension the device count divides). A leaf with no such dimension is
    averaged whole (an all-reduce) and comes back replicated.

    With `shard_state(tx, axis)` the step then needs no all-reduce of the
    gradients: each device holds the summed slice it updates, and the only
    other collective is the all-gather that brings the updates back to the
    replicated parameters (`apply_updates`). The bytes moved are the
    all-reduce's of plain data parallelism. The numbers are the mean
    gradient's up to summation order.

    `fun` must average over its batch (a mean loss), so that the mean over
    devices is the mean over the whole batch; with unequal per-device batch
    sizes it is not.

    Args:
      fun: `fun(params, *batch) -> loss` (or `(loss, aux)` with
        `has_aux`), a scalar mean over the batch it is given.
      axis: the data-parallel mesh axis (or a tuple of axes), as given to
        :class:`~gradax.shard_state`.
      mesh: the mesh; default: the one set with `jax.set_mesh`.
      has_aux: as in `jax.value_and_grad`.

    Returns:
      A function `(params, *batch) -> (value, grads)`, or
      `((value, aux), grads)` with `has_aux`; call it under `jit`.

    Example:
      >>> import jax, jax.numpy as jnp, gradax
      >>> from gradax.sharding import data_parallel_value_and_grad
      >>> mesh = jax.make_mesh((8,), ("data",))
      >>> loss = lambda p, x: jnp.mean((x @ p["w"]) ** 2)
      >>> params = {"w": jnp.ones((16, 4))}
      >>> with jax.set_mesh(mesh):
      ...     x = jax.device_put(jnp.ones((32, 16)), jax.sharding.PartitionSpec("data"))
      ...     value, grads = jax.jit(data_parallel_value_and_grad(loss))(params, x)
      >>> tuple(grads["w"].sharding.spec)
      ('data', None)
    """
    axes = axis_names(axis, "data_parallel_value_and_grad")
    if not callable(fun):
        raise TypeError(
            f"data_parallel_value_and_grad(fun=...) must be callable, got {fun!r}"
        )
    grad_fn = jax.value_and_grad(fun, has_aux=has_aux)
    name = axes[0] if len(axes) == 1 else axes

    def value_and_grad(params: Any, *batch: Any) -> Any:
        where = _mesh(mesh, axes)
        sizes = dict(where.shape)
        shapes = jax.tree.map(jax.numpy.shape, params)
        specs = jax.tree.map(
            lambda shape: zero_spec(shape, P(), axes, sizes),
            shapes,
            is_leaf=lambda x: isinstance(x, tuple),
        )
        out_grads = jax.tree.map(
            lambda spec: P() if spec is None else spec,
            specs,
            is_leaf=lambda x: x is None or isinstance(x, P),
        )

        def local(params: Any, *batch: Any) -> Any:
            params = jax.tree.map(lambda x: _varying(x, name), params)
            value, grads = grad_fn(params, *batch)
            value = jax.lax.pmean(value, name)  # and aux, leaf by leaf

            def reduce(g: Any, spec: Any) -> Any:
                dim = _scatter_dimension(spec)
                if dim is None:
                    return jax.lax.pmean(g, name)
                total = jax.lax.psum_scatter(g, name, scatter_dimension=dim, tiled=True)
                return total / jax.lax.psum(1, name)

            grads = jax.tree.map(
                reduce, grads, specs, is_leaf=lambda x: x is None or isinstance(x, P)
            )
            return value, grads

        value_spec = P()  # a prefix: the value, and aux if any, replicated
        mapped = shard_map(
            local,
            mesh=where,
            in_specs=(P(), *([P(name)] * len(batch))),
            out_specs=(value_spec, out_grads),
        )
        return mapped(params, *batch)

    return value_and_grad
