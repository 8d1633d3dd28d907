"""Training metrics recorded inside the step: with_metrics."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from .._core.protocol import (
    GradientTransformation,
    TransformationLike,
    transformation_field,
)
from .._core.pytree import static_field
from ..transforms.clipping import clip_by_global_norm
from ..tree.params_placeholder import is_params_placeholder
from . import _anatomy as anatomy
from . import _measures as m
from ._reading import MetricsState


def _extras(value: Any, name: str) -> tuple[str, ...]:
    """Converter of `extras`: a tuple of known names."""
    names = (value,) if isinstance(value, str) else tuple(value)
    unknown = [n for n in names if n not in m.EXTRAS]
    if unknown:
        raise ValueError(
            f"{name} must name optional metrics among {', '.join(m.EXTRAS)}; "
            f"got {', '.join(map(repr, unknown))}"
        )
    return names


def _shape(value: Any, name: str) -> tuple[int, ...] | None:
    """Converter of `max_logits_shape`: None or a tuple of sizes >= 1."""
    if value is None:
        return None
    shape = (value,) if isinstance(value, int) else tuple(value)
    if not shape or any(
        isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in shape
    ):
        raise ValueError(
            f"{name} must be the shape of the max_logits argument, integers "
            f">= 1 such as (num_heads,) or (num_layers, num_heads); got {value!r}"
        )
    return shape


# What `init` keeps in place of the metrics when `gradax.tree.map_params`
# asks where the parameters go: a leaf, matched to the whole metrics dict.
_NOT_MEASURED = "metrics"


class with_metrics(GradientTransformation):
    r"""Records training metrics of every step in the state; `metrics` reads them.

    The updates and the inner state are exactly the inner transformation's;
    the wrapper adds the numbers a training run logs, computed in the same
    compiled step from the gradients it is given, the updates the inner
    transformation returns and the parameters. For each parameter group
    (:func:`gradax.group_labels`: the "muon" and "adam" groups of the Muon
    family, the labels of a `partition`) and for the whole tree:

    .. math::
      \|g\|,\quad \|u\|,\quad \mathrm{rms}(u) = \|u\| / \sqrt{n},\quad
      \|p\|,\quad \mathrm{rms}(u) / \mathrm{rms}(p) = \|u\| / \|p\|,

    with :math:`g` the gradients as given (before any clip), :math:`u` the
    updates, :math:`p` the parameters before the step and :math:`n` the
    number of elements; the learning rate (and every other scheduled value)
    each part used this step; whether a `clip_by_global_norm` on the raw
    gradients fired, and its factor; and the steps `apply_if_finite` and
    `skip_loss_spikes` skipped. docs/metrics.md lists the names and what
    each costs.

    Optional metrics, by name in `extras`:

    - `"leaf_norms"`: the three norms of every leaf (`leaf/<path>/...`);
    - `"orthogonality"`: how far the Muon group's Newton–Schulz iteration is
      from orthogonal on its largest matrix (`<group>/ns_residual`);
    - `"max_logits"`: the largest attention logit of each head, the
      `max_logits` that `gradax.qk_clip` takes, passed to `update` as
      `max_logits=`; its shape is given as `max_logits_shape`.

    Every metric is a float32 scalar, so the state keeps its types under
    `lax.cond`, `while_loop` and `scan`, and checkpoints like any state.

    Args:
      inner: the transformation to watch (gradax or optax).
      extras: names of optional metrics (see above).
      max_logits_shape: the shape of `update`'s `max_logits=` argument,
        e.g. `(num_heads,)`; needed with `"max_logits"`.
      prefix: put before every name (`"student/grad_norm"`), to tell two
        watched optimizers in one state apart.

    Returns:
      A transformation with state :class:`MetricsState`.

    Example:
      >>> import jax, jax.numpy as jnp, gradax
      >>> params = {"w": jnp.ones((4, 3)), "b": jnp.zeros(3)}
      >>> tx = gradax.with_metrics(gradax.muon(0.02))
      >>> state = tx.init(params)
      >>> grads = jax.tree.map(jnp.ones_like, params)
      >>> _, state = tx.update(grads, state, params)
      >>> m = gradax.metrics(state)
      >>> float(m["muon/grad_norm"]), float(m["adam/lr"])
      (3.464101552963257, 0.019999999552965164)
    """

    inner: TransformationLike = transformation_field()
    extras: tuple[str, ...] = static_field(default=(), kw_only=True, converter=_extras)
    max_logits_shape: tuple[int, ...] | None = static_field(
        default=None, kw_only=True, converter=_shape
    )
    prefix: str = static_field(default="", kw_only=True)

    _checks_update_shapes = False  # the inner transformation checks
    _state_is_parts = True  # the inner state is kept by the inner update
    _records_metrics = True  # for gradax.diagnostics._anatomy

    def __check_init__(self) -> None:
        if ("max_logits" in self.extras) != (self.max_logits_shape is not None):
            raise ValueError(
                "with_metrics: extras='max_logits' and max_logits_shape go "
                "together (the shape of the max_logits argument of update, "
                "e.g. max_logits_shape=(num_heads,))"
            )
        if not isinstance(self.prefix, str):
            raise TypeError(f"prefix must be a string, got {self.prefix!r}")

    def update_dtypes(self) -> str:
        """The inner transformation's policy (its updates pass unchanged)."""
        inner = self.inner
        if isinstance(inner, GradientTransformation):
            return inner.update_dtypes()
        return "grads"

    def init_state(self, params):
        inner_state = self.inner.init(params)
        if is_params_placeholder(params):
            return MetricsState(inner_state, _NOT_MEASURED)  # type: ignore[arg-type]
        extra = {}
        if self.max_logits_shape is not None:
            extra["max_logits"] = jnp.zeros(self.max_logits_shape, jnp.float32)
        # The names and shapes of one step's metrics, read without running
        # it; update computes the same function, so the two always agree.
        shapes = jax.eval_shape(
            lambda p, s: self.measure(p, p, p, s, s, extra), params, inner_state
        )
        zeros = {name: jnp.zeros(s.shape, jnp.float32) for name, s in shapes.items()}
        return MetricsState(inner_state, zeros)

    def update_state(self, updates, state, params=None, **extra_args):
        if "max_logits" in self.extras and extra_args.get("max_logits") is None:
            raise TypeError(
                "with_metrics(extras=('max_logits',)).update needs the keyword "
                "argument max_logits=: the largest attention logit of each head "
                "(what gradax.qk_clip takes)"
            )
        new_updates, inner_state = self.inner.update(
            updates, state.inner_state, params, **extra_args
        )
        values = self.measure(
            updates, new_updates, params, state.inner_state, inner_state, extra_args
        )
        return new_updates, MetricsState(inner_state, values)

    def measure(
        self,
        grads: Any,
        updates: Any,
        params: Any,
        old_inner: Any,
        new_inner: Any,
        extra_args: dict[str, Any],
    ) -> dict[str, jax.Array]:
        """The metrics of one step (see docs/metrics.md), by name.

        Args:
          grads: the gradients `update` was given.
          updates: the updates the inner transformation returned.
          params: the parameters `update` was given, or None.
          old_inner: the inner state before the step.
          new_inner: the inner state after it.
          extra_args: `update`'s extra keyword arguments.

        Returns:
          `{name: float32 array}`.
        """
        out = m.Collector(self.prefix)
        site_list = list(anatomy.sites(self.inner, old_inner, new_inner, tree=grads))
        paths_and_grads, treedef = jax.tree_util.tree_flatten_with_path(grads)
        paths = [path for path, _ in paths_and_grads]
        grad_leaves = [g for _, g in paths_and_grads]
        labels = anatomy.labels_of_sites(site_list)
        leaf_groups = (
            [None] * len(grad_leaves)
            if labels is None
            else treedef.flatten_up_to(labels)
        )
        groups = sorted({g for g in leaf_groups if g is not None})

        raw_clips = [
            s for s in site_list if isinstance(s.tx, clip_by_global_norm) and s.raw
        ]
        clipped = {s.group for s in raw_clips}
        per_leaf = "leaf_norms" in self.extras
        grad_sq, g_each = m.square_sums(
            grad_leaves,
            leaf_groups,
            per_leaf=per_leaf,
            shared=[None in clipped or g in clipped for g in leaf_groups],
            fence=True,
        )
        update_sq, u_each = m.square_sums(
            treedef.flatten_up_to(updates), leaf_groups, per_leaf=per_leaf
        )
        if params is None:
            nan = jnp.full([], jnp.nan, jnp.float32)
            param_sq = dict.fromkeys(grad_sq, nan)
            p_each = [nan] * len(grad_leaves) if per_leaf else None
        else:
            param_sq, p_each = m.square_sums(
                treedef.flatten_up_to(params), leaf_groups, per_leaf=per_leaf
            )
        sizes = [int(jnp.size(g)) for g in grad_leaves]
        for group in [None, *groups]:
            size = sum(
                s
                for s, g in zip(sizes, leaf_groups, strict=True)
                if group is None or g == group
            )
            m.norm_metrics(
                out, group, grad_sq[group], update_sq[group], param_sq[group], size
            )

        for site in site_list:
            m.hyperparameter_metrics(out, site)
        for site in raw_clips:
            m.clip_metrics(out, site, grad_sq)
        skips = m.SkipCounts()
        for site in site_list:
            skips.read(site)
        skips.add_to(out)

        if per_leaf:
            assert g_each is not None and u_each is not None and p_each is not None
            for path, g, u, p in zip(paths, g_each, u_each, p_each, strict=True):
                name = f"leaf/{m.path_name(path)}"
                out.add(f"{name}/grad_norm", jnp.sqrt(g))
                out.add(f"{name}/update_norm", jnp.sqrt(u))
                out.add(f"{name}/param_norm", jnp.sqrt(p))
        if "orthogonality" in self.extras:
            site = m.orthogonality_site(site_list)
            if site is None:
                raise ValueError(
                    "with_metrics(extras=('orthogonality',)) needs a Newton–Schulz "
                    "direction that keeps a momentum (the Muon family's "
                    f"scale_by_muon); {self.inner!r} has none"
                )
            out.add(m.named(site.group, "ns_residual"), m.newton_schulz_residual(site))
        if "max_logits" in self.extras:
            logits = jnp.asarray(extra_args["max_logits"])
            if logits.shape != self.max_logits_shape:
                raise ValueError(
                    f"with_metrics: max_logits has shape {logits.shape}, but "
                    f"max_logits_shape={self.max_logits_shape} was given"
                )
            logits = jnp.real(logits).astype(jnp.float32)
            out.add("attention/max_logit", jnp.max(logits))
            out.add("attention/head_max_logit", logits)
        return {name: jnp.asarray(v, jnp.float32) for name, v in out.values.items()}
