"""The numbers :func:`gradax.with_metrics` records, computed from one step.

Every metric is a float32 scalar (an array of a fixed shape for the
attention logits), so the state keeps its types under `lax.cond` and
`scan`. The reductions are sums of squares per leaf, added per group: one
reduction of each gradient, update and parameter leaf. A gradient leaf that
a `clip_by_global_norm` at the front of the transformation already reduces
is reduced by the same operations, so XLA computes that sum once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

from .._compat import memory_space
from .._core.axes import explicit_sharding
from .._core.hyper import is_schedule
from .._core.protocol import Alias, Foreign
from .._core.storage import load_state
from ..combinators.conditional import apply_if_finite
from ..combinators.spikes import skip_loss_spikes
from ..linalg.matrices import is_spec_leaf
from ..orthogonal.blocks import matrix_blocks
from ..schedules import InjectStatefulHyperparamsState
from ..tree import get_all_with_path
from . import _anatomy as anatomy

F32 = jnp.float32

# The optional metrics, by the name `extras=` takes.
EXTRAS = ("leaf_norms", "orthogonality", "max_logits")


# Leaves of at most this many elements are summed together, per group and
# per dtype and shape past the first axis, in one kernel (see `square_sums`).
SMALL = 1 << 14

# Whether to join small leaves and fence the gradients (see `square_sums`):
# None follows the backend the step is traced for, True or False forces it.
JOIN_SMALL_LEAVES: bool | None = None


def _joins_small_leaves() -> bool:
    """XLA:CPU runs each reduction as a kernel of its own, and benefits from
    joined sums and the fence; a backend that fuses reductions into the
    loops that read the leaf already (XLA:TPU: measured by compiling ahead
    of time, `benchmarks/bench_monitor.py --tpu`) sums each leaf by itself,
    where the fusion puts it, with no barrier in the way."""
    if JOIN_SMALL_LEAVES is not None:
        return JOIN_SMALL_LEAVES
    return jax.default_backend() == "cpu"


def squares(x: Any) -> jax.Array | None:
    """`|x|**2` in at least float32 (None for float0 gradients, which hold
    no numbers). For a float32 leaf these are the operations of
    `gradax.tree.norm` (and so of `clip_by_global_norm`)."""
    x = jnp.asarray(x)
    if not (jnp.issubdtype(x.dtype, jnp.number) or x.dtype == jnp.bool_):
        return None
    if jnp.iscomplexobj(x):
        wide = x.astype(jnp.promote_types(x.dtype, jnp.complex64))
        return jnp.square(jnp.real(wide)) + jnp.square(jnp.imag(wide))
    return jnp.square(x.astype(jnp.promote_types(x.dtype, F32)))


def square_sum(x: Any) -> jax.Array:
    """`sum(|x|**2)` in at least float32, returned as float32."""
    sq = squares(x)
    return jnp.zeros([], F32) if sq is None else jnp.sum(sq).astype(F32)


def _joinable(x: Any) -> bool:
    """Whether a leaf may be raveled into one vector with others: small, and
    not split over an Explicit mesh (its sharding is then in its type)."""
    if jnp.size(x) > SMALL:
        return False
    sharding = explicit_sharding(x)
    return sharding is None or all(axis is None for axis in sharding.spec)


def square_sums(
    leaves: Sequence[Any],
    groups: Sequence[str | None],
    *,
    per_leaf: bool = False,
    shared: Sequence[bool] | None = None,
    fence: bool = False,
) -> tuple[dict[str | None, jax.Array], list[jax.Array] | None]:
    """`sum(|x|**2)` of every group of leaves (and, with `per_leaf`, of each).

    Returns `({group: sum, None: whole tree}, per-leaf sums or None)`,
    float32. A large leaf is summed by itself: one reduction, which a
    backend may fuse with the work that reads the leaf already. The small
    leaves of a group (biases, norms, the many leaves of a deep model) are
    summed at once: on a backend that runs each reduction as a kernel of
    its own (XLA:CPU), a kernel per leaf would cost more than the
    arithmetic. They are joined as they are, and squared in the sum: a
    concatenation of their squares costs XLA:CPU a kernel per leaf to
    write each square, and makes it compute each update again (and the
    optimizer's loop split in two to share the part before it). Leaves
    of one dtype and one shape past the first axis are joined along it,
    with no reshape (XLA:CPU would compute a leaf again in the new shape
    rather than view the one the step returns); scalars are raveled. The
    optimization barrier keeps each joined array whole (XLA otherwise
    splits a sum of a concatenation into the sums of its pieces).

    A leaf marked `shared` (a clip of the raw gradients sums its squares
    already) is summed by itself with the clip's own operations, which XLA
    then computes once. With `fence` (the gradients), the other leaves are
    read through an optimization barrier: their square is then not the one
    the optimizer computes from the same gradient (Adam's second moment),
    which XLA would otherwise compute once, write to memory, and read in
    both places.

    Both are for XLA:CPU. On other backends (`_joins_small_leaves`) every
    leaf is summed by itself and nothing is fenced: XLA:TPU then fuses the
    sums into the optimizer's own loops (compiled ahead of time for a v5e
    chip, AdamW on the 434-leaf tree of `bench_overhead.py` accesses 1.08
    times the bytes of its step without metrics, against 1.69 joined and
    fenced).
    """
    shared = list(shared) if shared is not None else [False] * len(leaves)
    join = _joins_small_leaves()
    fence = fence and join
    alone = [
        per_leaf or s or not join or not _joinable(x)
        for x, s in zip(leaves, shared, strict=True)
    ]
    leaves = list(leaves)
    fenced = [i for i, s in enumerate(shared) if fence and not s]
    if fenced:
        kept = jax.lax.optimization_barrier([leaves[i] for i in fenced])
        for i, x in zip(fenced, kept, strict=True):
            leaves[i] = x
    each: dict[int, jax.Array] = {
        i: square_sum(leaves[i]) for i, a in enumerate(alone) if a
    }
    totals: dict[str | None, jax.Array] = {}
    for group in dict.fromkeys(groups):
        members = [i for i, g in enumerate(groups) if g == group]
        total = sum((each[i] for i in members if i in each), jnp.zeros([], F32))
        stacks: dict[tuple, list[jax.Array]] = {}
        for i in members:
            if not alone[i] and squares(leaves[i]) is not None:
                x = jnp.asarray(leaves[i])
                x = x if x.ndim else x.ravel()
                stacks.setdefault((x.dtype, x.shape[1:]), []).append(x)
        for pieces in stacks.values():
            joined = jax.lax.optimization_barrier(jnp.concatenate(pieces))
            total = total + square_sum(joined)
        totals[group] = total
    if None not in totals:
        totals[None] = sum(totals.values(), jnp.zeros([], F32))
    return totals, ([each[i] for i in range(len(leaves))] if per_leaf else None)


def path_name(path: tuple) -> str:
    """A leaf's path as metric names show it: keys joined by "/"."""
    parts = []
    for entry in path:
        for attribute in ("key", "name", "idx"):
            if hasattr(entry, attribute):
                parts.append(str(getattr(entry, attribute)))
                break
        else:
            parts.append(str(entry))
    return "/".join(parts)


def named(prefix: str | None, name: str) -> str:
    return name if not prefix else f"{prefix}/{name}"


def _on_device(value: Any, host: bool) -> Any:
    """A value read from a state kept in host memory, moved to the device."""
    if not host:
        return value
    return jax.tree.map(lambda x: jax.device_put(x, memory_space("Device")), value)


def _scalar(value: Any) -> jax.Array | None:
    """`value` as a float32 scalar, or None when it is not one number."""
    if value is None or is_schedule(value):
        return None
    value = jnp.asarray(value)
    if value.shape != () or not jnp.issubdtype(value.dtype, jnp.number):
        return None
    return jnp.real(value).astype(F32)


class Collector:
    """Metric names and values in the order found; repeated names numbered."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.values: dict[str, jax.Array] = {}

    def add(self, name: str, value: Any, *, unique: bool = False) -> None:
        name = named(self.prefix, name)
        if unique and name in self.values:
            n = 2
            while f"{name}_{n}" in self.values:
                n += 1
            name = f"{name}_{n}"
        self.values[name] = value


def norm_metrics(out: Collector, group: str | None, g, u, p, size: int) -> None:
    """The norms of one group from its sums of squares (float32 scalars)."""
    out.add(named(group, "grad_norm"), jnp.sqrt(g))
    out.add(named(group, "update_norm"), jnp.sqrt(u))
    out.add(named(group, "update_rms"), jnp.sqrt(u / max(size, 1)))
    out.add(named(group, "param_norm"), jnp.sqrt(p))
    # rms(u) / rms(p) over the same elements: the ratio of the two norms.
    out.add(named(group, "update_param_ratio"), jnp.sqrt(u / p))


def hyperparameter_metrics(out: Collector, site: anatomy.Site) -> None:
    """The learning rate and every scheduled value a part used this step."""
    tx = site.tx
    if isinstance(tx, Alias):
        return  # its numbers are its parts', reported there
    if isinstance(site.new, InjectStatefulHyperparamsState):
        # inject_hyperparams keeps the values its last update used.
        scheduled = getattr(tx, "schedules", {})
        for name, value in site.new.hyperparams.items():
            if name == "learning_rate" or name in scheduled:
                value = _scalar(_on_device(value, site.host))
                if value is not None:
                    out.add(named(site.group, _short(name)), value, unique=True)
        return
    if isinstance(tx, Foreign):
        # An optax transformation: only what its state names (optax's
        # inject_hyperparams keeps `hyperparams["learning_rate"]`).
        if site.new is not None:
            for _, value in get_all_with_path(site.new, "learning_rate"):
                value = _scalar(_on_device(value, site.host))
                if value is not None:
                    out.add(named(site.group, "lr"), value, unique=True)
        return
    names = [
        f.name
        for f in dataclasses.fields(tx)
        if is_schedule(getattr(tx, f.name, None))
        or (f.name == "learning_rate" and _scalar(getattr(tx, f.name)) is not None)
    ]
    if not names:
        return
    resolved = tx
    if tx.holds_schedule():
        count = tx.schedule_count(site.old)
        if count is None:
            return
        resolved = tx.at_step(_on_device(count, site.host))
    for name in names:
        value = _scalar(getattr(resolved, name))
        if value is not None:  # a schedule the part evaluates itself stays one
            out.add(named(site.group, _short(name)), value, unique=True)


def _short(name: str) -> str:
    return "lr" if name == "learning_rate" else name


def clip_metrics(
    out: Collector, site: anatomy.Site, grad_sq: dict[str | None, jax.Array]
) -> None:
    """Whether a `clip_by_global_norm` on the raw gradients fired, and its factor.

    The clip rescales by `max_norm / norm` when `norm >= max_norm`; the
    norm is the one of the gradients it receives, those of its group.
    """
    tx = site.tx
    max_norm = tx.max_norm
    if tx.holds_schedule():
        count = tx.schedule_count(site.old)
        max_norm = tx.at_step(_on_device(count, site.host)).max_norm
    max_norm = jnp.asarray(max_norm).astype(F32)
    norm = jnp.sqrt(grad_sq[site.group])
    fired = jnp.logical_not(norm < max_norm)
    factor = jnp.where(fired, max_norm / jnp.where(fired, norm, 1.0), 1.0)
    out.add(named(site.group, "clip/fired"), fired.astype(F32), unique=True)
    out.add(named(site.group, "clip/factor"), factor.astype(F32), unique=True)


class SkipCounts:
    """What the skipping wrappers report: totals, and this step."""

    def __init__(self) -> None:
        self.nonfinite: list[jax.Array] = []
        self.spikes: list[jax.Array] = []
        self.skipped: list[jax.Array] = []

    def read(self, site: anatomy.Site) -> None:
        tx, new = site.tx, site.new
        if new is None:
            return
        if isinstance(tx, apply_if_finite):
            new = _on_device(new, site.host)
            self.nonfinite.append(new.total_notfinite)
            gave_up = new.notfinite_count > tx.max_consecutive_errors
            self.skipped.append(jnp.logical_not(new.last_finite) & ~gave_up)
        elif isinstance(tx, skip_loss_spikes):
            new = _on_device(new, site.host)
            self.spikes.append(new.total_skips)
            self.skipped.append(new.last_skipped)
        elif isinstance(tx, Foreign):
            # optax's apply_if_finite, found by its state's field names.
            for _, total in get_all_with_path(new, "total_notfinite"):
                self.nonfinite.append(_on_device(total, site.host))
            for _, finite in get_all_with_path(new, "last_finite"):
                self.skipped.append(jnp.logical_not(_on_device(finite, site.host)))

    def add_to(self, out: Collector) -> None:
        def total(values: list[jax.Array]) -> jax.Array:
            return sum(jnp.asarray(v).astype(F32) for v in values)  # type: ignore[return-value]

        if self.skipped:
            any_skipped = jnp.any(jnp.stack([jnp.asarray(s) for s in self.skipped]))
            out.add("skipped", any_skipped.astype(F32))
        if self.nonfinite:
            out.add("skipped_nonfinite", total(self.nonfinite))
        if self.spikes:
            out.add("skipped_spikes", total(self.spikes))


def orthogonality_site(site_list: Sequence[anatomy.Site]) -> anatomy.Site | None:
    """The first part that orthogonalizes by Newton–Schulz and keeps a
    momentum `mu` (Muon's direction)."""
    for site in site_list:
        tx = site.tx
        if hasattr(tx, "newton_schulz") and hasattr(tx, "dimension_numbers"):
            _, new = anatomy.own_state(site)
            if new is not None and hasattr(new, "mu"):
                return site
    return None


def newton_schulz_residual(site: anatomy.Site) -> jax.Array:
    r"""RMS of :math:`\sigma_i^2 - 1` over the singular values of NS(M).

    `M` is the new momentum of the part's largest matrix (the first of the
    largest), cut into the blocks the part orthogonalizes; NS is the part's
    own Newton–Schulz iteration (coefficients, steps, normalization,
    precision). With :math:`O = \mathrm{NS}(M)` and :math:`k` its smaller
    side, :math:`\|O O^H - I\|_F^2 = \sum_i (\sigma_i^2 - 1)^2` on the
    small side, averaged over the :math:`k` values of every block.
    """
    _, new = anatomy.own_state(site)
    mu = _on_device(load_state(new.mu), site.host)
    dims = site.tx.dimension_numbers(mu)
    flat_dims, treedef = jax.tree.flatten(dims, is_leaf=is_spec_leaf)
    leaves = treedef.flatten_up_to(mu)
    chosen = [i for i, d in enumerate(flat_dims) if d is not None]
    if not chosen:
        return jnp.full([], jnp.nan, F32)
    index = max(chosen, key=lambda i: (leaves[i].size, -i))
    x, d = leaves[index], flat_dims[index]
    ns, eps = site.tx.newton_schulz, site.tx.eps
    total, count = jnp.zeros([], F32), 0
    for stack in matrix_blocks(x.shape, d).to_stacks(x):
        o = ns.orthogonalize_matrices(stack, eps)
        o = o.astype(jnp.promote_types(stack.dtype, F32))
        m, n = o.shape[-2:]
        if m > n:
            o = jnp.conj(jnp.swapaxes(o, -1, -2))
        k = min(m, n)
        gram = o @ jnp.conj(jnp.swapaxes(o, -1, -2))
        error = gram - jnp.eye(k, dtype=gram.dtype)
        total = total + jnp.sum(jnp.abs(error) ** 2).astype(F32)
        count += k * (o.size // (m * n))
    return jnp.sqrt(total / count)
