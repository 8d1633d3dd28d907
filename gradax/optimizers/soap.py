"""SOAP: Adam in the eigenbasis of Shampoo's preconditioner."""

from __future__ import annotations

from dataclasses import KW_ONLY
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._core.axes import match_sharding
from .._core.declarations import (
    DECAY,
    NONNEGATIVE,
    POSITIVE_INT,
    Range,
    hyper,
)
from .._core.numerics import real_dtype, safe_increment, work_dtype
from .._core.protocol import GradientTransformation, LearningRateAlias, zero_count
from .._core.pytree import Module, static_field
from ..combinators.chain import chain
from ..linalg.null_space import drop_null_lines, frobenius
from ..transforms.scaling import scale_by_learning_rate
from . import _kronecker as kron


class SoapState(NamedTuple):
    """State of :class:`scale_by_soap`."""

    count: jax.Array  # int32 scalar: updates so far (the first makes none)
    mu: Any  # first moment, like the params, in the original space
    nu: Any  # second moment in the eigenbasis, like the params (real dtype)
    stats: Any  # per factored leaf (L, R): (*batch, m, m), (*batch, n, n) or None
    bases: Any  # per factored leaf (Q_L, Q_R), eigenbases of (L, R), or None


class _SoapOptions(Module):
    """The options of scale_by_soap and soap."""

    _abstract = True

    b1: Any = hyper(default=0.95, valid=DECAY)
    b2: Any = hyper(default=0.95, valid=DECAY)
    shampoo_beta: Any = hyper(default=-1.0, valid=Range(high=1.0, high_open=True))
    eps: Any = hyper(default=1e-8, valid=NONNEGATIVE)
    weight_decay: Any = hyper(default=0.0, valid=NONNEGATIVE)
    precondition_frequency: int = hyper(default=10, valid=POSITIVE_INT, static=True)
    max_precond_dim: int = hyper(default=10000, valid=POSITIVE_INT, static=True)
    _: KW_ONLY
    precondition_1d: bool = static_field(default=False)
    normalize_grads: bool = static_field(default=False)
    correct_bias: bool = static_field(default=True)
    weight_dimension_numbers: Any = static_field(default="auto")


