"""NorMuon: Muon with a per-neuron second moment of the orthogonalized update."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._core.numerics import plain_dtype, real_dtype
from ._common import NormalizedMuonAliasBase, NormalizedMuonBase, batch_shape, rms_align
from .blocks import block_view


class NorMuonState(NamedTuple):
    """State of :class:`scale_by_normuon`."""

    count: jax.Array  # int32 scalar
    mu: Any  # momentum, like the params (mu_dtype)
    nu: Any  # per output neuron: (*batch, fan_out) per matrix, real dtype


class scale_by_normuon(NormalizedMuonBase):
    """NorMuon's direction (no learning rate). See :class:`normuon`.

    Args:
      ns_coeffs: a preset name or coefficients (see :func:`orthogonalize`).
      ns_steps: Newton–Schulz steps, >= 1.
      beta: momentum decay, in [0, 1).
      beta2: decay of the per-neuron second moment, in [0, 1).
      eps: added to norms before normalizing and to `sqrt(v)`, >= 0.
      mu_dtype: dtype of the momentum buffer.
      consistent_rms: target RMS of the update (0.2), >= 0; None keeps the
        orthogonalized update's norm times `sqrt(max(1, fan_out/fan_in))`,
        as the authors' code does (zichongli5/NorMuon `normuon.py`, commit
        d45c9a4; 8.5e-8 from it in float64 over 20 steps).
      shape_scaling: with `consistent_rms=None`, that factor's rule: None
        or "keller", "spectral" (`sqrt(fan_out / fan_in)`), "rms" (`0.2
        sqrt(max(fan_in, fan_out))`) or "none".
      weight_dimension_numbers: as in :class:`scale_by_muon`.
      nesterov, momentum, bias_correction: Muon's momentum options, as in
        :class:`scale_by_muon` (bias correction is off, as in the paper).
      preconditioning, method, precision, distributed: Muon's
        Newton–Schulz options, as in :class:`scale_by_muon`.
    """

    _state_class = NorMuonState

    def _nu_init(self, param, dims):
        view = block_view(param.shape, dims)
        shape = (*batch_shape(param.shape, dims), view.fan_out)
        dtype = real_dtype(plain_dtype(self.mu_dtype, param.dtype))
        return jnp.zeros(shape, dtype)

    def _normalize(self, o, nu, view):
        del view
        # Rows of the paper's (fan_out, fan_in) weight are output neurons: in
        # the x @ W layout that is the last axis, averaged over fan_in.
        row_moment = jnp.mean(jnp.abs(o) ** 2, axis=-2)
        beta2 = self.beta2
        nu = beta2 * nu.astype(row_moment.dtype) + (1 - beta2) * row_moment
        normalized = o / (jnp.sqrt(nu)[..., None, :] + self.eps).astype(o.dtype)
        return rms_align(normalized, o, self.consistent_rms, self.shape_scaling), nu


class normuon(NormalizedMuonAliasBase):
    r"""NorMuon: Muon with neuron-wise normalization, AdamW for the rest.

    For each matrix parameter :math:`W` (fan-in :math:`m` x fan-out :math:`n`)
    with gradient :math:`G_t`:

    .. math::
      M_t = \beta M_{t-1} + (1 - \beta) G_t,\quad
      O_t = \mathrm{NS}(\beta M_t + (1 - \beta) G_t)\ \text{(Nesterov)},\\
      v_t = \beta_2 v_{t-1} + (1 - \beta_2)\,\mathrm{mean}_{\text{fan-in}}
            (O_t \odot O_t),\quad
      \hat O_t = O_t \oslash (\sqrt{v_t} + \epsilon),\\
      W_t = W_{t-1} - \eta_t \Big(0.2 \sqrt{m n}\,
            \frac{\hat O_t}{\|\hat O_t\|_F} + \lambda W_{t-1}\Big).

    :math:`v_t` holds one number per output neuron: the paper's rows of a
    `(fan_out, fan_in)` weight are the columns of the `(fan_in,
    fan_out)` weight of `x @ W`, so the mean runs over the fan-in axis.
    Every other leaf is updated by `adamw` as in :class:`muon`. A zero
    gradient gives a zero update (no NaN).

    The default, `consistent_rms=0.2`, is the paper's Algorithm 1. The
    authors' code (zichongli5/NorMuon `normuon.py`, commit d45c9a4) keeps
    the orthogonalized update's Frobenius norm and multiplies it by
    `sqrt(max(1, fan_out / fan_in))`: `consistent_rms=None` gives that
    (within 8.5e-8 in float64 over 20 steps); the default is 0.26 to 0.5
    of the distance travelled from it. A conv kernel (under
    `muon_weight_dimension_numbers="auto"`) is one (h w c_in, c_out)
    matrix, normalized per output channel. The authors' code
    orthogonalizes the same matrix but then normalizes the kernel, torch's
    (c_out, c_in, h, w), as if its last two axes (h, w) were the matrix:
    no option gives that (0.24 to 0.33 apart over 20 steps for a 3x3
    kernel with 3 inputs and 4 outputs).

    microsoft/dion's `dion/normuon.py` (commit 0a059a4) is
    `momentum="sum"`, `nesterov=False`,
    `ns_coeffs="polar_express_fixed5"`, `eps=1e-8`, `consistent_rms=None`
    (within 3.1e-15 in float64 over 20 steps) but for one factor: it
    multiplies by `sqrt(fan_out / fan_in)` where gradax multiplies by
    `sqrt(max(1, fan_out / fan_in))`: where fan_out < fan_in its step is
    `sqrt(fan_out / fan_in)` times gradax's (0.19 to 0.27 apart over 20
    steps for (fan_out, fan_in) = (5, 8) and (4, 6)):
    `shape_scaling="spectral"` gives that factor.

    Args:
      learning_rate: :math:`\eta`, a number or schedule.
      ns_coeffs: a Newton–Schulz preset or coefficients (see :class:`muon`).
      ns_steps: Newton–Schulz steps.
      beta: momentum decay :math:`\beta` in [0, 1).
      beta2: second-moment decay :math:`\beta_2` in [0, 1).
      eps: :math:`\epsilon` >= 0, also Newton–Schulz's and AdamW's eps.
      weight_decay: :math:`\lambda` for the matrices, >= 0.
      weight_decay_mask: which matrices decay (tree of bools or function).
      mu_dtype: dtype of the momentum buffers.
      nesterov: Nesterov momentum (both groups).
      consistent_rms: the update RMS (0.2, the paper's); None: the authors'
        code, see
        :class:`scale_by_normuon`.
      shape_scaling: with `consistent_rms=None`, the factor on the
        orthogonalized update's norm: None or "keller" (`sqrt(max(1,
        fan_out / fan_in))`, the authors'), "spectral" (`sqrt(fan_out /
        fan_in)`, microsoft/dion's), "rms" or "none"; keyword-only.
      preconditioning, momentum, bias_correction, method, precision: as in
        :class:`muon` (bias correction is off here, as in the paper).
      adam_b1, adam_b2, adam_eps_root, adam_weight_decay, adam_learning_rate, adam_eps:
        the AdamW group's settings, as in :class:`muon`.
      muon_weight_dimension_numbers: routing, as in :class:`muon`.
      cautious_weight_decay: decay only where update and weight agree in sign.
      distributed: as in :class:`muon`.

    Returns:
      The optimizer, a gradient transformation.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> params = {"w": jnp.ones((4, 8)), "b": jnp.zeros(8)}
      >>> tx = gradax.normuon(0.02)
      >>> state = tx.init(params)
      >>> grads = {"w": jnp.eye(4, 8), "b": jnp.ones(8)}
      >>> updates, state = tx.update(grads, state, params)
      >>> float(jnp.sqrt(jnp.mean(updates["w"] ** 2)))  # 0.2 * lr
      0.004...

    References:
      Li, Liu, Liang, Chen and Zhao, NorMuon: Making Muon more efficient and
      scalable, 2025 (arXiv:2510.05491).
    """

    _direction = scale_by_normuon
