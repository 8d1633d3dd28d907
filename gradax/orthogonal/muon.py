"""Muon: momentum orthogonalized by Newton–Schulz, with AdamW for the rest."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .. import tree as gtree
from .._declare import (
    DECAY,
    LEARNING_RATE,
    NONNEGATIVE,
    POSITIVE_INT,
    hyper,
    static_field,
)
from .._matrices import (
    MuonDimensionNumbers,
    full_dimension_numbers,
    is_spec_leaf,
    matrix_view,
)
from .._numerics import safe_increment
from .._protocol import Alias, EmptyState, GradientTransformation, zero_count
from .._sharding import explicit_sharding
from ..combinators.chain import chain
from ..combinators.masked import partition
from ..optimizers.adam import adamw
from ..sharding.distributed import current_mesh, orthogonalize_many
from ..transforms.cautious import decayed_weights
from ..transforms.scaling import scale_by_learning_rate
from .coefficients import KELLER, NS_COEFFS
from .dimensions import SHAPE_SCALING, shape_scale
from .newton_schulz import orthogonalize
from .options import (
    PRECONDITIONING,
    MomentumOptions,
    NewtonSchulzOptions,
    coefficient_rows,
)
from .routing import warn_about_embeddings


class MuonState(NamedTuple):
    """State of :class:`scale_by_muon`: one momentum buffer per matrix."""

    count: jax.Array  # int32 scalar
    mu: Any  # momentum, like the params (mu_dtype)


def _coefficient_table(ns_coeffs: Any, ns_steps: int) -> Any:
    """optax's rule: one row is used ns_steps times; a table is used whole.

    (A table with more rows than ``ns_steps`` is refused at construction.)
    """
    if isinstance(ns_coeffs, str):
        return ns_coeffs, ns_steps
    rows = coefficient_rows(ns_coeffs)
    return (rows, ns_steps) if len(rows) == 1 else (rows, len(rows))


class scale_by_muon(MomentumOptions, NewtonSchulzOptions, GradientTransformation):
    """Muon's direction: momentum, then orthogonalization. See :class:`muon`.

    Args:
      ns_coeffs: a preset name or coefficients (see :func:`orthogonalize`).
      ns_steps: Newton–Schulz steps, >= 1.
      beta: momentum decay, in [0, 1).
      eps: added to the norm before normalizing, >= 0.
      mu_dtype: dtype of the momentum buffer.
      nesterov, momentum, bias_correction: how momentum is kept (see
        :class:`gradax.orthogonal.options.MomentumOptions`).
      adaptive: scale by the dual norm ``<M, O>`` (arXiv:2409.20325).
      preconditioning, method, precision, distributed: how it orthogonalizes
        (see :class:`gradax.orthogonal.options.NewtonSchulzOptions`).
      weight_dimension_numbers: a :class:`MuonDimensionNumbers`, a tree of
        them, or a function of the params returning one. A leaf with None
        gets the momentum direction, not orthogonalized. None: every leaf is
        a 2-D matrix.
    """

    ns_coeffs: Any = hyper(KELLER[0], NS_COEFFS, static=True)
    ns_steps: int = hyper(5, POSITIVE_INT, static=True)
    beta: Any = hyper(0.95, DECAY)
    eps: Any = hyper(1e-8, NONNEGATIVE)
    mu_dtype: Any = static_field(None)
    adaptive: bool = static_field(False, kw_only=True)
    weight_dimension_numbers: Any = static_field(None, kw_only=True)

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
        normalization, precondition = PRECONDITIONING[self.preconditioning]
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
        flat_dims, treedef = jax.tree.flatten(dims, is_leaf=is_spec_leaf)
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
    consistent_rms: Any = hyper(None, NONNEGATIVE)
    shape_scaling: str | None = hyper(None, SHAPE_SCALING, static=True, kw_only=True)

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
        scaled_updates = jax.tree.map(scaled, dims, updates, is_leaf=is_spec_leaf)
        return scaled_updates, state


class MuonGroups(Alias):
    """Base of every optimizer of the Muon family: two parameter groups.

    Matrices (as routed by ``muon_weight_dimension_numbers``) get the
    optimizer's direction, the shape factor, decoupled weight decay and the
    learning rate; every other leaf gets AdamW. The options of the AdamW
    group and of the routing are declared here, once, for every member.

    A member (``muon``, ``normuon``, ``adamuon``, ``dion``, ``dion2``)
    extends Muon in one way: it overrides :meth:`_muon_direction`, which
    builds its direction from its own fields, named one by one. It also
    provides what :meth:`build` reads besides the fields below, as arguments
    or as fixed class attributes: ``eps`` (also AdamW's default eps),
    ``weight_decay``, ``weight_decay_mask``, ``mu_dtype``, ``nesterov``
    (also AdamW's), ``consistent_rms`` and ``shape_scaling``.

    Args:
      learning_rate: the learning rate of both groups, a number or
        schedule, >= 0.
      adam_b1: the AdamW group's first-moment decay, in [0, 1).
      adam_b2: the AdamW group's second-moment decay, in [0, 1).
      adam_eps_root: the AdamW group's eps inside the square root, >= 0.
      adam_weight_decay: the AdamW group's decoupled weight decay, >= 0.
      adam_learning_rate: the AdamW group's learning rate (None: the
        optimizer's ``learning_rate``).
      adam_eps: the AdamW group's eps (None: the optimizer's ``eps``).
      muon_weight_dimension_numbers: None (2-D leaves are matrices), "auto"
        (also stacked ``(L, m, n)`` and conv ``(h, w, c_in, c_out)``), one
        :class:`MuonDimensionNumbers`, a tree of them with None for AdamW
        leaves, or a function of the params returning such a tree.
      cautious_weight_decay: decay matrices only where update and weight
        agree in sign (arXiv:2510.12402).
    """

    learning_rate: Any = hyper(valid=LEARNING_RATE)
    adam_b1: Any = hyper(0.9, DECAY, kw_only=True)
    adam_b2: Any = hyper(0.999, DECAY, kw_only=True)
    adam_eps_root: Any = hyper(0.0, NONNEGATIVE, kw_only=True)
    adam_weight_decay: Any = hyper(0.0, NONNEGATIVE, kw_only=True)
    adam_learning_rate: Any = hyper(None, LEARNING_RATE, kw_only=True)
    adam_eps: Any = hyper(None, NONNEGATIVE, kw_only=True)
    muon_weight_dimension_numbers: Any = static_field(None, kw_only=True)
    cautious_weight_decay: bool = static_field(False, kw_only=True)

    def _muon_direction(self) -> GradientTransformation:
        """The direction of the matrices (the one hook a member overrides)."""
        raise NotImplementedError

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
            is_leaf=is_spec_leaf,
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


class muon(MomentumOptions, NewtonSchulzOptions, MuonGroups):
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
      learning_rate: :math:`\eta`, a number or schedule, >= 0.
      ns_coeffs: a preset ("standard"/"keller", "dion"/"you5", "jiacheng6",
        "polar_express") or coefficients of shape (3,) or (T, 3) (a table
        must not have more rows than ``ns_steps``).
      ns_steps: Newton–Schulz steps, an integer >= 1.
      beta: momentum decay in [0, 1).
      eps: added to norms before dividing, >= 0 (also AdamW's eps by
        default).
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
      consistent_rms: None (KellerJordan scaling) or the target update RMS,
        >= 0 (0.2 for Moonlight).
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

    An invalid value raises a ValueError naming the argument when the
    optimizer is built.

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

    # learning_rate, the adam_* options, the routing and cautious_weight_decay
    # are MuonGroups'; nesterov, momentum and bias_correction MomentumOptions';
    # preconditioning, method, precision and distributed NewtonSchulzOptions'.
    ns_coeffs: Any = hyper(KELLER[0], NS_COEFFS, static=True)
    ns_steps: int = hyper(5, POSITIVE_INT, static=True)
    beta: Any = hyper(0.95, DECAY)
    eps: Any = hyper(1e-8, NONNEGATIVE)
    weight_decay: Any = hyper(0.0, NONNEGATIVE)
    weight_decay_mask: Any = static_field(None)
    mu_dtype: Any = static_field(None)
    adaptive: bool = static_field(False, kw_only=True)
    consistent_rms: Any = hyper(None, NONNEGATIVE, kw_only=True)
    shape_scaling: str | None = hyper(None, SHAPE_SCALING, static=True, kw_only=True)

    def _muon_direction(self) -> scale_by_muon:
        return scale_by_muon(
            mu_dtype=self.mu_dtype,
            adaptive=self.adaptive,
            weight_dimension_numbers=self._dims,
            **self.momentum_options(),
            **self.newton_schulz_options(),
        )
