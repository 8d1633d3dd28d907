"""Pieces the Muon variants share: per-matrix maps, RMS alignment, their bases.

The full optimizers (`normuon`, `adamuon`, `dion`, `dion2`) derive
from :class:`gradax.orthogonal.groups.MuonGroups`, like `muon` itself: matrices
get the variant's direction, its shape factor, decoupled weight decay and the
learning rate (:func:`gradax.orthogonal.groups.matrix_group`); every other
leaf gets AdamW. Only the direction differs. NorMuon and AdaMuon share one
base here (:class:`NormalizedMuonAliasBase`), Dion and Dion2 another
(:class:`DionAliasBase`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import jax
import jax.numpy as jnp

from .. import tree as gtree
from .._core.axes import match_sharding
from .._core.declarations import DECAY, hyper, static_field
from .._core.numerics import safe_increment, work_dtype
from .._core.protocol import GradientTransformation, zero_count
from ..linalg.matrices import full_dimension_numbers, is_spec_leaf
from . import _fields as fields
from ._steps import MuonOptions
from .blocks import block_view
from .dimensions import shape_scale
from .groups import MuonGroups, matrices_and_adam, shape_rule


def map_matrices(
    fn: Callable, dims: Any, *trees: Any, otherwise: Callable | None = None
) -> Any:
    """`fn(dims, *leaves)` on matrix leaves, `otherwise(*leaves)` elsewhere.

    `otherwise` defaults to returning the first tree's leaf unchanged.
    """

    def apply(d, *xs):
        if d is not None:
            return fn(d, *xs)
        return xs[0] if otherwise is None else otherwise(*xs)

    return jax.tree.map(apply, dims, *trees, is_leaf=is_spec_leaf)


def pick(dims: Any, tuples: Any, index: int) -> Any:
    """Element `index` of the tuples a :func:`map_matrices` call returned.

    A None in place of a tuple (a leaf that is not a matrix) stays None.
    """
    return jax.tree.map(
        lambda _, t: None if t is None else t[index],
        dims,
        tuples,
        is_leaf=is_spec_leaf,
    )


def batch_shape(shape: tuple[int, ...], dims: Any) -> tuple[int, ...]:
    """Shape of the batch axes of a weight viewed as `(..., fan_in, fan_out)`."""
    view = block_view(shape, dims)
    out = jax.eval_shape(view.to_matrices, jax.ShapeDtypeStruct(shape, jnp.float32))
    return tuple(out.shape[:-2])


def frobenius(x: jax.Array) -> jax.Array:
    """Frobenius norm of each matrix of `(..., m, n)`, keeping both axes."""
    return jnp.sqrt(jnp.sum(jnp.abs(x) ** 2, axis=(-2, -1), keepdims=True))


def rms_align(
    y: jax.Array, o: jax.Array, rms: Any, rule: str | None = None
) -> jax.Array:
    """Rescale each matrix of `y` `(..., fan_in, fan_out)` to a fixed size.

    With `rms` a number: `||y||_F = rms * sqrt(fan_in * fan_out)` (update
    RMS `rms`, as NorMuon and AdaMuon write it). With `rms=None`: `y`
    gets the Frobenius norm of `o` (the orthogonalized update before the
    adaptive step) times KellerJordan's `sqrt(max(1, fan_out / fan_in))`, as
    zichongli5/NorMuon `normuon.py` (d45c9a4) does, or another
    :func:`shape_scale` `rule` ("spectral": microsoft/dion's NorMuon). A
    zero matrix stays zero.
    """
    fan_in, fan_out = y.shape[-2:]
    norm = frobenius(y)
    if rms is None:
        target = frobenius(o) * shape_scale(fan_in, fan_out, rule or "keller")
    else:
        target = rms * (fan_in * fan_out) ** 0.5
    positive = norm > 0
    factor = jnp.where(positive, target / jnp.where(positive, norm, 1), 0)
    return y * factor.astype(y.dtype)


def check_shape_scaling(tx: Any) -> None:
    """`shape_scaling` only means something with `consistent_rms=None`."""
    if tx.shape_scaling is not None and tx.consistent_rms is not None:
        raise ValueError(
            f"{type(tx).__name__}: shape_scaling={tx.shape_scaling!r} sets the "
            "factor on the orthogonalized update's norm, used only with "
            "consistent_rms=None (a number fixes the update's RMS instead); "
            f"got consistent_rms={tx.consistent_rms!r}"
        )


def matrix_dims(spec: Any, tree: Any) -> Any:
    """Dimension numbers of a direction's `weight_dimension_numbers` spec."""
    return full_dimension_numbers(spec, tree, default_2d_only=False)


class NormalizedMuonBase(MuonOptions, GradientTransformation):
    """Muon's momentum and orthogonalization, then an adaptive second moment.

    The direction of NorMuon and AdaMuon. Subclasses set `_state_class` (a
    NamedTuple `(count, mu, nu)`) and implement `_nu_init(param, dims)`
    (the second moment of one leaf) and `_normalize(o, nu, view)`: `o` is
    the leaf's orthogonalized update as matrices `(..., fan_in, fan_out)`,
    `view` its :class:`MatrixView`; it returns the normalized matrices and
    the new second moment. The momentum and the orthogonalization are the
    family's steps (:func:`momentum_step`, :class:`NewtonSchulz`).
    """

    _abstract = True
    _state_class: ClassVar[Callable[..., Any]]

    # The keyword-only options are MuonOptions' (they come first).
    bias_correction: bool = False  # off, as in the papers
    ns_coeffs: Any = fields.MUON.field()
    ns_steps: int = fields.MUON.field()
    beta: Any = fields.MUON.field()
    beta2: Any = hyper(default=0.95, valid=DECAY)
    eps: Any = fields.MUON.field()
    mu_dtype: Any = fields.MUON.field()
    consistent_rms: Any = fields.consistent_rms(0.2, allow_none=True)
    # The shape factor with consistent_rms=None (None: "keller").
    shape_scaling: str | None = fields.shape_scaling(None)
    weight_dimension_numbers: Any = static_field(default=None, kw_only=True)

    def __check_init__(self) -> None:
        check_shape_scaling(self)

    def dimension_numbers(self, tree: Any) -> Any:
        """The dimension numbers of each leaf of `tree` (None: not a matrix)."""
        return matrix_dims(self.weight_dimension_numbers, tree)

    def _prepare(self, x: jax.Array) -> jax.Array:
        """What is orthogonalized, from the momentum direction."""
        return x

    def _nu_init(self, param: Any, dims: Any) -> jax.Array:
        raise NotImplementedError

    def _normalize(
        self, o: jax.Array, nu: jax.Array, view: Any
    ) -> tuple[jax.Array, jax.Array]:
        raise NotImplementedError

    def init_state(self, params):
        dims = self.dimension_numbers(params)
        # Blocks of unequal sizes are refused here, not at the first update.
        map_matrices(lambda d, p: block_view(p.shape, d).fan_in, dims, params)
        nu = map_matrices(
            lambda d, p: self._nu_init(p, d), dims, params, otherwise=lambda p: None
        )
        mu = gtree.zeros_like(params, dtype=self.mu_dtype)
        return self._state_class(zero_count(), mu, nu)

    def update_state(self, updates, state, params=None, **extra_args):
        mu, direction = self.momentum_step(updates, state.mu, state.count)
        dims = self.dimension_numbers(updates)
        # Muon's batched (and, under a mesh, distributed) orthogonalization.
        orthogonal = self.newton_schulz.orthogonalize_tree(
            dims,
            map_matrices(lambda d, x: self._prepare(x), dims, direction),
            self.eps,
        )

        def one(d, o, nu, g):
            del g
            view = block_view(o.shape, d)
            matrices = view.to_matrices(o).astype(work_dtype(o.dtype))
            y, new_nu = self._normalize(matrices, nu, view)
            return view.from_matrices(y), match_sharding(new_nu, nu)

        # Leaves that are not matrices pass through, like their state.
        pairs = map_matrices(
            one, dims, orthogonal, state.nu, updates, otherwise=lambda o, n, g: (g, n)
        )
        new_state = self._state_class(
            safe_increment(state.count), mu, pick(dims, pairs, 1)
        )
        return pick(dims, pairs, 0), new_state


class NormalizedMuonAliasBase(MuonOptions, MuonGroups):
    """The arguments of the NorMuon and AdaMuon optimizers (see :class:`normuon`).

    Each of them names its direction's class as `_direction`, which it
    builds with every option of the same name.
    """

    _abstract = True
    _direction: ClassVar[type[NormalizedMuonBase]]

    # After MuonGroups' fields, the keyword-only options are MuonOptions'.
    bias_correction: bool = False  # off, as in the papers
    ns_coeffs: Any = fields.MUON.field()
    ns_steps: int = fields.MUON.field()
    beta: Any = fields.MUON.field()
    beta2: Any = hyper(default=0.95, valid=DECAY)
    eps: Any = fields.MUON.field()
    weight_decay: Any = fields.MUON.field()
    weight_decay_mask: Any = fields.MUON.field()
    mu_dtype: Any = fields.MUON.field()
    consistent_rms: Any = fields.consistent_rms(0.2, allow_none=True)
    # The shape factor with consistent_rms=None (None: "keller").
    shape_scaling: str | None = fields.shape_scaling(None)

    def __check_init__(self) -> None:
        check_shape_scaling(self)

    def shape_rule(self) -> str:
        # The direction is already RMS-aligned: no shape factor.
        return "none"

    def _build_groups(self, dims, labels):
        # The direction takes every option of the same name.
        direction = self.part(self._direction, weight_dimension_numbers=dims)
        return matrices_and_adam(
            self,
            labels,
            direction,
            dims,
            consistent_rms=self.consistent_rms,
            shape_scaling="none",
            nesterov=self.nesterov,
        )


# Dion's and Dion2's shape_scaling="rms": 0.2 sqrt(max(fan_in, fan_out)).
DION_RMS = 0.2


class DionAliasBase(MuonGroups):
    """What the Dion and Dion2 optimizers share: their shape factor and groups.

    Each names its direction's class as `_direction`, which it builds with
    every option of the same name, and declares `shape_scaling`.
    """

    _abstract = True
    _direction: ClassVar[type[GradientTransformation]]

    def _shape_scaling(self) -> str:
        # Each member declares the field where its arguments place it, so
        # the type checker does not see it on this base.
        member: Any = self
        return member.shape_scaling

    def shape_rule(self) -> str:
        return shape_rule(self._shape_scaling(), DION_RMS)

    def _build_groups(self, dims, labels):
        # The AdamW group without Nesterov, as the reference's.
        return matrices_and_adam(
            self,
            labels,
            self.part(self._direction, weight_dimension_numbers=dims),
            dims,
            consistent_rms=DION_RMS,
            shape_scaling=self._shape_scaling(),
            nesterov=False,
        )