class scale_by_soap(_SoapOptions, GradientTransformation):
    """SOAP's direction, with its step size and weight decay. See :class:`soap`.

    Args:
      b1: decay of the first moment, in [0, 1).
      b2: decay of the second moment, in [0, 1).
      shampoo_beta: decay of the factors `L, R`, < 1: in [0, 1), or negative
        for `b2`.
      eps: added to `sqrt(v)`, >= 0.
      weight_decay: decoupled weight decay :math:`\\lambda`, >= 0 (needs params).
      precondition_frequency: refresh the eigenbases every this many
        updates, an integer >= 1.
      max_precond_dim: a side longer than this gets no rotation, an integer
        >= 1.
      precondition_1d: rotate vectors too (one factor).
      normalize_grads: divide each matrix's direction by its RMS.
      correct_bias: Adam's bias correction in the step size.
      weight_dimension_numbers: which leaves are (stacks of) matrices, as in
        :class:`gradax.scale_by_muon`: "auto" (2-D; 3-D as stacked; 4-D as
        conv), None (2-D only), dimension numbers, a tree or a function.
    """

    def _plans(self, tree):
        return kron.plans(
            self.weight_dimension_numbers,
            tree,
            max_dim=self.max_precond_dim,
            vector=self.precondition_1d,
        )

    def init_state(self, params):
        plans, treedef = self._plans(params)
        return SoapState(
            zero_count(),
            jax.tree.map(jnp.zeros_like, params),
            jax.tree.map(lambda p: jnp.zeros_like(p, real_dtype(p.dtype)), params),
            kron.factor_tree(plans, treedef, params),
            kron.factor_tree(plans, treedef, params),
        )

    def update_state(self, updates, state, params=None, **extra_args):
        plans, treedef = self._plans(updates)
        if params is not None:
            param_leaves = treedef.flatten_up_to(params)
        elif not isinstance(self.weight_decay, (int, float)) or self.weight_decay:
            raise ValueError("scale_by_soap with weight_decay needs params")
        else:
            param_leaves = [None] * len(plans)
        count = state.count
        # In the leaves' precision: float32, or float64 for float64 leaves
        # (as Adam's correction is, and optax's).
        dtype = jnp.result_type(
            jnp.float32,
            *(real_dtype(work_dtype(g.dtype)) for g in treedef.flatten_up_to(updates)),
        )
        t = jnp.maximum(count, 1).astype(dtype)
        scale = 1.0
        if self.correct_bias:
            scale = jnp.sqrt(1 - self.b2**t) / (1 - self.b1**t)
        columns = zip(
            plans,
            treedef.flatten_up_to(updates),
            param_leaves,
            treedef.flatten_up_to(state.mu),
            treedef.flatten_up_to(state.nu),
            treedef.flatten_up_to(state.stats),
            treedef.flatten_up_to(state.bases),
            strict=True,
        )
        outs = [
            self._leaf(plan, g, p, mu, nu, stats, bases, count, scale)
            for plan, g, p, mu, nu, stats, bases in columns
        ]
        # Five trees from per-leaf rows (a tree with no leaves has no rows).
        new = [jax.tree.unflatten(treedef, [o[i] for o in outs]) for i in range(5)]
        direction, mu, nu, stats, bases = new
        return direction, SoapState(safe_increment(count), mu, nu, stats, bases)

    def _leaf(self, plan, g, p, mu, nu, stats, bases, count, scale):
        b1, b2, first = self.b1, self.b2, count == 0
        sb = jnp.where(jnp.asarray(self.shampoo_beta) < 0, b2, self.shampoo_beta)
        dtype = work_dtype(g.dtype)
        (gm, nu_m, mu_m), shardings = zip(
            *(kron.gather(x, plan) for x in (g, nu, mu)), strict=True
        )
        gm = plan.to_matrices(gm).astype(dtype)
        nu_m = plan.to_matrices(nu_m).astype(real_dtype(dtype))
        mu_m = plan.to_matrices(mu_m).astype(dtype)
        q = bases if bases is not None else (None, None)
        rotated = kron.rotate(gm, *q)
        new_mu = b1 * mu_m + (1 - b1) * gm
        numerator = kron.rotate(new_mu, *q)
        if plan.factored:
            # Along eigenvectors that rounding chose (a rank-deficient L or
            # R), the rotated rows and columns are rounding noise that Adam's
            # division would turn into O(1) steps in arbitrary directions:
            # they are set to exactly zero instead (see gradax/linalg/null_space.py).
            n = max(plan.rows, plan.cols)
            rotated = drop_null_lines(rotated, frobenius(gm), n)
            numerator = drop_null_lines(numerator, frobenius(new_mu), n)
        new_nu = b2 * nu_m + (1 - b2) * jnp.abs(rotated) ** 2
        # The null lines above make exact zeros in new_nu.
        ratio = numerator / (_root(new_nu) + self.eps).astype(dtype)
        d = kron.rotate(ratio, *q, back=True)
        if self.normalize_grads:
            axes = (-2, -1) if plan.factored else None
            # The first step is zero.
            rms = _root(jnp.mean(jnp.abs(d) ** 2, axis=axes, keepdims=True))
            # A zero direction divides by 1, not by 1e-30: XLA joins this
            # division with Adam's above ((a / b) / c to a / (b c)), and eps
            # times 1e-30 is below float32's smallest normal number, flushed
            # to 0, so a zero gradient gave 0 / 0 = NaN under jit (not
            # eagerly). The values are the authors' otherwise.
            moved = rms > 0
            d = jnp.where(moved, d, 0) / jnp.where(moved, 1e-30 + rms, 1)
        # The bias correction scales the step after any normalization, as in
        # the authors' code (normalizing after it would cancel it).
        d = scale * d
        if plan.factored:
            sides = ("left", "right")
            stats = tuple(
                None if s is None else sb * s + (1 - sb) * kron.gram(gm, side)
                for s, side in zip(stats, sides, strict=True)
            )
            refresh = (count > 0) & (count % self.precondition_frequency == 0)
            branch = jnp.where(first, 1, jnp.where(refresh, 2, 0))
            bases, new_nu = jax.lax.switch(
                branch,
                [
                    lambda: (bases, new_nu),
                    lambda: (_initial_bases(stats, bases), new_nu),
                    lambda: _refreshed(stats, bases, new_nu),
                ],
            )
        d = jnp.where(first, 0, d)
        new_mu = jnp.where(first, mu_m, new_mu)
        new_nu = jnp.where(first, nu_m, new_nu)
        d, new_mu, new_nu = (
            kron.ungather(plan.from_matrices(x), s)
            for x, s in zip((d, new_mu, new_nu), shardings, strict=True)
        )
        if p is not None:
            d = d + jnp.where(first, 0, self.weight_decay) * p
        return (
            d,
            match_sharding(new_mu, mu),
            match_sharding(new_nu, nu),
            stats,
            bases,
        )


def _root(x):
    """`sqrt(x)` with a finite slope where `x` is exactly 0 (the same values):
    sqrt's infinite slope there makes `jax.grad` through a hyperparameter
    (`b2`, `eps`) NaN, even where the step is discarded."""
    zero = x == 0
    return jnp.where(zero, 0, jnp.sqrt(jnp.where(zero, 1, x)))


def _initial_bases(stats, bases):
    return tuple(
        None if s is None else match_sharding(kron.eigenbasis(s), q)
        for s, q in zip(stats, bases, strict=True)
    )


