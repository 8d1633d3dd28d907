"""microbatch, micro_vmap and micro_grad: evaluate a function batch by batch."""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from .._compat import are_all_axes_explicit
from ._accumulate import AccumulationType, canonicalize

IndividualOutputs = collections.namedtuple("Aux", ["values", "metrics", "aux"])


def reshape_batch_axis(tree: Any, microbatch_size: int, axis: int = 0) -> Any:
    """Splits the batch axis of every leaf into `(num_microbatches, microbatch_size)`.

    The split is in Fortran order: microbatch `i` holds the rows `i,
    i + num_microbatches, ...`, so a sharding of the batch axis stays on the
    `microbatch_size` axis (with Explicit mesh axes the result says so) and
    the `num_microbatches` axis is replicated.

    Args:
      tree: a tree of arrays with a batch axis.
      microbatch_size: the rows per microbatch; it must divide the batch size.
      axis: the batch axis.

    Returns:
      The tree with each leaf's batch axis replaced by two axes.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> gradax.microbatching.reshape_batch_axis(jnp.arange(6), 3)
      Array([[0, 2, 4],
             [1, 3, 5]], dtype=int32)
    """

    def split(x):
        shape = (*x.shape[:axis], -1, microbatch_size, *x.shape[axis + 1 :])
        sharding = getattr(jax.typeof(x), "sharding", None)
        mesh = getattr(sharding, "mesh", None)
        if sharding is None or mesh is None or mesh.empty:
            return x.reshape(shape, order="F")
        if not are_all_axes_explicit(mesh):
            return x.reshape(shape, order="F")
        spec = tuple(sharding.spec)
        if len(spec) > axis:
            shards = x.shape[axis] // sharding.shard_shape(x.shape)[axis]
            if microbatch_size % shards:
                raise ValueError(
                    f"the {shards} shards of the batch axis must divide "
                    f"{microbatch_size=}"
                )
            spec = (*spec[:axis], None, spec[axis], *spec[axis + 1 :])
        target = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*spec))
        return jnp.reshape(x, shape, order="F", out_sharding=target)

    return jax.tree.map(split, tree)


def _as_tuple(value: Any, kind: type) -> tuple:
    return (value,) if isinstance(value, kind) else tuple(value)


