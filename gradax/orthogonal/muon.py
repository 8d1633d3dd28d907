"""Muon: momentum orthogonalized by Newton–Schulz, with AdamW for the rest."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import tree as gtree
from .._core.declarations import static_field
from .._core.numerics import safe_increment
from .._core.protocol import GradientTransformation, zero_count
from ..linalg.matrices import full_dimension_numbers, is_spec_leaf
from . import _fields as fields
from ._steps import MuonOptions
from .blocks import matrix_blocks
from .coefficients import resolve_coefficients
from .groups import MuonGroups, matrices_and_adam, shape_rule


class MuonState(NamedTuple):
    """State of :class:`scale_by_muon`: one momentum buffer per matrix."""

    count: jax.Array  # int32 scalar
    mu: Any  # momentum, like the params (mu_dtype)
    # The coefficients, as optax keeps them: (3,) for one row, (n, 3) for a
    # table, a preset's (ns_steps, 3) table. Kept for optax's tree and its
    # checkpoints; the iteration reads the transformation's ns_coeffs, so
    # that the coefficients are compile-time constants.
    ns_coeffs: jax.Array


def _state_coefficients(ns_coeffs: Any, ns_steps: int) -> jax.Array:
    """The coefficients as optax's `MuonState.ns_coeffs` holds them.

    In JAX's default float dtype, as optax's `jnp.asarray(ns_coeffs)`:
    float64 where `jax_enable_x64` is on, float32 otherwise.
    """
    if isinstance(ns_coeffs, str):
        ns_coeffs, _ = resolve_coefficients(ns_coeffs, ns_steps)
    return jnp.asarray(np.asarray(ns_coeffs, np.float64))


class scale_by_muon(MuonOptions, GradientTransformation):
    """Muon's direction: momentum, then orthogonalization. See :class:`muon`.

    Args:
      ns_coeffs: a preset name or coefficients (see :func:`orthogonalize`).
      ns_steps: Newton–Schulz steps, >= 1.
      beta: momentum decay, in [0, 1).
      eps: added to the norm before normalizing, >= 0.
      mu_dtype: dtype of the momentum buffer.
      nesterov, momentum, bias_correction: how momentum is kept (see
        :func:`gradax.orthogonal._steps.momentum_step`).
      adaptive: scale by the dual norm `<M, O>` (arXiv:2409.20325).
      preconditioning, method, precision, distributed: how it orthogonalizes
        (see :class:`gradax.orthogonal._steps.NewtonSchulz`).
      weight_dimension_numbers: a :class:`MuonDimensionNumbers`, a tree of
        them, or a function of the params returning one. A leaf with None
        gets the momentum direction, not orthogonalized. None: every leaf is
        a 2-D matrix.
    """

    # The keyword-only options are MuonOptions' (they come first).
    ns_coeffs: Any = fields.MUON.field()
    ns_steps: int = fields.MUON.field()
    beta: Any = fields.MUON.field()
    eps: Any = fields.MUON.field()
    mu_dtype: Any = fields.MUON.field()
    adaptive: bool = static_field(default=False, kw_only=True)
    weight_dimension_numbers: Any = static_field(default=None, kw_only=True)

    def dimension_numbers(self, tree: Any) -> Any:
        """The dimension numbers of each leaf of `tree` (None: not a matrix).

        Args:
          tree: the parameters or updates (arrays or shapes).
        """
        return full_dimension_numbers(
            self.weight_dimension_numbers, tree, default_2d_only=False
        )

    def init_state(self, params):
        # A split that does not fit its weight fails here, not at the first update.
        jax.tree.map(
            lambda d, p: None if d is None else matrix_blocks(p.shape, d).fans,
            self.dimension_numbers(params),
            params,
            is_leaf=is_spec_leaf,
        )
        return MuonState(
            zero_count(),
            gtree.zeros_like(params, dtype=self.mu_dtype),
            _state_coefficients(self.ns_coeffs, self.ns_steps),
        )

    def update_state(self, updates, state, params=None, **extra_args):
        mu, direction = self.momentum_step(updates, state.mu, state.count)
        dims = self.dimension_numbers(updates)
        orthogonal = self.newton_schulz.orthogonalize_tree(dims, direction, self.eps)
        if self.adaptive:
            orthogonal = jax.tree.map(
                lambda m, o: jnp.sum(jnp.conj(m) * o) * o, direction, orthogonal
            )
        return orthogonal, MuonState(safe_increment(state.count), mu, state.ns_coeffs)


class muon(MuonOptions, MuonGroups):
    r"""Muon: orthogonalized momentum for matrices, AdamW for everything else.

    For each matrix parameter :math:`W` (fan-in x fan-out) with gradient
    :math:`G_t`:

    .. math::
      M_t = \beta M_{t-1} + (1 - \beta) G_t,\quad
      U_t = \beta M_t + (1 - \beta) G_t \ \text{(Nesterov)},\\
      O_t = \mathrm{NS}(U_t) \approx \mathrm{polar}(U_t),\quad
      W_t = W_{t-1} - \eta_t\,(s\,O_t + \lambda W_{t-1}),

    with shape factor :math:`s = \sqrt{\max(1, \text{fan-out}/\text{fan-in})}`
    (or `consistent_rms * sqrt(max(fan_in, fan_out))`). With the defaults
    the numbers are those of `optax.contrib.muon` (whose EMA momentum is also
    bias-corrected, NAdam-style). Every other leaf is updated by
    `adamw(adam_learning_rate, adam_b1, adam_b2, eps, adam_eps_root,
    weight_decay=adam_weight_decay)`, or by the transformation given as
    `adam`. See docs/muon.md for the settings that reproduce
    torch.optim.Muon, KellerJordan's Muon, Moonlight and Keras, both groups.

    Args:
      learning_rate: :math:`\eta`, a number or schedule.
      ns_coeffs: a preset ("standard"/"keller", "dion"/"you5", "jiacheng6",
        "polar_express") or coefficients of shape (3,) or (T, 3) (a table
        must not have more rows than `ns_steps`).
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
      preconditioning: 'frobenius', 'spectral', 'aol' or 'schatten' (the
        last two floor their first step's sums at 1e-8 whatever `eps`,
        as optax does).
      adam_b1, adam_b2, adam_eps_root, adam_weight_decay: AdamW group settings.
      adam_learning_rate: AdamW group learning rate (default: learning_rate).
      muon_weight_dimension_numbers: None (2-D leaves are matrices), "auto"
        (also stacked `(L, m, n)` and conv `(h, w, c_in, c_out)`), one
        :class:`MuonDimensionNumbers`, a tree of them with None for AdamW
        leaves, or a function of the params returning such a tree. A
        :class:`MuonSplit` orthogonalizes blocks (heads, fused QKV) apart.
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
      adam: the transformation of every leaf that is not a matrix, learning
        rate included, in place of the `adam_*` options (e.g.
        `gradax.adam(3e-4, b1=0.9, b2=0.95, eps=1e-10)`: KellerJordan's
        plain Adam, where the default group would use Muon's Nesterov).
      distributed: "auto" (under `jax.set_mesh`, stack same-shape matrices
        and give each device whole matrices to orthogonalize, so no
        collective runs inside the iteration), True, False, or a mesh.

    An invalid value raises a ValueError naming the argument when the
    optimizer is built.

    Differences from optax: the keyword-only options after `consistent_rms`
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

    # learning_rate, the adam_* options, the routing, cautious_weight_decay
    # and adam are MuonGroups'; the keyword-only options after them are
    # MuonOptions'.
    ns_coeffs: Any = fields.MUON.field()
    ns_steps: int = fields.MUON.field()
    beta: Any = fields.MUON.field()
    eps: Any = fields.MUON.field()
    weight_decay: Any = fields.MUON.field()
    weight_decay_mask: Any = fields.MUON.field()
    mu_dtype: Any = fields.MUON.field()
    adaptive: bool = static_field(default=False, kw_only=True)
    consistent_rms: Any = fields.consistent_rms(None)
    shape_scaling: str | None = fields.shape_scaling(None)

    def shape_rule(self) -> str:
        return shape_rule(self.shape_scaling, self.consistent_rms)

    def _build_groups(self, dims, labels):
        return matrices_and_adam(
            self,
            labels,
            self.part(scale_by_muon, weight_dimension_numbers=dims),
            dims,
            consistent_rms=self.consistent_rms,
            shape_scaling=self.shape_scaling,
            nesterov=self.nesterov,
        )
