"""ZeRO-1: optimizer state sharded over a data-parallel mesh axis.

In data parallelism the parameters are replicated over the `data` axis, and
so is every state leaf made from them: each device keeps, and updates, the
whole optimizer state. :class:`shard_state` splits each state leaf over that
axis instead. Each device updates only its slice of the state, from its
slice of the (replicated) gradients, and the updates are gathered back to
the parameters' layout, so the training loop does not change.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from .._compat import reshard, shard_map
from .._core.axes import explicit_sharding
from .._core.protocol import GradientTransformation, as_transformation
from .._core.pytree import static_field

P = jax.sharding.PartitionSpec

__all__ = ["reduced_over", "shard_state", "zero_spec"]


def _names(entry: Any) -> tuple[str, ...]:
    """The mesh axis names of one entry of a PartitionSpec."""
    if entry is None or entry is P.UNCONSTRAINED:
        return ()
    if isinstance(entry, str):
        return (entry,)
    return tuple(entry)


def axis_names(axis: Any, owner: str) -> tuple[str, ...]:
    """``axis`` (a mesh axis name or a tuple of names) as a tuple of names."""
    axes = (axis,) if isinstance(axis, str) else axis
    if (
        not isinstance(axes, tuple)
        or not axes
        or not all(isinstance(a, str) for a in axes)
    ):
        raise TypeError(
            f"{owner}(axis=...) must be a mesh axis name (a str) or a "
            f"non-empty tuple of names, got {axis!r}"
        )
    return axes


def check_axes_on(axes: tuple[str, ...], names: Sequence[str], owner: str) -> None:
    """Refuse ``axes`` a mesh of axis ``names`` lacks."""
    missing = [a for a in axes if a not in names]
    if missing:
        raise ValueError(
            f"{owner}: the mesh has no axis "
            f"{', '.join(map(repr, missing))}; its axes are {tuple(names)}"
        )


def mesh_of(mesh: Any, owner: str, call: str) -> Any:
    """``mesh``, or the one set with ``jax.set_mesh`` where it is None."""
    if mesh is None:
        mesh = jax.sharding.get_abstract_mesh()
        if mesh is None or mesh.empty:
            raise ValueError(
                f"{owner} needs a mesh: call {call} under jax.set_mesh(mesh), "
                "or pass mesh=..."
            )
    return mesh


def zero_spec(
    shape: Sequence[int],
    spec: Any,
    axes: Sequence[str],
    sizes: dict[str, int],
    unconstrained: bool = False,
) -> Any | None:
    """Where :class:`shard_state` puts a leaf: `spec` split over `axes`.

    The rule: the first dimension whose size is a multiple of the number of
    devices it would then be split over (the sizes of the mesh axes already
    on it times those of `axes`) gets `axes` added after its own. A leaf
    with no such dimension, a scalar, or one already split over one of
    `axes` is left as it is (None is returned).

    Args:
      shape: the leaf's shape.
      spec: its current PartitionSpec (`P()` for replicated).
      axes: the mesh axes to split over.
      sizes: every mesh axis's size, by name.
      unconstrained: leave the other dimensions to the compiler
        (`P.UNCONSTRAINED`; for Auto mesh axes, where the leaf's current
        sharding is not known while tracing).

    Returns:
      The new PartitionSpec, or None to leave the leaf as it is.
    """
    entries = list(_entries(spec))
    entries += [None] * (len(shape) - len(entries))
    if any(a in _names(e) for e in entries for a in axes):
        return None
    split = int(np.prod([sizes[a] for a in axes]))
    for dim, size in enumerate(shape):
        already = int(np.prod([sizes[a] for a in _names(entries[dim])]))
        if size > 0 and size % (already * split) == 0:
            names = (*_names(entries[dim]), *axes)
            fill = P.UNCONSTRAINED if unconstrained else None
            out: list[Any] = [fill if i != dim else None for i in range(len(shape))]
            if not unconstrained:
                out = [e if i != dim else None for i, e in enumerate(entries)]
            out[dim] = names[0] if len(names) == 1 else names
            return P(*out)
    return None


def reduced_over(params: Any, axis: Any = "data") -> Any:
    """`params` replicated *and reduced* over `axis` (Explicit mesh axes).

    A parameter whose type is reduced over the data axis has an *unreduced*
    gradient under a plain `jax.grad`: each device its part of the batch's
    sum, nothing communicated yet. :class:`shard_state` then sums each into
    the slice it updates with one reduce-scatter, and a ZeRO-1 step moves
    data parallelism's bytes. Each leaf keeps the split it has over other
    axes (tensor parallelism's); `axis` is added to its reduced axes.
    Works on arrays (placed anew) and inside `jit` (a `reshard`, free).

    Args:
      params: a pytree of arrays, their mesh's `axis` Explicit.
      axis: the data-parallel mesh axis (or a tuple of axes).

    Returns:
      `params` with each array's type reduced over `axis`.

    Raises:
      ValueError: a leaf not on a mesh with Explicit `axis`, or already
        split over it (a parameter sharded over the data axis, as FSDP's,
        has no reduced form), or a jax without reduced types.

    Example:
      >>> import jax, jax.numpy as jnp, gradax
      >>> explicit = jax.sharding.AxisType.Explicit
      >>> mesh = jax.make_mesh((8,), ("data",), axis_types=(explicit,))
      >>> with jax.set_mesh(mesh):
      ...     params = gradax.sharding.reduced_over({"w": jnp.ones((4, 8))})
      >>> print(jax.typeof(params["w"]))
      float32[4,8]{R:data}
    """
    axes = axis_names(axis, "reduced_over")
    if not hasattr(P(), "reduced"):
        raise ValueError(
            f"reduced_over needs a jax with reduced sharding types; this is "
            f"jax {jax.__version__}"
        )

    def one(path: tuple, x: Any) -> Any:
        where = jax.tree_util.keystr(path) or "the tree"
        sharding = explicit_sharding(x)
        kinds = {}
        if sharding is not None:
            mesh = sharding.mesh
            kinds = dict(zip(mesh.axis_names, mesh.axis_types, strict=True))
        explicit = jax.sharding.AxisType.Explicit
        if sharding is None or any(kinds.get(a) != explicit for a in axes):
            raise ValueError(
                f"reduced_over(axis={axis!r}): {where} is not on a mesh whose "
                f"{axes} axes are Explicit (place it there first, e.g. made "
                "under jax.set_mesh); on Auto axes use "
                "gradax.sharding.data_parallel_value_and_grad"
            )
        spec = sharding.spec
        used = {n for e in _entries(spec) for n in _names(e)}
        if used & set(axes):
            raise ValueError(
                f"reduced_over(axis={axis!r}): {where} is split over "
                f"{sorted(used & set(axes))} ({spec}); only a parameter "
                "replicated over the axis can be reduced over it"
            )
        unreduced, reduced = _sums(spec)
        new = P(*_entries(spec), unreduced=unreduced, reduced=reduced | set(axes))
        if isinstance(x, jax.core.Tracer):
            return reshard(x, new)
        return jax.device_put(x, jax.NamedSharding(sharding.mesh, new))

    return jax.tree_util.tree_map_with_path(one, params)


@dataclasses.dataclass(frozen=True)
class _Layout:
    """A leaf's layout before :class:`shard_state` split it, and after."""

    before: Any
    split: Any


def _sums(spec: Any) -> tuple[frozenset, frozenset]:
    """`spec`'s unreduced axes (each device holds a partial sum: the
    gradient of a parameter that is `reduced` over them) and reduced axes
    (a replicated value whose gradient comes back unreduced). Empty on a
    jax without them."""
    return (
        frozenset(getattr(spec, "unreduced", ())),
        frozenset(getattr(spec, "reduced", ())),
    )


def _entries(spec: Any) -> tuple:
    """`spec`'s per-dimension entries (iterating a spec with reduced or
    unreduced axes raises)."""
    return tuple(getattr(spec, "partitions", spec))


def _plain(spec: Any) -> Any:
    """`spec` without reduced or unreduced axes (an ordinary value)."""
    return P(*_entries(spec))


def _as_parameter(spec: Any) -> Any:
    """`spec` with its unreduced axes made reduced: the type of the
    parameter whose gradient had `spec`, where its update must go back."""
    unreduced, reduced = _sums(spec)
    return P(*_entries(spec), reduced=unreduced | reduced)


def _is_quantized(x: Any) -> bool:  # a gradax QuantizedArray
    return callable(getattr(x, "with_codes", None))


def _is_array(x: Any) -> bool:
    return isinstance(x, (jax.Array, np.ndarray)) or isinstance(x, jax.core.Tracer)


class shard_state(GradientTransformation):
    """ZeRO-1: shards a transformation's state over a data-parallel mesh axis.

    With data parallelism the parameters are replicated over the `axis`
    devices, and so is the optimizer state. Wrapped in `shard_state`, each
    state leaf is split over `axis` instead: every device keeps `1/n` of
    it (`n` devices on the axis). `update` hands the inner transformation
    the gradients and parameters laid out like the state (a slice of a
    replicated array: no communication), so each device updates its own
    slice; the updates are then gathered back to the gradients' layout
    (replicated, or the parameters' sharding), and the loop is unchanged. The
    numbers are the inner transformation's: bit for bit where it works
    element by element, and up to summation order where it reduces over a
    split dimension (a global norm adds per-device partial sums).

    Which leaves: those shaped like the parameter at the same path
    (`mu['w']` like `params['w']`), or a stack of such (L-BFGS's
    memories), and 8-bit codes with their block scales: the state that
    grows with the model. Other leaves stay as the inner transformation
    makes them: step counts, Adafactor's factored statistics (a row and a
    column), and the preconditioners of Shampoo, SOAP and Kron, whose
    inverse roots each device computes whole (splitting them needs those
    computations distributed, as Muon's are).

    Which dimension (see :func:`zero_spec`): the first whose size is a
    multiple of the number of devices it would be split over; a leaf with
    none stays replicated, and one already split over `axis` (FSDP
    parameters) stays as it is. The first dimension, rather than the
    largest, keeps a stack of layers `(L, m, n)` whole per matrix, and 8-bit
    block scales beside their codes: under `jax.set_mesh` the Muon family
    stacks same-shape matrices and gives each device whole matrices to
    orthogonalize (:func:`gradax.sharding.distributed.orthogonalize_many`),
    which for such a stack is the slice the device already owns.

    Works under `jit` with Explicit mesh axes (the split is in the state's
    types and stays there through `cond`, `while_loop` and `scan`) and
    with Auto axes (sharding constraints; the other dimensions are left to
    the compiler). The state's tree is the inner one's, unchanged: a
    checkpoint restores with or without the wrapper, given the target
    shardings.

    Traffic: replicated gradients cost data parallelism's all-reduce plus
    an all-gather of the updates. On Explicit axes, parameters replicated
    and *reduced* over `axis` (:func:`reduced_over`) make a plain
    `jax.grad` return their gradients *unreduced* (each device its part of
    the batch's sum); `shard_state` sums each into the slice it updates with
    one reduce-scatter and returns the updates as the parameters' type:
    data parallelism's bytes. On Auto axes,
    :func:`gradax.sharding.data_parallel_value_and_grad` does the same.

    Args:
      tx: the transformation whose state to shard.
      axis: the mesh axis (or a tuple of axes) to split the state over.
      mesh: the mesh; default: the one set with `jax.set_mesh`.

    Returns:
      A transformation with the inner one's state tree and numbers.

    Example:
      >>> import jax, jax.numpy as jnp, gradax
      >>> mesh = jax.make_mesh((8,), ("data",))
      >>> tx = gradax.shard_state(gradax.adam(1e-3), axis="data")
      >>> with jax.set_mesh(mesh):
      ...     state = jax.jit(tx.init)({"w": jnp.ones((64, 3))})
      >>> {s.data.shape for s in state[0].mu["w"].addressable_shards}
      {(8, 3)}

    References:
      Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training
      Trillion Parameter Models", arXiv:1910.02054 (stage 1: optimizer
      state partitioning); MaxText's `shard_optimizer_over_data`.
    """

    tx: Any
    axis: Any = static_field(default="data")
    mesh: Any = static_field(default=None)

    def __check_init__(self) -> None:
        # At construction, not at the first init inside jit: a wrong axis is
        # a typo in the configuration, best reported where it was written.
        axes = self._axes()
        self._inner()
        if self.mesh is not None:
            names = getattr(self.mesh, "axis_names", None)
            if names is None:
                raise TypeError(
                    "shard_state(mesh=...) must be a jax.sharding.Mesh (or "
                    f"AbstractMesh) or None, got {type(self.mesh).__name__}"
                )
            self._check_axes_on(axes, names)

    # -- the mesh and the layout ---------------------------------------------

    def _axes(self) -> tuple[str, ...]:
        return axis_names(self.axis, "shard_state")

    def _check_axes_on(self, axes: tuple[str, ...], names: Sequence[str]) -> None:
        check_axes_on(axes, names, f"shard_state(axis={self.axis!r})")

    def _mesh(self) -> tuple[Any, bool]:
        """The mesh, and whether `axis` is Explicit on it."""
        axes = self._axes()
        mesh = mesh_of(self.mesh, f"shard_state(axis={self.axis!r})", "init and update")
        self._check_axes_on(axes, mesh.axis_names)
        types = dict(zip(mesh.axis_names, mesh.axis_types, strict=True))
        kinds = {types[a] for a in axes}
        axis_type = jax.sharding.AxisType
        if axis_type.Manual in kinds or len(kinds) > 1:
            raise ValueError(
                f"shard_state(axis={self.axis!r}): the axis must be Auto or "
                f"Explicit (all the same kind), not {sorted(map(str, kinds))}; "
                "inside shard_map each device already holds its own state"
            )
        return mesh, axis_type.Explicit in kinds

    def _put(self, x: Any, spec: Any, mesh: Any, explicit: bool) -> Any:
        where = spec if self.mesh is None else jax.NamedSharding(mesh, spec)
        if explicit:
            return reshard(x, where)
        return jax.lax.with_sharding_constraint(x, where)

    def _reduce_scatter(self, x: Any, spec: Any, split: Any, mesh: Any) -> Any:
        """The unreduced gradient `x` (type `spec`) summed into the slice
        each device keeps (`split`): one reduce-scatter, where reducing
        first and slicing after moves twice the bytes (XLA:CPU never fuses
        the two)."""
        axes = self._axes()
        dim = next(
            i for i, e in enumerate(_entries(split)) if set(axes) <= set(_names(e))
        )
        rest = tuple(sorted(_sums(spec)[0] - set(axes)))

        def local(block: jax.Array) -> jax.Array:
            if rest:  # other unreduced axes: summed whole
                block = jax.lax.psum(block, rest)
            name = axes[0] if len(axes) == 1 else axes
            return jax.lax.psum_scatter(block, name, scatter_dimension=dim, tiled=True)

        where = {} if self.mesh is None else {"mesh": mesh}
        return shard_map(local, in_specs=spec, out_specs=split, **where)(x)

    def _split(self, tree: Any, like: Any) -> tuple[Any, Any]:
        """`tree` with each leaf shaped like a leaf of `like` (at the same
        path, as `mu['w']` is like `params['w']`) split over the axis,
        and the leaves' layouts before (to gather back to); None where a
        leaf is left as it is."""
        mesh, explicit = self._mesh()
        axes, sizes = self._axes(), dict(mesh.shape)
        shapes = {
            tuple(path): np.shape(leaf)
            for path, leaf in jax.tree_util.tree_flatten_with_path(like)[0]
        }

        def parameter_shaped(path: tuple, shape: tuple) -> bool:
            for start in range(len(path) + 1):
                ref = shapes.get(tuple(path[start:]))
                if ref is not None:
                    return shape == ref or (len(ref) > 0 and shape[1:] == ref)
            return False

        def layout(x: Any) -> Any:
            if explicit:
                sharding = explicit_sharding(x)
                spec = P() if sharding is None else sharding.spec
                new = zero_spec(x.shape, spec, axes, sizes)
                if any(_sums(spec)):
                    # A reduced parameter or its unreduced gradient: the
                    # inner transformation gets an ordinary value, and the
                    # update goes back as the parameter's type.
                    before = _as_parameter(spec)
                    return _Layout(before, _plain(spec) if new is None else new)
            else:
                spec = P(*[P.UNCONSTRAINED] * np.ndim(x))
                new = zero_spec(x.shape, P(), axes, sizes, unconstrained=True)
            return None if new is None else _Layout(spec, new)

        def put(x: Any, lay: Any) -> Any:
            if lay is None:
                return x
            sharding = explicit_sharding(x) if explicit else None
            spec = P() if sharding is None else sharding.spec
            if set(axes) <= _sums(spec)[0] and lay.split != _plain(lay.before):
                # Split over the axes it is unreduced on: one reduce-scatter.
                return self._reduce_scatter(x, spec, lay.split, mesh)
            return self._put(x, lay.split, mesh, explicit)

        def one(path: tuple, x: Any) -> Any:
            if _is_quantized(x):
                # 8-bit codes have the parameter's shape and the block scales
                # its leading dimensions: both split on the same dimension.
                if not parameter_shaped(tuple(path), tuple(x.shape)):
                    return x, None
                lay = layout(x.codes)
                scales = layout(x.scales) if lay is not None else None
                codes = put(x.codes, lay)
                new = dataclasses.replace(x, codes=codes, scales=put(x.scales, scales))
                return new, None
            if not _is_array(x) or not np.ndim(x):
                return x, None
            if not parameter_shaped(tuple(path), tuple(np.shape(x))):
                return x, None
            lay = layout(x)
            return put(x, lay), lay

        leaves, treedef = jax.tree_util.tree_flatten_with_path(
            tree, is_leaf=_is_quantized
        )
        pairs = [one(path, x) for path, x in leaves]
        split = treedef.unflatten([x for x, _ in pairs])
        return split, [lay for _, lay in pairs]

    def _gather(self, tree: Any, layouts: list) -> Any:
        """Each leaf of `tree` back in the layout `_split` took it from."""
        mesh, explicit = self._mesh()

        def one(x: Any, layout: Any) -> Any:
            if layout is None:
                return x
            before = layout.before
            if not explicit:
                # Gather the split dimension; the others stay the compiler's.
                free = P.UNCONSTRAINED
                before = P(*[e if e is free else None for e in layout.split])
            return self._put(x, before, mesh, explicit)

        leaves, treedef = jax.tree_util.tree_flatten(tree, is_leaf=_is_quantized)
        return treedef.unflatten(map(one, leaves, layouts))

    def _keep(self, new: Any, old: Any) -> Any:
        """The new state in the layout of the old (stable types in `scan`)."""
        mesh, explicit = self._mesh()

        def one(n: Any, o: Any) -> Any:
            if not _is_array(n) or not np.ndim(n):
                return n
            if explicit:
                sharding = explicit_sharding(o)
                if sharding is None or sharding == explicit_sharding(n):
                    return n
                return self._put(n, sharding.spec, mesh, explicit)
            return n

        new_leaves, treedef = jax.tree_util.tree_flatten(new)
        return treedef.unflatten(map(one, new_leaves, jax.tree.leaves(old)))

    def _inner(self) -> GradientTransformation:
        return as_transformation(self.tx, "shard_state(tx=...)")

    def init_state(self, params):
        return self._split(self._inner().init(params), params)[0]

    def update_state(self, updates, state, params=None, **extra_args):
        like = updates if params is None else params
        # A state restored or built without the wrapper is split here too.
        state = self._split(state, like)[0]
        updates, layouts = self._split(updates, updates)
        if params is not None:
            params = self._split(params, params)[0]
        updates, new = self._inner().update(updates, state, params, **extra_args)
        # Auto axes: the split again (a constraint); Explicit: the types kept.
        new = self._split(new, like)[0] if not self._mesh()[1] else new
        return self._gather(updates, layouts), self._keep(new, state)