def microbatch(
    fun: Callable[..., Any],
    argnums: int | Sequence[int],
    microbatch_size: int | None,
    accumulator: Any = AccumulationType.SUM,
    *,
    argnames: str | Sequence[str] = (),
    in_axes: int | Sequence[int] = 0,
    num_real_microbatches: int | jax.Array | None = None,
) -> Callable[..., Any]:
    """Evaluates `fun` one microbatch at a time and combines the results.

    The batch arguments are split into microbatches of `microbatch_size`
    rows (see :func:`reshape_batch_axis`); `fun` runs on each in a
    `lax.fori_loop` and the results are combined by `accumulator`. Peak
    memory is that of one microbatch.

    Args:
      fun: any function.
      argnums: the positions of the arguments with a batch axis.
      microbatch_size: rows per microbatch (it must divide the batch size);
        None returns `fun` itself.
      accumulator: an :class:`AccumulationType`, an :class:`Accumulator`, or
        a tree of them that is a prefix of `fun`'s result.
      argnames: the keyword arguments with a batch axis.
      in_axes: the batch axis of each argument of `argnums` then
        `argnames` (one int for all).
      num_real_microbatches: stop after this many microbatches (an array is
        allowed, so a smaller real batch does not recompile).

    Returns:
      A function with `fun`'s arguments.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> mb = gradax.microbatching
      >>> f = mb.microbatch(
      ...     lambda x: (x + 1, jnp.sum(3 * x)), argnums=0, microbatch_size=2,
      ...     accumulator=(mb.AccumulationType.CONCAT, mb.AccumulationType.SUM),
      ... )
      >>> f(jnp.array([1, 2, 3, 4]))
      (Array([2, 3, 4, 5], dtype=int32), Array(30, dtype=int32))
    """
    if microbatch_size is None:
        return fun
    argnums = _as_tuple(argnums, int)
    argnames = _as_tuple(argnames, str)
    count = len(argnums) + len(argnames)
    axes = (in_axes,) * count if isinstance(in_axes, int) else tuple(in_axes)

    def microbatched(*args, **kwargs):
        batched = [args[i] for i in argnums] + [kwargs[n] for n in argnames]
        sizes = {
            leaf.shape[ax]
            for ax, tree in zip(axes, batched, strict=True)
            for leaf in jax.tree.leaves(tree)
        }
        if len(sizes) != 1:
            raise ValueError(f"The batch arguments have different batch sizes {sizes}.")
        if (batch_size := sizes.pop()) % microbatch_size:
            raise ValueError(f"{batch_size=} must be divisible by {microbatch_size=}.")
        num_microbatches = batch_size // microbatch_size
        args, kwargs = list(args), dict(kwargs)
        for i, ax in zip(argnums, axes, strict=False):
            args[i] = reshape_batch_axis(args[i], microbatch_size, ax)
        for name, ax in zip(argnames, axes[len(argnums) :], strict=True):
            kwargs[name] = reshape_batch_axis(kwargs[name], microbatch_size, ax)
        acc = canonicalize(accumulator, num_microbatches)

        def run(index):
            def pick(tree, ax):
                return jax.tree.map(lambda x: jnp.take(x, index, axis=ax), tree)

            call_args, call_kwargs = list(args), dict(kwargs)
            for i, ax in zip(argnums, axes, strict=False):
                call_args[i] = pick(args[i], ax)
            for name, ax in zip(argnames, axes[len(argnums) :], strict=True):
                call_kwargs[name] = pick(kwargs[name], ax)
            return fun(*call_args, **call_kwargs)

        stop = (
            num_microbatches if num_real_microbatches is None else num_real_microbatches
        )
        carry = jax.lax.fori_loop(
            0,
            stop,
            lambda i, c: acc.update(c, run(i), i),
            acc.init(jax.eval_shape(run, 0)),
        )
        return acc.finalize(carry)

    return microbatched


def micro_vmap(
    fun: Callable[..., Any],
    in_axes: int | Sequence[int | None] = 0,
    out_axes: Any = 0,
    *,
    microbatch_size: int | None = None,
    vmap_fn: Callable[..., Any] = jax.vmap,
    accumulator: Any = AccumulationType.CONCAT,
    num_real_microbatches: int | jax.Array | None = None,
) -> Callable[..., Any]:
    """`jax.vmap` evaluated one microbatch at a time, optionally reduced.

    Keyword arguments are mapped over axis 0. With the default `CONCAT`
    accumulator the result equals `jax.vmap(fun, in_axes)(...)`; `SUM` and
    `MEAN` reduce over the batch without ever holding all of it.

    Differences from optax: an integer `in_axes` applies to every
    positional argument (optax: only to the first).

    Args:
      fun: the function to map.
      in_axes: the mapped axis of each positional argument (None: not
        mapped), or one int for all.
      out_axes: must be 0.
      microbatch_size: rows per microbatch; None maps the whole batch at once.
      vmap_fn: a function with the signature of `jax.vmap`.
      accumulator: how to combine the results; see :func:`microbatch`.
      num_real_microbatches: stop after this many microbatches.

    Returns:
      The mapped function.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> square = gradax.microbatching.micro_vmap(lambda x: x**2, microbatch_size=2)
      >>> square(jnp.arange(4))
      Array([0, 1, 4, 9], dtype=int32)
    """
    if out_axes != 0:
        raise NotImplementedError("micro_vmap supports only out_axes=0")

    def reduced(*args, kwargs):
        output = vmap_fn(fun, axes_for(args), out_axes)(*args, **kwargs)
        rows = jax.tree.leaves(output)[0].shape[0]
        return canonicalize(accumulator, rows).aggregate(output)

    def axes_for(args):
        return (in_axes,) * len(args) if isinstance(in_axes, int) else tuple(in_axes)

    def mapped(*args, **kwargs):
        axes = axes_for(args)
        inner = microbatch(
            reduced,
            argnums=tuple(i for i, ax in enumerate(axes) if ax is not None),
            argnames="kwargs",
            microbatch_size=microbatch_size,
            accumulator=accumulator,
            in_axes=tuple(ax for ax in axes if ax is not None) + (0,),
            num_real_microbatches=num_real_microbatches,
        )
        return inner(*args, kwargs=kwargs)

    return mapped