def _refreshed(stats, bases, nu):
    out = []
    for axis, s, q in zip((-2, -1), stats, bases, strict=True):
        if s is None:
            out.append(None)
            continue
        new_q, order = kron.refresh_basis(s, q)
        out.append(match_sharding(new_q, q))
        index = order[..., :, None] if axis == -2 else order[..., None, :]
        nu = jnp.take_along_axis(nu, index, axis=axis)
    return tuple(out), nu


class soap(_SoapOptions, LearningRateAlias):
    r"""SOAP: Adam in the eigenbasis of Shampoo's preconditioner.

    For each matrix :math:`G_t` (fan-in x fan-out; stacked weights give one
    per slice) with factors :math:`L, R` and eigenbases :math:`Q_L, Q_R`,
    update :math:`t \ge 2`, :math:`s = t - 1`:

    .. math::
      M_t = b_1 M_{t-1} + (1 - b_1) G_t,\quad
      V_t = b_2 V_{t-1} + (1 - b_2) |Q_L^H G_t Q_R|^2,\\
      D_t = Q_L \frac{Q_L^H M_t Q_R}{\sqrt{V_t} + \epsilon} Q_R^H,\quad
      u_t = -\eta_t \Big(\frac{\sqrt{1 - b_2^s}}{1 - b_1^s} D_t
            + \lambda \theta_{t-1}\Big),\\
      L_t = \beta L_{t-1} + (1 - \beta) G_t G_t^H,\quad
      R_t = \beta R_{t-1} + (1 - \beta) G_t^H G_t.

    The first update only sets :math:`L_1, R_1` and :math:`Q_L, Q_R` (from
    `eigh`) and returns zeros, so no gradient is ever rotated by a basis
    built from itself. When :math:`s` is a multiple of
    `precondition_frequency`, each basis is refreshed after the step by one
    power iteration, `Q <- qr(L Q')`, with `Q'` the old columns sorted by
    the estimated eigenvalues `diag(Q^H L Q)`, and :math:`V` is permuted to
    match. A side longer than `max_precond_dim` is not rotated; vectors and
    scalars get plain Adam with the same step counting (unless
    `precondition_1d`). Numbers follow the reference implementation
    (nikhilvyas/SOAP `soap.py`, commit a1e5535), except
    that the weight decay uses :math:`\theta_{t-1}` (AdamW's) where the
    reference decays the already updated weight (a difference of order
    :math:`\eta^2\lambda`), and `normalize_grads` works per matrix; and
    rotated rows and columns at the rounding noise floor (norm below
    `4 sqrt(n) eps` of the matrix's: the gradient's components along a
    rank-deficient factor's null space, whose basis rounding picks) are set
    to zero before the division, where the reference turns them into O(1)
    steps in arbitrary directions. Where a factor has repeated nonzero eigenvalues its
    eigenbasis is not unique, and, as in the reference, the numbers depend on
    the one `eigh` returns (Adam's division is not rotation invariant).

    Args:
      learning_rate: :math:`\eta`, a number or schedule.
      b1: :math:`b_1` in [0, 1).
      b2: :math:`b_2` in [0, 1).
      shampoo_beta: :math:`\beta < 1`: in [0, 1), or negative for `b2`.
      eps: :math:`\epsilon` >= 0.
      weight_decay: :math:`\lambda` >= 0.
      precondition_frequency: refresh the bases every this many updates, an
        integer >= 1.
      max_precond_dim: sides longer than this get no rotation, an integer
        >= 1.
      precondition_1d: rotate 1-D leaves too (one factor).
      normalize_grads: divide each matrix's direction by its RMS.
      correct_bias: Adam's bias correction of the step size.
      weight_dimension_numbers: which leaves are (stacks of) matrices:
        "auto" (2-D matrices, 3-D stacks along the first axis, 4-D conv
        kernels `(h, w, c_in, c_out)`), None (2-D only), or dimension numbers
        as :class:`gradax.muon` takes them.

    Returns:
      The optimizer, a gradient transformation.

    Example:
      >>> import jax, jax.numpy as jnp, gradax
      >>> params = {"w": jnp.ones((3, 4)), "b": jnp.zeros(4)}
      >>> tx = gradax.soap(3e-3)
      >>> state = tx.init(params)
      >>> grads = {"w": jnp.arange(12.0).reshape(3, 4), "b": jnp.ones(4)}
      >>> updates, state = tx.update(grads, state, params)  # first: zeros
      >>> float(jnp.abs(updates["w"]).max())
      0.0
      >>> updates, state = tx.update(grads, state, params)
      >>> state[0].bases["w"][0].shape, updates["w"].shape
      ((3, 3), (3, 4))

    References:
      Vyas et al., SOAP: Improving and Stabilizing Shampoo using Adam, 2024
      (arXiv:2409.11321).
    """

    # soap's own defaults (the declarations and their ranges are inherited).
    learning_rate: Any = 0.003
    weight_decay: Any = 0.01

    def build(self):
        return chain(
            self.part(scale_by_soap),
            scale_by_learning_rate(self.learning_rate),
        )
