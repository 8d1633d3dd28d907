"""Muon: momentum orthogonalized by Newton–Schulz, with AdamW for the rest."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import tree as gtree
from .._declare import DECAY, NONNEGATIVE, hyper
from .._hyper import check_decay, check_nonnegative
from .._numerics import safe_increment
from .._protocol import Alias, EmptyState, GradientTransformation, zero_count
from .._pytree import static_field
from .._sharding import explicit_sharding
from ..combinators.chain import chain
from ..combinators.masked import partition
from ..optimizers.adam import adamw
from ..sharding.distributed import current_mesh, orthogonalize_many
from ..transforms.cautious import decayed_weights
from ..transforms.scaling import scale_by_learning_rate
from .dimensions import (
    MuonDimensionNumbers,
    is_dimension_numbers,
    matrix_view,
    shape_scale,
)
from .newton_schulz import check_options, orthogonalize
from .routing import full_dimension_numbers, warn_about_embeddings

_PRECONDITIONING = {
    # optax's names -> (normalization, preconditioner) of orthogonalize.
    "frobenius": ("frobenius", None),
    "spectral": ("spectral", None),
    "aol": ("none", "aol"),
    "schatten": ("schatten", None),
}


class MuonState(NamedTuple):
    """State of :class:`scale_by_muon`: one momentum buffer per matrix."""

    count: jax.Array  # int32 scalar
    mu: Any  # momentum, like the params (mu_dtype)


def _coefficient_table(ns_coeffs: Any, ns_steps: int) -> Any:
    """optax's rule: one row is used ns_steps times; a table is used whole."""
    if isinstance(ns_coeffs, str):
        return ns_coeffs, ns_steps
    rows = tuple(
        tuple(float(v) for v in r)
        for r in np.atleast_2d(np.asarray(ns_coeffs, dtype=np.float64))
    )
    if len(rows) > 1 and len(rows) > ns_steps:
        raise ValueError(
            f"ns_coeffs has {len(rows)} rows but ns_steps is {ns_steps}: a table "
            "must not have more rows than steps"
        )
    return (rows, ns_steps) if len(rows) == 1 else (rows, len(rows))