def micro_grad(
    fun: Callable[..., Any],
    has_aux: bool = False,
    argnums: int | Sequence[int] = 0,
    *,
    batch_argnums: int | Sequence[int] = 1,
    keep_batch_dim: bool = True,
    microbatch_size: int | None = None,
    accumulator: Any = AccumulationType.SUM,
    transform_fn: Callable[[Any], Any] = lambda x: x,
    metrics_fn: Callable[[Any], Any] = lambda x: None,
    num_real_microbatches: int | jax.Array | None = None,
) -> Callable[..., tuple[Any, Any]]:
    """Per-example gradients, transformed and combined, in microbatches.

    Each example's gradient `g` of `fun` is computed (with
    `jax.value_and_grad` under :func:`micro_vmap`), `transform_fn(g)` is
    combined over the batch by `accumulator` (e.g. clipped and summed for
    differential privacy), and per-example values, `metrics_fn(g)` and aux
    outputs are returned alongside.

    Args:
      fun: `fun(params, batch, ...)`, a scalar loss (`(loss, aux)`).
      has_aux: whether `fun` returns `(loss, aux)`.
      argnums: the arguments to differentiate.
      batch_argnums: the arguments with a batch axis.
      keep_batch_dim: give `fun` each example with a batch axis of size 1.
      microbatch_size: examples per microbatch; None for all at once.
      accumulator: how to combine the transformed gradients.
      transform_fn: applied to each per-example gradient.
      metrics_fn: per-example metrics of the gradient.
      num_real_microbatches: stop after this many microbatches.

    Returns:
      A function returning `(combined, aux)`, with `aux.values`,
      `aux.metrics` and `aux.aux` per example.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> mb = gradax.microbatching
      >>> def loss(w, x, y):
      ...     return 0.5 * jnp.mean((x @ w - y) ** 2)
      >>> g, aux = mb.micro_grad(
      ...     loss, batch_argnums=(1, 2), accumulator=mb.AccumulationType.MEAN
      ... )(jnp.zeros(1), jnp.ones((4, 1)), jnp.array([0.0, 2.0, 4.0, 6.0]))
      >>> g
      Array([-3.], dtype=float32)
    """
    batch_argnums = _as_tuple(batch_argnums, int)
    with_aux = fun if has_aux else (lambda *a, **k: (fun(*a, **k), None))
    value_and_grad = jax.value_and_grad(with_aux, argnums, has_aux=True)

    def one_example(*args, **kwargs):
        (value, aux), grad = value_and_grad(*args, **kwargs)
        return transform_fn(grad), IndividualOutputs(value, metrics_fn(grad), aux)

    axes = [None] * (max(batch_argnums) + 1)
    for i in batch_argnums:
        axes[i] = 0
    mapped = micro_vmap(
        one_example,
        in_axes=tuple(axes),
        accumulator=(accumulator, AccumulationType.CONCAT),
        microbatch_size=microbatch_size,
        num_real_microbatches=num_real_microbatches,
    )
    if not keep_batch_dim:
        return mapped

    def with_unit_batch(*args, **kwargs):
        args = list(args)
        for i in batch_argnums:
            args[i] = jax.tree.map(lambda x: jnp.expand_dims(x, 1), args[i])
        return mapped(*args, **kwargs)

    return with_unit_batch
