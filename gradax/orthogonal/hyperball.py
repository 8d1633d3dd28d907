r"""Hyperball optimizers: MuonH and AdamH keep each matrix on a fixed-norm sphere.

Wen, Dang, Lyu, Ma, Liang, "Fantastic Pretraining Optimizers and Where to
Find Them II: Hyperball Optimization" (Marin, 2025-12 blog, arXiv:2606.16899):
given a base optimizer's update :math:`u_t` (Muon's or Adam's) for a weight
matrix :math:`W` of radius :math:`R = \|W_0\|_F`,

.. math::
  W_{t+1} = R\,\mathrm{Norm}\big(W_t - \eta_t\,R\,\mathrm{Norm}(u_t)\big),
  \qquad \mathrm{Norm}(X) = X / \|X\|_F .

Both the weight's and the update's Frobenius norms are fixed, so the ratio
of update to weight (the angular step) is :math:`\eta` at every width and
depth; there is no weight decay on these matrices. The other parameters
(embeddings, head, vectors) get AdamW, as in the paper.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from .._core.declarations import DECAY, POSITIVE, hyper, static_field
from .._core.protocol import GradientTransformation
from ..combinators.chain import chain
from ..linalg.matrices import full_dimension_numbers, is_spec_leaf
from ..optimizers.adam import scale_by_adam
from ..transforms.scaling import scale_by_learning_rate
from . import _fields as fields
from ._steps import MuonOptions
from .blocks import matrix_blocks
from .groups import MuonGroups
from .muon import scale_by_muon

# The smallest norm divided by: a zero update (or weight) stays zero.
_TINY = 1e-30


def _per_matrix(fn: Any, dims: Any, *arrays: jax.Array) -> jax.Array:
    """`fn` on each matrix of the leaves, as `dims` cuts them (blocks too)."""
    blocks = matrix_blocks(arrays[0].shape, dims)
    stacks = [blocks.to_stacks(a) for a in arrays]
    return blocks.from_stacks([fn(*parts) for parts in zip(*stacks, strict=True)])


def _wide(x: jax.Array) -> jax.Array:
    """`x` in at least float32 (complex and float64 kept as they are)."""
    if jnp.issubdtype(x.dtype, jnp.complexfloating) or x.dtype == jnp.float64:
        return x
    return x.astype(jnp.float32)


def _fro(x: jax.Array) -> jax.Array:
    """Frobenius norm of each matrix of a stack `(..., m, n)`, kept as axes."""
    return jnp.sqrt(jnp.sum(jnp.abs(_wide(x)) ** 2, axis=(-2, -1), keepdims=True))


class _HyperballStep(GradientTransformation):
    """One stage of the hyperball step on each matrix (needs `params`).

    `stage="direction"`: `u -> R * u / ||u||_F`; `stage="retract"`: the
    scaled step `d` (already `-lr * R * Norm(u)`) becomes `R * Norm(W + d)
    - W`. `R` is `radius`, or each matrix's current norm `||W_t||_F`,
    which the retraction keeps equal to `||W_0||_F` (up to rounding).
    """

    weight_dimension_numbers: Any = static_field()
    stage: str = static_field()
    radius: Any = hyper(default=None, valid=POSITIVE)

    def update_state(self, updates, state, params=None, **extra_args):
        if params is None:
            raise ValueError(
                "muonh/adamh: update needs params (the weights are kept on "
                "their sphere): call update(grads, state, params)"
            )

        def radius(w):
            return _fro(w) if self.radius is None else self.radius

        def direction(u, w):
            norm = _fro(u)
            return (u * (radius(w) / jnp.maximum(norm, _TINY))).astype(u.dtype)

        def retract(d, w):
            r = radius(w)
            moved = _wide(w) + _wide(d)
            target = moved * (r / jnp.maximum(_fro(moved), _TINY))
            return (target - _wide(w)).astype(d.dtype)

        fn = direction if self.stage == "direction" else retract

        def leaf(dims, u, w):
            return u if dims is None else _per_matrix(fn, dims, u, w)

        dims = full_dimension_numbers(
            self.weight_dimension_numbers, updates, default_2d_only=False
        )
        new = jax.tree.map(leaf, dims, updates, params, is_leaf=is_spec_leaf)
        return new, state


class HyperballGroups(MuonGroups):
    """Base of `muonh` and `adamh`: the matrices on their spheres, AdamW else.

    A member builds its matrices' group with :func:`sphere_group`: no weight
    decay and no shape factor there (the update's norm is set to R).
    """

    _abstract = True

    def shape_rule(self) -> str:
        return "none"  # the sphere sets the update's norm

    def _matrix_direction(self, dims: Any) -> GradientTransformation:
        """The member's direction for the matrices, before the sphere."""
        raise NotImplementedError

    def _build_groups(self, dims, labels):
        this: Any = self  # the members' fields
        matrices = sphere_group(
            self._matrix_direction(dims), dims, this.learning_rate, this.radius
        )
        return self._two_groups(
            labels,
            matrices,
            eps=this.eps,
            mu_dtype=this.mu_dtype,
            nesterov=this.nesterov,
        )


def sphere_group(
    direction: GradientTransformation, dims: Any, learning_rate: Any, radius: Any
) -> GradientTransformation:
    """The matrices' group of `muonh` and `adamh`: the direction, on the sphere.

    In place of Muon's shape factor, weight decay and learning rate: the
    update's norm is set to R, the step is the learning rate, and the
    weight is brought back to its sphere.
    """
    return chain(
        direction,
        _HyperballStep(dims, "direction", radius),
        scale_by_learning_rate(learning_rate),
        _HyperballStep(dims, "retract", radius),
    )


class muonh(MuonOptions, HyperballGroups):
    r"""MuonH: Muon on the hyperball (each matrix at a fixed Frobenius norm).

    For each matrix :math:`W` (routed as :class:`muon` routes), with
    :math:`O_t` Muon's orthogonalized momentum and :math:`R = \|W_0\|_F`
    (or `radius`):

    .. math::
      W_{t+1} = R\,\mathrm{Norm}\big(W_t - \eta_t\,R\,\mathrm{Norm}(O_t)\big),
      \qquad \mathrm{Norm}(X) = X / \|X\|_F .

    No weight decay and no shape factor on the matrices (the norms are
    fixed). Every other leaf gets AdamW (the `adam_*` options) or `adam`.
    `update` needs `params`. Without `radius`, R is each matrix's norm when
    the step is taken, which the step preserves: a matrix initialized at
    zero stays zero, so give `radius` for those. A matrix cut into blocks
    (`MuonSplit`) or a stack of matrices keeps each block on its own sphere.

    Args:
      learning_rate: :math:`\eta`, the angular step (the update's norm over
        the weight's), a number or schedule.
      radius: None (each matrix's own norm) or the sphere's radius, > 0.
      ns_coeffs, ns_steps, beta, eps, mu_dtype: Muon's direction, as in
        :class:`muon`.
      nesterov, momentum, bias_correction: Muon's momentum, as in
        :class:`muon`.
      preconditioning, method, precision, distributed: Muon's
        orthogonalization, as in :class:`muon`.
      adam_b1, adam_b2, adam_eps_root, adam_weight_decay: the other group's
        AdamW, as in :class:`muon`.
      adam_learning_rate, adam_eps, adam: the other group, as in
        :class:`muon`.
      muon_weight_dimension_numbers: the routing, as in :class:`muon`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> params = {"w": jnp.ones((4, 8)), "b": jnp.zeros(8)}
      >>> tx = gradax.muonh(0.1)
      >>> grads = {"w": jnp.eye(4, 8), "b": jnp.ones(8)}
      >>> updates, _ = tx.update(grads, tx.init(params), params)
      >>> new = gradax.apply_updates(params, updates)
      >>> round(float(jnp.linalg.norm(new["w"])), 4)  # ||W_0||_F = sqrt(32)
      5.6569

    References:
      Wen, Dang, Lyu, Ma, Liang, Fantastic Pretraining Optimizers and Where
      to Find Them II: Hyperball Optimization, 2026 (arXiv:2606.16899;
      Marin blog, 2025-12-15).
    """

    # After MuonGroups' fields, the keyword-only options are MuonOptions'.
    ns_coeffs: Any = fields.MUON.field()
    ns_steps: int = fields.MUON.field()
    beta: Any = fields.MUON.field()
    eps: Any = fields.MUON.field()
    mu_dtype: Any = fields.MUON.field()
    radius: Any = hyper(default=None, valid=POSITIVE, kw_only=True)

    def _matrix_direction(self, dims):
        return self.part(scale_by_muon, weight_dimension_numbers=dims)


class adamh(HyperballGroups):
    r"""AdamH: Adam on the hyperball (each matrix at a fixed Frobenius norm).

    For each matrix :math:`W` (2-D leaves by default, or as
    `muon_weight_dimension_numbers` routes), with :math:`u_t =
    \hat m_t / (\sqrt{\hat v_t} + \epsilon)` Adam's update and
    :math:`R = \|W_0\|_F` (or `radius`):

    .. math::
      W_{t+1} = R\,\mathrm{Norm}\big(W_t - \eta_t\,R\,\mathrm{Norm}(u_t)\big),
      \qquad \mathrm{Norm}(X) = X / \|X\|_F .

    No weight decay on the matrices. Every other leaf gets AdamW (the
    `adam_*` options) or `adam`. `update` needs `params`; see
    :class:`muonh` for `radius` and zero-initialized matrices.

    Args:
      learning_rate: :math:`\eta`, the angular step, a number or schedule.
      b1: the matrices' first-moment decay, in [0, 1).
      b2: the matrices' second-moment decay, in [0, 1).
      eps: the matrices' eps (also the AdamW group's by default), >= 0.
      radius: None (each matrix's own norm) or the sphere's radius, > 0.
      mu_dtype: dtype of the first moments.
      nesterov: Nesterov momentum (both groups).
      adam_b1, adam_b2, adam_eps_root, adam_weight_decay: the other group's
        AdamW, as in :class:`muon`.
      adam_learning_rate, adam_eps, adam: the other group, as in
        :class:`muon`.
      muon_weight_dimension_numbers: the routing, as in :class:`muon`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> params = {"w": jnp.ones((4, 8)), "b": jnp.zeros(8)}
      >>> tx = gradax.adamh(0.1)
      >>> grads = {"w": jnp.eye(4, 8), "b": jnp.ones(8)}
      >>> updates, _ = tx.update(grads, tx.init(params), params)
      >>> new = gradax.apply_updates(params, updates)
      >>> round(float(jnp.linalg.norm(new["w"])), 4)
      5.6569

    References:
      Wen, Dang, Lyu, Ma, Liang, Fantastic Pretraining Optimizers and Where
      to Find Them II: Hyperball Optimization, 2026 (arXiv:2606.16899).
    """

    b1: Any = hyper(default=0.9, valid=DECAY)
    b2: Any = hyper(default=0.999, valid=DECAY)
    eps: Any = fields.MUON.field()
    radius: Any = hyper(default=None, valid=POSITIVE, kw_only=True)
    mu_dtype: Any = static_field(default=None, kw_only=True)
    nesterov: bool = static_field(default=False, kw_only=True)

    def _matrix_direction(self, dims):
        return scale_by_adam(
            self.b1, self.b2, self.eps, mu_dtype=self.mu_dtype, nesterov=self.nesterov
        )