class scale_by_muon(GradientTransformation):
    """Muon's direction: momentum, then orthogonalization. See :class:`muon`.

    Args:
      ns_coeffs: a preset name or coefficients (see :func:`orthogonalize`).
      ns_steps: Newton–Schulz steps.
      beta: momentum decay, in [0, 1).
      eps: added to the norm before normalizing, >= 0.
      mu_dtype: dtype of the momentum buffer.
      nesterov: use Nesterov momentum.
      adaptive: scale by the dual norm ``<M, O>`` (arXiv:2409.20325).
      preconditioning: 'frobenius', 'spectral', 'aol' or 'schatten'.
      weight_dimension_numbers: a :class:`MuonDimensionNumbers`, a tree of
        them, or a function of the params returning one. A leaf with None
        gets the momentum direction, not orthogonalized. None: every leaf is
        a 2-D matrix.
      momentum: 'ema' (``m = beta m + (1 - beta) g``) or 'sum'
        (``m = beta m + g``, Moonlight/Keras/Dion).
      bias_correction: divide EMA momentum by ``1 - beta^t`` (optax); False
        for KellerJordan and torch.
      method: Newton–Schulz variant, see :func:`orthogonalize`.
      precision: iteration dtype, see :func:`orthogonalize`.
      distributed: "auto" (spread the orthogonalizations over the mesh set
        with ``jax.set_mesh``, if any), True (require one), False, or a mesh.
    """

    ns_coeffs: Any = static_field((3.4445, -4.7750, 2.0315))
    ns_steps: int = static_field(5)
    beta: Any = hyper(0.95, DECAY)
    eps: Any = hyper(1e-8, NONNEGATIVE)
    mu_dtype: Any = static_field(None)
    nesterov: bool = static_field(True, kw_only=True)
    adaptive: bool = static_field(False, kw_only=True)
    preconditioning: str = static_field("frobenius", kw_only=True)
    weight_dimension_numbers: Any = static_field(None, kw_only=True)
    momentum: str = static_field("ema", kw_only=True)
    bias_correction: bool = static_field(True, kw_only=True)
    method: str = static_field("auto", kw_only=True)
    precision: Any = static_field(None, kw_only=True)
    distributed: Any = static_field("auto", kw_only=True)

    def _check(self):
        if self.preconditioning not in _PRECONDITIONING:
            raise ValueError(
                f"preconditioning must be one of {sorted(_PRECONDITIONING)}, "
                f"got {self.preconditioning!r}"
            )
        if self.momentum not in ("ema", "sum"):
            raise ValueError(f"momentum must be 'ema' or 'sum', got {self.momentum!r}")
        check_options("frobenius", None, self.method, self.precision)
        _coefficient_table(self.ns_coeffs, self.ns_steps)

    def _dimension_numbers(self, tree: Any) -> Any:
        return full_dimension_numbers(
            self.weight_dimension_numbers, tree, default_2d_only=False
        )

    def init_state(self, params):
        return MuonState(zero_count(), gtree.zeros_like(params, dtype=self.mu_dtype))

    def _momentum(self, updates, state):
        beta, count = self.beta, safe_increment(state.count)
        if self.momentum == "sum":
            mu = jax.tree.map(lambda g, m: g + beta * m, updates, state.mu)
            if self.nesterov:
                return mu, jax.tree.map(lambda g, m: g + beta * m, updates, mu)
            return mu, mu
        mu = gtree.update_moment(updates, state.mu, beta, 1)
        if not self.bias_correction:
            if self.nesterov:
                return mu, jax.tree.map(
                    lambda g, m: beta * m + (1 - beta) * g, updates, mu
                )
            return mu, mu
        if self.nesterov:
            return mu, jax.tree.map(
                lambda m, g: beta * m + (1 - beta) * g,
                gtree.bias_correction(mu, beta, safe_increment(count)),
                gtree.bias_correction(updates, beta, count),
            )
        return mu, gtree.bias_correction(mu, beta, count)

    def _orthogonalize_matrices(self, matrices: jax.Array) -> jax.Array:
        coefficients, steps = _coefficient_table(self.ns_coeffs, self.ns_steps)
        normalization, precondition = _PRECONDITIONING[self.preconditioning]
        return orthogonalize(
            matrices,
            coefficients=coefficients,
            steps=steps,
            eps=self.eps,
            normalization=normalization,
            precondition=precondition,
            method=self.method,
            precision=self.precision,
        )

    def _mesh(self) -> Any | None:
        if self.distributed is False or self.distributed is None:
            return None
        if isinstance(self.distributed, str) or self.distributed is True:
            mesh = current_mesh()
            if mesh is None and self.distributed is True:
                raise ValueError(
                    "scale_by_muon(distributed=True) needs a mesh: call it under "
                    "jax.set_mesh(mesh), or pass distributed=mesh"
                )
            return mesh
        return self.distributed

    def orthogonalize_tree(self, dims: Any, tree: Any) -> Any:
        """Orthogonalize every leaf that has dimension numbers.

        Under a device mesh, same-shape matrices are stacked and each device
        orthogonalizes whole matrices (no collective inside the iteration).
        """
        is_leaf = lambda x: x is None or is_dimension_numbers(x)  # noqa: E731
        flat_dims, treedef = jax.tree.flatten(dims, is_leaf=is_leaf)
        flat = treedef.flatten_up_to(tree)
        mesh = self._mesh()
        if mesh is None:
            out = [
                x if d is None else self.orthogonalize_leaf(x, d)
                for d, x in zip(flat_dims, flat, strict=True)
            ]
            return jax.tree.unflatten(treedef, out)
        chosen = [i for i, d in enumerate(flat_dims) if d is not None]
        views = [matrix_view(flat[i].shape, flat_dims[i]) for i in chosen]
        matrices = [v.to_matrices(flat[i]) for v, i in zip(views, chosen, strict=True)]
        results = orthogonalize_many(matrices, self._orthogonalize_matrices, mesh)
        out: list[Any] = list(flat)
        for i, view, result in zip(chosen, views, results, strict=True):
            out[i] = view.from_matrices(result)
        return jax.tree.unflatten(treedef, out)

    def orthogonalize_leaf(self, x: jax.Array, dims: MuonDimensionNumbers) -> jax.Array:
        """Orthogonalize one weight-shaped array along its matrix axes."""
        sharding = explicit_sharding(x)
        if sharding is not None:
            # Sharding in types forbids the row-sharded X X^T; iterate on a
            # replicated copy (distributing the work is the sharding module's).
            x = jax.sharding.reshard(x, jax.sharding.PartitionSpec())
        view = matrix_view(x.shape, dims)
        out = view.from_matrices(self._orthogonalize_matrices(view.to_matrices(x)))
        if sharding is not None:
            out = jax.sharding.reshard(out, sharding.spec)
        return out

    def update_state(self, updates, state, params=None, **extra_args):
        mu, direction = self._momentum(updates, state)
        orthogonal = self.orthogonalize_tree(
            self._dimension_numbers(updates), direction
        )
        if self.adaptive:
            orthogonal = jax.tree.map(
                lambda m, o: jnp.sum(jnp.conj(m) * o) * o, direction, orthogonal
            )
        return orthogonal, MuonState(safe_increment(state.count), mu)


