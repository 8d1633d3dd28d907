"""Dion2: orthogonalize only the heaviest rows (or columns) of the momentum."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .. import tree as gtree
from .._core.axes import replicate, restore
from .._core.declarations import (
    UNIT,
    OneOf,
    Range,
    hyper,
    static_field,
)
from .._core.numerics import work_dtype
from .._core.protocol import GradientTransformation
from ..linalg.matrices import MuonDimensionNumbers, matrix_view
from . import _fields as fields
from ._common import DionAliasBase, map_matrices, matrix_dims, pick
from ._steps import NewtonSchulzMember

SELECTIONS = ("auto", "rows", "columns")
# The share of rows (or columns) orthogonalized: at least one is.
FRACTION = Range(0.0, 1.0, low_open=True)


class Dion2State(NamedTuple):
    """State of :class:`scale_by_dion2`."""

    momentum: Any  # summed momentum with error feedback, like the params


def selects_rows(select: str, fan_in: int, fan_out: int) -> bool:
    """Whether Dion2 picks rows (fan-in slices) of a (fan_in, fan_out) matrix.

    "auto" picks along the shorter side, fan-out slices on a tie
    (microsoft/dion `dion/dion2.py`'s rule at commit 0a059a4, for its
    `(fan_out, fan_in)` weight).
    """
    if select == "rows":
        return True
    if select == "columns":
        return False
    return fan_in < fan_out


def selected_count(fraction: float, slices: int) -> int:
    """How many of `slices` rows/columns Dion2 orthogonalizes."""
    return max(1, min(slices, math.ceil(fraction * slices)))


class scale_by_dion2(NewtonSchulzMember, GradientTransformation):
    """Dion2's direction (no learning rate). See :class:`dion2`.

    Args:
      fraction: share of rows (or columns) orthogonalized each step, in
        (0, 1].
      ef_decay: factor on the selected slices of the momentum afterwards, in
        [0, 1].
      ns_coeffs: a preset name or coefficients (see :func:`orthogonalize`);
        default `"polar_express_fixed5"`, the reference code's (see
        :class:`dion2`).
      ns_steps: Newton–Schulz steps, >= 1.
      eps: added to the norm before normalizing, >= 0.
      mu_dtype: dtype of the momentum buffer.
      select: "auto" (the shorter side), "rows" (fan-in slices) or
        "columns" (fan-out slices).
      weight_dimension_numbers: as in :class:`scale_by_muon`.
      preconditioning, method, precision, distributed: Muon's
        Newton–Schulz options, as in :class:`scale_by_muon`.
    """

    # The keyword-only options are NewtonSchulzMember's (they come first).
    fraction: float = hyper(default=0.25, valid=FRACTION, static=True)
    ef_decay: Any = hyper(default=0.95, valid=UNIT)
    ns_coeffs: Any = fields.MUON.field(default="polar_express_fixed5")
    ns_steps: int = fields.MUON.field()
    eps: Any = fields.MUON.field()
    mu_dtype: Any = fields.MUON.field()
    select: str = hyper(
        default="auto", valid=OneOf(SELECTIONS), static=True, kw_only=True
    )
    weight_dimension_numbers: Any = static_field(default=None, kw_only=True)

    def init_state(self, params):
        return Dion2State(gtree.zeros_like(params, dtype=self.mu_dtype))

    def update_state(self, updates, state, params=None, **extra_args):
        dims = matrix_dims(self.weight_dimension_numbers, updates)

        def select(d, g, m):
            view = matrix_view(g.shape, d)
            dtype = work_dtype(jnp.promote_types(g.dtype, m.dtype))
            b = view.to_matrices(m).astype(dtype) + view.to_matrices(g).astype(dtype)
            b, sharding = replicate(b)
            rows = selects_rows(self.select, view.fan_in, view.fan_out)
            x = b if rows else jnp.swapaxes(b, -1, -2)  # select along axis -2
            k = selected_count(self.fraction, x.shape[-2])
            _, index = jax.lax.top_k(jnp.sum(jnp.abs(x), axis=-1), k)
            index = jnp.broadcast_to(index[..., None], (*index.shape, x.shape[-1]))
            return jnp.take_along_axis(x, index, axis=-2), index, x, rows, sharding

        picked = map_matrices(
            select, dims, updates, state.momentum, otherwise=lambda g, m: None
        )
        chosen = pick(dims, picked, 0)
        # Muon's batched (and, under a mesh, distributed) orthogonalization.
        ortho = self.newton_schulz.orthogonalize_tree(
            map_matrices(
                lambda d, c: MuonDimensionNumbers(c.ndim - 2, c.ndim - 1),
                dims,
                chosen,
                otherwise=lambda c: None,
            ),
            chosen,
            self.eps,
        )

        def finish(d, g, selection, o):
            chosen, index, x, rows, sharding = selection
            view = matrix_view(g.shape, d)
            direction = jnp.put_along_axis(
                jnp.zeros_like(x), index, o.astype(x.dtype), axis=-2, inplace=False
            )
            x = jnp.put_along_axis(
                x, index, self.ef_decay * chosen, axis=-2, inplace=False
            )
            if not rows:
                direction, x = jnp.swapaxes(direction, -1, -2), jnp.swapaxes(x, -1, -2)
            direction, x = restore(direction, sharding), restore(x, sharding)
            return view.from_matrices(direction), view.from_matrices(x)

        pairs = map_matrices(
            finish,
            dims,
            updates,
            picked,
            ortho,
            otherwise=lambda g, s, o: (g, None),
        )
        momentum = map_matrices(
            lambda d, p, m: p[1], dims, pairs, state.momentum, otherwise=lambda p, m: m
        )
        return pick(dims, pairs, 0), Dion2State(momentum)


class dion2(NewtonSchulzMember, DionAliasBase):
    r"""Dion2: Muon on the heaviest fraction of the momentum's rows.

    For each matrix parameter with gradient :math:`G_t` and summed momentum
    :math:`M`: :math:`B_t = M_{t-1} + G_t`; pick the `ceil(fraction * s)`
    of its :math:`s` rows (or columns) with the largest L1 norms, the set
    :math:`S`; then

    .. math::
      U_t[S] = \mathrm{NS}(B_t[S]),\quad U_t[\bar S] = 0,\quad
      M_t[S] = \text{ef\_decay}\cdot B_t[S],\quad M_t[\bar S] = B_t[\bar S],\\
      W_t = W_{t-1} - \eta_t \Big(\sqrt{\tfrac{\text{fan-out}}{\text{fan-in}}}
            \,U_t + \lambda W_{t-1}\Big).

    Only the selected rows move (apart from weight decay), and only a
    `fraction` of the matrix is orthogonalized. By default the slices run
    along the shorter side. Every other leaf is updated by `adamw` as in
    :class:`muon`.

    Args:
      learning_rate: :math:`\eta`, a number or schedule.
      fraction: share of slices orthogonalized per step, in (0, 1].
      ef_decay: error-feedback decay of the selected slices, in [0, 1].
      ns_coeffs: Newton–Schulz coefficients: `"polar_express_fixed5"`
        (the default) is the reference code's, the five fixed Polar Express
        rows and the 1.02 safety factor on the Frobenius norm of
        `dion/polar_express.py` (microsoft/dion, commit 0a059a4), which
        its Dion2 uses by default (`use_polar_express=True`);
        `"polar_express"` is gradax's own generated table (safety 1.01),
        whose orthogonalized slices differ from the reference's by 9 to 13%
        (Frobenius, Gaussian matrices) after 5 steps; or any
        :func:`orthogonalize` preset or table. With the default the whole
        update agrees with the reference's `dion2_update_megabatch_async`
        to 1.3e-14 in float64 over 20 steps.
      ns_steps: Newton–Schulz steps, >= 1.
      eps: added to norms, >= 0; also AdamW's eps.
      weight_decay: :math:`\lambda` for the matrices, >= 0.
      weight_decay_mask: which matrices decay (tree of bools or function).
      mu_dtype: dtype of the momentum buffers.
      select: "auto", "rows" (fan-in slices of `x @ W`'s W) or "columns".
      shape_scaling: "spectral" (the default), "keller", "rms" or "none".
      preconditioning, method, precision: as in :class:`muon`.
      adam_b1, adam_b2, adam_eps_root, adam_weight_decay, adam_learning_rate, adam_eps:
        the AdamW group's settings, as in :class:`muon`.
      adam: any transformation for the non-matrix leaves instead of that
        AdamW group (keyword-only), as in :class:`muon`.
      muon_weight_dimension_numbers: routing, as in :class:`muon`.
      cautious_weight_decay: decay only where update and weight agree in sign.
      distributed: as in :class:`muon`.

    Returns:
      The optimizer, a gradient transformation.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> params = {"w": jnp.ones((8, 16)), "b": jnp.zeros(16)}
      >>> tx = gradax.dion2(0.01)
      >>> state = tx.init(params)
      >>> grads = {"w": jnp.arange(128.0).reshape(8, 16) % 7, "b": jnp.ones(16)}
      >>> updates, state = tx.update(grads, state, params)
      >>> int((jnp.abs(updates["w"]).sum(axis=1) > 0).sum())  # 2 of 8 rows
      2

    References:
      Ahn et al., Dion2, 2025 (arXiv:2512.16928).
    """

    # learning_rate, the adam_* options, the routing, cautious_weight_decay
    # and adam are MuonGroups'; the keyword-only options after them are
    # NewtonSchulzMember's.
    fraction: float = hyper(default=0.25, valid=FRACTION, static=True)
    ef_decay: Any = hyper(default=0.95, valid=UNIT)
    ns_coeffs: Any = fields.MUON.field(default="polar_express_fixed5")
    ns_steps: int = fields.MUON.field()
    eps: Any = fields.MUON.field()
    weight_decay: Any = fields.MUON.field()
    weight_decay_mask: Any = fields.MUON.field()
    mu_dtype: Any = fields.MUON.field()
    select: str = hyper(
        default="auto", valid=OneOf(SELECTIONS), static=True, kw_only=True
    )
    shape_scaling: str = fields.shape_scaling("spectral")

    _direction = scale_by_dion2
