"""AdaMuon: Muon of the momentum's sign, with an elementwise second moment."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._core.declarations import static_field
from .._core.numerics import plain_dtype, real_dtype
from ._common import NormalizedMuonAliasBase, NormalizedMuonBase, rms_align


class AdaMuonState(NamedTuple):
    """State of :class:`scale_by_adamuon`."""

    count: jax.Array  # int32 scalar
    mu: Any  # momentum, like the params (mu_dtype)
    nu: Any  # elementwise second moment, like the params (real dtype)


class scale_by_adamuon(NormalizedMuonBase):
    """AdaMuon's direction (no learning rate). See :class:`adamuon`.

    Args:
      ns_coeffs: a preset name or coefficients (see :func:`orthogonalize`).
      ns_steps: Newton–Schulz steps, >= 1.
      beta: momentum decay, in [0, 1).
      beta2: decay of the elementwise second moment, in [0, 1).
      eps: added to norms before normalizing and to `sqrt(v)`, >= 0.
      mu_dtype: dtype of the momentum buffer.
      consistent_rms: target RMS of the update (0.2), >= 0; None keeps the
        orthogonalized update's norm times `sqrt(max(1, fan_out/fan_in))`.
      shape_scaling: with `consistent_rms=None`, that factor's rule: None
        or "keller", "spectral" (`sqrt(fan_out / fan_in)`), "rms" (`0.2
        sqrt(max(fan_in, fan_out))`) or "none".
      weight_dimension_numbers: as in :class:`scale_by_muon`.
      nesterov, momentum, bias_correction: Muon's momentum options, as in
        :class:`scale_by_muon` (bias correction is off, as in the paper;
        'ema' and 'sum' are equivalent here without it: the sign does not see
        the scale).
      preconditioning, method, precision, distributed: Muon's
        Newton–Schulz options, as in :class:`scale_by_muon`.
      sign: orthogonalize `sign(M)` (the paper's sign stabilization, v2 on)
        rather than `M` (the paper's first version).
    """

    sign: bool = static_field(default=True, kw_only=True)

    _state_class = AdaMuonState

    def _prepare(self, x):
        # For complex momentum, sign(z) = z / |z|.
        return jnp.sign(x) if self.sign else x

    def _nu_init(self, param, dims):
        del dims
        dtype = real_dtype(plain_dtype(self.mu_dtype, param.dtype))
        return jnp.zeros_like(param, dtype=dtype)

    def _normalize(self, o, nu, view):
        beta2 = self.beta2
        nu = view.to_matrices(nu).astype(jnp.abs(o).dtype)
        nu = beta2 * nu + (1 - beta2) * jnp.abs(o) ** 2
        normalized = o / (jnp.sqrt(nu) + self.eps).astype(o.dtype)
        return rms_align(
            normalized, o, self.consistent_rms, self.shape_scaling
        ), view.from_matrices(nu)


class adamuon(NormalizedMuonAliasBase):
    r"""AdaMuon: orthogonalized sign momentum with Adam-like scaling.

    For each matrix parameter :math:`W` (fan-in :math:`m` x fan-out :math:`n`)
    with gradient :math:`G_t`:

    .. math::
      M_t = \beta M_{t-1} + (1 - \beta) G_t,\quad
      O_t = \mathrm{NS}(\mathrm{sign}(\beta M_t + (1 - \beta) G_t)),\\
      V_t = \beta_2 V_{t-1} + (1 - \beta_2)\, O_t \odot O_t,\quad
      \hat O_t = O_t \oslash (\sqrt{V_t} + \epsilon),\\
      W_t = W_{t-1} - \eta_t \Big(0.2 \sqrt{m n}\,
            \frac{\hat O_t}{\|\hat O_t\|_F} + \lambda W_{t-1}\Big).

    (Without Nesterov, :math:`O_t = \mathrm{NS}(\mathrm{sign}(M_t))`.) The
    final rescaling gives the update an RMS of 0.2, AdamW's, so AdamW's
    learning rate and weight decay carry over. Every other leaf is updated by
    `adamw` as in :class:`muon`. A zero gradient gives a zero update.

    Each matrix of a stack or a conv kernel is scaled on its own to RMS
    `consistent_rms`, so a stack of layers gets the update each layer
    would get alone. The authors' code (Chongjie-Si/AdaMuon, commit
    369f0b3) takes :math:`m` and :math:`n` as the least and greatest of all
    the tensor's axes and the norm over the whole tensor: the same only for
    a matrix. A conv kernel is one (c_out, c_in h w) matrix there, as here
    (under `muon_weight_dimension_numbers="auto"`),
    at RMS :math:`0.2 \sqrt{\min \cdot \max / \mathrm{size}}`: pass that
    as `consistent_rms` (0.2/3 for a (3, 3, 3, 4) kernel: within 2.5e-9
    over 20 steps; the default is 0.9 to 2.0 of the distance travelled
    from it). A stack is scaled as a whole there, which no option gives
    (two 4x6 matrices: 4.8e-3 from it with `consistent_rms=0.1`, its RMS;
    1.0 with the default).

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
      nesterov: Nesterov momentum (both groups; the reference code's default,
        Chongjie-Si/AdaMuon `gpt2/models/optimizers/adamuon.py` at commit
        369f0b3, which decays V with its momentum, i.e. beta2 = beta; the
        whole update agrees to 2.6e-8).
      consistent_rms: the update RMS (0.2); None: see
        :class:`scale_by_adamuon`.
      shape_scaling: with `consistent_rms=None`, the factor's rule, as in
        :class:`scale_by_adamuon`; keyword-only.
      preconditioning, momentum, bias_correction, method, precision: as in
        :class:`muon`.
      adam_b1, adam_b2, adam_eps_root, adam_weight_decay, adam_learning_rate, adam_eps:
        the AdamW group's settings, as in :class:`muon`.
      muon_weight_dimension_numbers: routing, as in :class:`muon`.
      cautious_weight_decay: decay only where update and weight agree in sign.
      distributed: as in :class:`muon`.
      sign: the sign stabilization (False: the paper's first version).

    Returns:
      The optimizer, a gradient transformation.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> params = {"w": jnp.ones((4, 8)), "b": jnp.zeros(8)}
      >>> tx = gradax.adamuon(1e-3)
      >>> state = tx.init(params)
      >>> grads = {"w": jnp.eye(4, 8), "b": jnp.ones(8)}
      >>> updates, state = tx.update(grads, state, params)
      >>> float(jnp.sqrt(jnp.mean(updates["w"] ** 2)))  # 0.2 * lr
      0.0002...

    References:
      Si, Zhang and Shen, AdaMuon: Adaptive Muon Optimizer, 2025
      (arXiv:2507.11005).
    """

    sign: bool = static_field(default=True, kw_only=True)

    _direction = scale_by_adamuon
