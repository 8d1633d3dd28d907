"""Dion: orthonormalized updates by one low-rank power iteration per step."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import tree as gtree
from .._core.axes import match_sharding, replicate, restore
from .._core.declarations import DECAY, OneOf, Range, hyper, static_field
from .._core.numerics import plain_dtype, work_dtype
from .._core.protocol import GradientTransformation
from ..linalg.matrices import is_spec_leaf, matrix_view
from ..linalg.null_space import frobenius, independent_columns
from . import _fields as fields
from ._common import DionAliasBase, batch_shape, map_matrices, matrix_dims, pick


class DionState(NamedTuple):
    """State of :class:`scale_by_dion`."""

    momentum: Any  # error-feedback momentum, like the params (mu_dtype)
    # right factor per matrix, None elsewhere: (*batch, n, r), n the length
    # of the side Dion runs on (fan_in, or fan_out for a wide matrix under
    # orientation="long_side")
    q: Any


def dion_rank(rank: int | float, fan_in: int, fan_out: int) -> int:
    """The rank Dion uses for a (fan_in, fan_out) matrix.

    An int is the rank itself; a float in (0, 1] is a fraction of
    `min(fan_in, fan_out)` (rounded up). Either is capped to that minimum.
    """
    short = min(fan_in, fan_out)
    wanted = math.ceil(rank * short) if isinstance(rank, float) else int(rank)
    return max(1, min(wanted, short))


def _is_rank(rank: Any) -> bool:
    if isinstance(rank, float):
        return 0 < rank <= 1
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)):
        return False
    return bool(rank >= 1)


# Which side of X = W^T Dion's power iteration runs on.
ORIENTATIONS = ("long_side", "as_is")


def _transposed(orientation: str, fan_in: int, fan_out: int) -> bool:
    """Whether Dion runs on X^T: the reference's rule, so that P is on the
    long side (microsoft/dion dion_reference.py, is_transposed = m < n for
    X of shape (m, n) = (fan_out, fan_in))."""
    return orientation == "long_side" and fan_out < fan_in


# The valid values of ``rank`` (1.0 is full rank, the default).
RANK = OneOf(
    (1.0,),
    also=_is_rank,
    also_text="an int >= 1 (the rank) or a float in (0, 1] (a fraction of "
    "min(fan_in, fan_out))",
)
SEED = Range(integer=True, hint="Any integer seeds jax.random.key")


def _mm(spec: str, a: jax.Array, b: jax.Array) -> jax.Array:
    return jnp.einsum(spec, a, b, precision=jax.lax.Precision.HIGHEST)


class scale_by_dion(GradientTransformation):
    """Dion's direction `Q_t P_t^T` (no learning rate). See :class:`dion`.

    Args:
      rank: an int (the rank r) or a float in (0, 1] (a fraction of
        `min(fan_in, fan_out)`, rounded up).
      mu: error-feedback decay :math:`\\mu`, in [0, 1).
      eps: added to the column norms of `R`, >= 0.
      mu_dtype: dtype of the momentum and of `Q`.
      seed: the PRNG seed of the random initial `Q`.
      orientation: "long_side" (run on X^T where X is wide, so `Q` is
        (fan_out, r) there) or "as_is" (always on X, `Q` (fan_in, r)).
        See :class:`dion`.
      weight_dimension_numbers: as in :class:`scale_by_muon`.
    """

    rank: Any = hyper(default=1.0, valid=RANK, static=True)
    mu: Any = hyper(default=0.95, valid=DECAY)
    eps: Any = fields.MUON.field()
    mu_dtype: Any = fields.MUON.field()
    seed: int = hyper(default=0, valid=SEED, static=True, kw_only=True)
    orientation: str = hyper(
        default="long_side", valid=OneOf(ORIENTATIONS), static=True, kw_only=True
    )
    weight_dimension_numbers: Any = static_field(default=None, kw_only=True)

    def init_state(self, params):
        dims = matrix_dims(self.weight_dimension_numbers, params)
        key = jax.random.key(self.seed)
        flat, treedef = jax.tree.flatten(dims, is_leaf=is_spec_leaf)
        indices = jax.tree.unflatten(treedef, list(range(len(flat))))

        def right_factor(d, p, index):
            view = matrix_view(p.shape, d)
            r = dion_rank(self.rank, view.fan_in, view.fan_out)
            side = view.fan_in
            if _transposed(self.orientation, view.fan_in, view.fan_out):
                side = view.fan_out
            shape = (*batch_shape(p.shape, d), side, r)
            dtype = plain_dtype(self.mu_dtype, p.dtype)
            q = jax.random.normal(
                jax.random.fold_in(key, index), shape, work_dtype(dtype)
            )
            return q.astype(dtype)

        q = map_matrices(
            right_factor, dims, params, indices, otherwise=lambda p, i: None
        )
        return DionState(gtree.zeros_like(params, dtype=self.mu_dtype), q)

    def update_state(self, updates, state, params=None, **extra_args):
        dims = matrix_dims(self.weight_dimension_numbers, updates)
        mu, eps = self.mu, self.eps

        def one(d, g, m, q_old):
            view = matrix_view(g.shape, d)
            dtype = work_dtype(jnp.promote_types(g.dtype, m.dtype))
            # In the x @ W layout, B (fan_in, fan_out) is the transpose of the
            # paper's X (fan_out, fan_in): X Q = B^T Q, X^H P = conj(B) P, and
            # X-shaped products P A^H appear here as conj(A) P^T.
            b = view.to_matrices(m).astype(dtype) + view.to_matrices(g).astype(dtype)
            b, sharding = replicate(b)
            # Dion on X^T is Dion on B^T: the same steps with the roles of
            # fan_in and fan_out exchanged (a plain transpose, so a complex
            # X's low-rank factors transpose too).
            flip = _transposed(self.orientation, view.fan_in, view.fan_out)
            if flip:
                b = jnp.swapaxes(b, -1, -2)
            q_prev, _ = replicate(q_old.astype(dtype))
            p, _ = jnp.linalg.qr(_mm("...io,...ir->...or", b, q_prev))
            r = _mm("...io,...or->...ir", jnp.conj(b), p)
            # Where B Q_{t-1} is rank-deficient, QR completes P with columns
            # that rounding picks, and their R columns are rounding noise;
            # normalized, they would add an O(1) term pointing wherever the
            # compiler's order of operations sent it. Their size grows with
            # how nearly dependent the columns of B Q_{t-1} are, but they
            # are B^T applied to P's rounding error, so they lie in the span
            # of the earlier R columns: a column is noise when its part
            # outside that span is at the noise floor of the product (see
            # gradax/linalg/null_space.py). Those columns take no part in
            # the update or the error feedback, and keep their old Q column:
            # exactly, so Q stays a full-rank start for the next power
            # iteration and an all-zero B leaves the state unchanged.
            n = max(view.fan_in, view.fan_out)
            keep = independent_columns(r, frobenius(b), n)
            r = jnp.where(keep, r, jnp.zeros_like(r))
            b = b - (1 - mu) * _mm("...ir,...or->...io", jnp.conj(r), p)
            norms = jnp.sqrt(jnp.sum(jnp.abs(r) ** 2, axis=-2, keepdims=True))
            q = r / (norms + eps).astype(r.dtype)
            direction = _mm("...ir,...or->...io", jnp.conj(q), p)
            if flip:
                direction, b = (jnp.swapaxes(a, -1, -2) for a in (direction, b))
            direction, b = restore(direction, sharding), restore(b, sharding)
            q = match_sharding(jnp.where(keep, q, q_prev), q_old)
            return view.from_matrices(direction), view.from_matrices(b), q

        triples = map_matrices(
            one,
            dims,
            updates,
            state.momentum,
            state.q,
            otherwise=lambda g, m, q: (g, m, q),
        )
        new_state = DionState(pick(dims, triples, 1), pick(dims, triples, 2))
        return pick(dims, triples, 0), new_state


class dion(DionAliasBase):
    r"""Dion: low-rank orthonormalized updates with error feedback.

    For each matrix parameter with gradient :math:`G_t`, written as the
    paper's :math:`X` of shape (fan-out, fan-in) (the transpose of the
    `(fan_in, fan_out)` weight of `x @ W`), with momentum :math:`M` and
    right factor :math:`Q` of rank :math:`r`:

    .. math::
      B_t = M_{t-1} + G_t,\quad P_t = \mathrm{QR}(B_t Q_{t-1}),\quad
      R_t = B_t^\top P_t,\\
      M_t = B_t - (1 - \mu) P_t R_t^\top,\quad
      Q_t = R_t / \|R_t\|_{\text{columns}},\\
      W_t = W_{t-1} - \eta_t \Big(\sqrt{\tfrac{\text{fan-out}}
            {\text{fan-in}}}\, P_t Q_t^\top + \lambda W_{t-1}\Big).

    :math:`P_t` has orthonormal columns, so the update has rank at most
    :math:`r`; what the rank-:math:`r` step leaves out stays in :math:`M`
    (error feedback). :math:`Q_0` is Gaussian, from `seed`. Where
    :math:`B_t Q_{t-1}` is rank-deficient, QR completes :math:`P_t` with
    columns rounding picks. Their columns of :math:`R_t` lie in the span of
    the earlier ones up to `4 sqrt(n) eps` of :math:`\|B_t\|_F` (their norm
    alone can be far larger); they, and the columns after them, are left out
    of the update and of :math:`M_t` and keep their old :math:`Q` column,
    where the reference normalizes that noise into an O(1) term. Every other
    leaf is updated by `adamw` as in :class:`muon`.

    With `orientation="long_side"` (the default, as the reference
    `dion/dion_reference.py` of microsoft/dion at commit 0a059a4 does), a
    wide :math:`X` (fan-out < fan-in) is handled as :math:`X^\top`: the
    steps above run on :math:`X^\top`, so :math:`P_t` lies on the long
    side and :math:`Q` is (fan-out, r), and the update is transposed back.
    The shape factor and weight decay are :math:`X`'s either way.
    `orientation="as_is"` always runs on :math:`X` (:math:`Q` is
    (fan-in, r)), gradax's earlier rule. On a wide matrix the two differ:
    against the reference over 20 float64 steps, relative to how far the
    reference moved, "as_is" is 0.16 off on an 8 x 12 X at rank 0.25 and
    0.04 at full rank (0.04 and 0.02 on 5 x 8 at rank 0.5 and 1.0);
    "long_side" agrees to 4e-8 (the reference's QR runs in float32). A state
    made under one orientation does not fit the other on wide matrices.

    Args:
      learning_rate: :math:`\eta`, a number or schedule.
      rank: :math:`r`, an int, or a float in (0, 1] for a fraction of
        `min(fan_in, fan_out)` (1.0, full rank, is the reference default,
        `rank_fraction=1.0` at 0a059a4;
        note `1` is rank one but `1.0` is full rank).
      mu: error-feedback decay :math:`\mu` in [0, 1).
      eps: added to column norms; also AdamW's eps.
      weight_decay: :math:`\lambda` for the matrices, >= 0.
      weight_decay_mask: which matrices decay (tree of bools or function).
      mu_dtype: dtype of the momentum buffers and of :math:`Q`.
      seed: PRNG seed of :math:`Q_0`.
      orientation: "long_side" (the reference's, default) or "as_is".
      shape_scaling: the shape factor: "spectral" (Dion's), "keller", "rms"
        (0.2 sqrt(max(fan_in, fan_out))) or "none".
      adam_b1, adam_b2, adam_eps_root, adam_weight_decay, adam_learning_rate, adam_eps:
        the AdamW group's settings, as in :class:`muon`.
      adam: any transformation for the non-matrix leaves instead of that
        AdamW group (keyword-only), as in :class:`muon`.
      muon_weight_dimension_numbers: routing, as in :class:`muon`.
      cautious_weight_decay: decay only where update and weight agree in sign.

    Returns:
      The optimizer, a gradient transformation.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> params = {"w": jnp.ones((8, 6)), "b": jnp.zeros(6)}
      >>> tx = gradax.dion(0.01, rank=2)
      >>> state = tx.init(params)
      >>> grads = {"w": jnp.arange(48.0).reshape(8, 6) % 5, "b": jnp.ones(6)}
      >>> updates, state = tx.update(grads, state, params)
      >>> int(jnp.linalg.matrix_rank(updates["w"]))
      2

    References:
      Ahn, Xu, Abreu, Langford et al., Dion: Distributed Orthonormalized
      Updates, 2025 (arXiv:2504.05295).
    """

    # learning_rate, the adam_* options, the routing, cautious_weight_decay
    # and adam are MuonGroups'.
    rank: Any = hyper(default=1.0, valid=RANK, static=True)
    mu: Any = hyper(default=0.95, valid=DECAY)
    eps: Any = fields.MUON.field()
    weight_decay: Any = fields.MUON.field()
    weight_decay_mask: Any = fields.MUON.field()
    mu_dtype: Any = fields.MUON.field()
    seed: int = hyper(default=0, valid=SEED, static=True, kw_only=True)
    orientation: str = hyper(
        default="long_side", valid=OneOf(ORIENTATIONS), static=True, kw_only=True
    )
    shape_scaling: str = fields.shape_scaling("spectral")

    _direction = scale_by_dion