# The options a Muon direction takes from its optimizer (muon or a variant).
_DIRECTION_OPTIONS = (
    "ns_coeffs",
    "ns_steps",
    "beta",
    "eps",
    "mu_dtype",
    "nesterov",
    "adaptive",
    "preconditioning",
    "momentum",
    "bias_correction",
    "method",
    "precision",
    "distributed",
)


def muon_direction(owner: Any, **overrides: Any) -> scale_by_muon:
    """The :class:`scale_by_muon` configured by ``owner``'s Muon options.

    Every name in ``_DIRECTION_OPTIONS`` that ``owner`` has is passed on; the
    others keep ``scale_by_muon``'s defaults. ``overrides`` win over both
    (``muon`` passes its routing as ``weight_dimension_numbers``).
    """
    names = [name for name in _DIRECTION_OPTIONS if hasattr(owner, name)]
    options = {name: getattr(owner, name) for name in names}
    return scale_by_muon(**{**options, **overrides})


class scale_by_shape(GradientTransformation):
    """Multiplies each orthogonalized update by its shape factor.

    Args:
      weight_dimension_numbers: as in :class:`scale_by_muon`.
      consistent_rms: if a number, use ``consistent_rms * sqrt(max(fan_in,
        fan_out))`` (Moonlight: 0.2); if None, ``sqrt(max(1, fan_out /
        fan_in))`` (KellerJordan).
      shape_scaling: overrides the rule: 'keller', 'rms', 'spectral', 'none'.
    """

    weight_dimension_numbers: Any = static_field(None)
    consistent_rms: Any = hyper(None)
    shape_scaling: str | None = static_field(None, kw_only=True)

    def init_state(self, params):
        del params
        return EmptyState()

    def _rule(self) -> str:
        if self.shape_scaling is not None:
            return self.shape_scaling
        return "keller" if self.consistent_rms is None else "rms"

    def update_state(self, updates, state, params=None, **extra_args):
        rule = self._rule()
        rms = self.consistent_rms

        def scaled(dims, u):
            if dims is None:
                return u
            view = matrix_view(u.shape, dims)
            return shape_scale(view.fan_in, view.fan_out, rule, rms) * u

        dims = full_dimension_numbers(
            self.weight_dimension_numbers, updates, default_2d_only=False
        )
        scaled_updates = jax.tree.map(
            scaled,
            dims,
            updates,
            is_leaf=lambda x: x is None or is_dimension_numbers(x),
        )
        return scaled_updates, state


class MuonGroups(Alias):
    """Base of :class:`muon` and its variants: two parameter groups.

    Matrices (as routed by ``muon_weight_dimension_numbers``) get the
    subclass's ``_muon_direction()``, the shape factor, decoupled weight decay
    and the learning rate; every other leaf gets AdamW. Subclasses provide
    ``_muon_direction()`` and the fields :meth:`build` reads:
    ``learning_rate``, ``eps``, ``weight_decay``, ``weight_decay_mask``,
    ``mu_dtype``, ``nesterov``, ``consistent_rms``, ``shape_scaling``,
    ``cautious_weight_decay``, ``muon_weight_dimension_numbers`` and the
    ``adam_*`` settings.
    """

    def _muon_direction(self) -> GradientTransformation:
        raise NotImplementedError

    def _check(self):
        check_nonnegative("weight_decay", self.weight_decay)
        check_nonnegative("adam_weight_decay", self.adam_weight_decay)
        check_decay("adam_b1", self.adam_b1)
        check_decay("adam_b2", self.adam_b2)
        self._muon_direction()  # validates the direction's options

    def _dims(self, tree: Any) -> Any:
        return full_dimension_numbers(
            self.muon_weight_dimension_numbers, tree, default_2d_only=True
        )

    def _labels(self, params: Any) -> Any:
        dims = self._dims(params)
        warn_about_embeddings(dims)
        return jax.tree.map(
            lambda d, _: "adam" if d is None else "muon",
            dims,
            params,
            is_leaf=lambda x: x is None or is_dimension_numbers(x),
        )

    def build(self):
        decay = decayed_weights(
            self.weight_decay,
            self.weight_decay_mask,
            cautious=self.cautious_weight_decay,
        )
        muon_group = chain(
            self._muon_direction(),
            scale_by_shape(
                self._dims, self.consistent_rms, shape_scaling=self.shape_scaling
            ),
            decay,
            scale_by_learning_rate(self.learning_rate),
        )
        adam_lr = self.adam_learning_rate
        adam_group = adamw(
            self.learning_rate if adam_lr is None else adam_lr,
            b1=self.adam_b1,
            b2=self.adam_b2,
            eps=self.eps if self.adam_eps is None else self.adam_eps,
            eps_root=self.adam_eps_root,
            mu_dtype=self.mu_dtype,
            weight_decay=self.adam_weight_decay,
            nesterov=self.nesterov,
        )
        return partition({"muon": muon_group, "adam": adam_group}, self._labels)


class muon(MuonGroups):
    r"""Muon: orthogonalized momentum for matrices, AdamW for everything else.

    For each matrix parameter :math:`W` (fan-in x fan-out) with gradient
    :math:`G_t`:

    .. math::
      M_t = \beta M_{t-1} + (1 - \beta) G_t,\quad
      U_t = \beta M_t + (1 - \beta) G_t \ \text{(Nesterov)},\\
      O_t = \mathrm{NS}(U_t) \approx \mathrm{polar}(U_t),\quad
      W_t = W_{t-1} - \eta_t\,(s\,O_t + \lambda W_{t-1}),

    with shape factor :math:`s = \sqrt{\max(1, \text{fan-out}/\text{fan-in})}`
    (or ``consistent_rms * sqrt(max(fan_in, fan_out))``). With the defaults
    the numbers are those of ``optax.contrib.muon`` (whose EMA momentum is also
    bias-corrected, NAdam-style). Every other leaf is updated by
    ``adamw(adam_learning_rate, adam_b1, adam_b2, eps, adam_eps_root,
    weight_decay=adam_weight_decay)``. See docs/muon.md for the settings that
    reproduce torch.optim.Muon, KellerJordan's Muon, Moonlight and Keras.

    Args:
      learning_rate: :math:`\eta`, a number or schedule.
      ns_coeffs: a preset ("standard"/"keller", "dion"/"you5", "jiacheng6",
        "polar_express") or coefficients of shape (3,) or (T, 3).
      ns_steps: Newton–Schulz steps.
      beta: momentum decay in [0, 1).
      eps: added to norms before dividing (also AdamW's eps by default).
      weight_decay: :math:`\lambda` for the Muon group, >= 0.
      weight_decay_mask: which Muon leaves decay (a tree of bools or a
        function of the params).
      mu_dtype: dtype of the momentum buffers.
      nesterov: Nesterov momentum (both groups).
      adaptive: scale by the dual norm (arXiv:2409.20325).
      preconditioning: 'frobenius', 'spectral', 'aol' or 'schatten'.
      adam_b1, adam_b2, adam_eps_root, adam_weight_decay: AdamW group settings.
      adam_learning_rate: AdamW group learning rate (default: learning_rate).
      muon_weight_dimension_numbers: None (2-D leaves are matrices), "auto"
        (also stacked ``(L, m, n)`` and conv ``(h, w, c_in, c_out)``), one
        :class:`MuonDimensionNumbers`, a tree of them with None for AdamW
        leaves, or a function of the params returning such a tree.
      consistent_rms: None (KellerJordan scaling) or the target update RMS
        (0.2 for Moonlight).
      momentum: "ema" or "sum" (Moonlight, Keras, Dion).
      bias_correction: bias-correct EMA momentum (optax); False for
        KellerJordan and torch.
      shape_scaling: override the shape factor: "keller", "rms", "spectral",
        "none".
      cautious_weight_decay: decay only where update and weight agree in sign
        (arXiv:2510.12402).
      method: Newton–Schulz variant ("auto", "ns", "gram").
      precision: Newton–Schulz dtype (None, "float32", "highest", "bfloat16",
        "float16").
      adam_eps: AdamW group eps (default: eps).
      distributed: "auto" (under ``jax.set_mesh``, stack same-shape matrices
        and give each device whole matrices to orthogonalize, so no
        collective runs inside the iteration), True, False, or a mesh.

    Differences from optax: the keyword-only options after ``consistent_rms``
    are gradax's; "auto" routing; a warning when an embedding- or head-like
    leaf is routed to Muon.

    Example:
      >>> import jax, jax.numpy as jnp, gradax
      >>> params = {"w": jnp.ones((4, 8)), "b": jnp.zeros(8)}
      >>> tx = gradax.muon(0.02)
      >>> state = tx.init(params)
      >>> grads = jax.tree.map(jnp.ones_like, params)
      >>> updates, state = tx.update(grads, state, params)
      >>> updates["w"].shape, updates["b"].shape
      ((4, 8), (8,))

    References:
      Jordan et al., Muon, 2024 (kellerjordan.github.io/posts/muon). Liu et
      al., Muon is Scalable for LLM Training (Moonlight), 2025
      (arXiv:2502.16982).
    """

    learning_rate: Any = hyper()
    ns_coeffs: Any = static_field((3.4445, -4.7750, 2.0315))
    ns_steps: int = static_field(5)
    beta: Any = hyper(0.95)
    eps: Any = hyper(1e-8)
    weight_decay: Any = hyper(0.0)
    weight_decay_mask: Any = static_field(None)
    mu_dtype: Any = static_field(None)
    nesterov: bool = static_field(True, kw_only=True)
    adaptive: bool = static_field(False, kw_only=True)
    preconditioning: str = static_field("frobenius", kw_only=True)
    adam_b1: Any = hyper(0.9, kw_only=True)
    adam_b2: Any = hyper(0.999, kw_only=True)
    adam_eps_root: Any = hyper(0.0, kw_only=True)
    adam_weight_decay: Any = hyper(0.0, kw_only=True)
    adam_learning_rate: Any = hyper(None, kw_only=True)
    muon_weight_dimension_numbers: Any = static_field(None, kw_only=True)
    consistent_rms: Any = hyper(None, kw_only=True)
    momentum: str = static_field("ema", kw_only=True)
    bias_correction: bool = static_field(True, kw_only=True)
    shape_scaling: str | None = static_field(None, kw_only=True)
    cautious_weight_decay: bool = static_field(False, kw_only=True)
    method: str = static_field("auto", kw_only=True)
    precision: Any = static_field(None, kw_only=True)
    adam_eps: Any = hyper(None, kw_only=True)
    distributed: Any = static_field("auto", kw_only=True)

    def _muon_direction(self) -> scale_by_muon:
        return muon_direction(self, weight_dimension_numbers=self._dims)
