"""GaLore: an optimizer run on low-rank projections of matrix gradients."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from .._compat import reshard
from .._core.axes import explicit_sharding
from .._core.declarations import (
    ANY,
    LEARNING_RATE,
    NONNEGATIVE,
    POSITIVE_INT,
    Shared,
    hyper,
)
from .._core.numerics import safe_increment
from .._core.protocol import Alias, GradientTransformation, zero_count
from .._core.pytree import static_field
from ..combinators.masked import MaskedNode
from ..linalg.matrices import matrix_axes
from ..linalg.null_space import drop_null_lines, frobenius
from ..optimizers.adam import scale_by_adam
from ..transforms.cautious import decayed_descent


class GaLoreDimensionNumbers(NamedTuple):
    """Which axes of a parameter form the rows and columns of its matrix.

    The parameter is transposed to `reduction_axis + output_axis` and
    reshaped to a `(rows, columns)` matrix before it is projected; e.g. an
    attention weight `(embed, heads, head_dim)` with `reduction_axis=0`,
    `output_axis=(1, 2)` is an `embed x (heads * head_dim)` matrix.
    """

    reduction_axis: Sequence[int] | int = 0
    output_axis: Sequence[int] | int = 1


class GaLoreState(NamedTuple):
    """State of :class:`scale_by_galore`."""

    count: jax.Array  # int32 scalar: number of updates so far
    base_optimizer_state: Any  # on the projected (low-rank) gradients
    # Per leaf: (m, r) or (n, r); an empty MaskedNode if not projected (a
    # zero-size array there could not be saved: orbax refuses them).
    projector: Any


class _MatrixView(NamedTuple):
    """How one parameter is seen as a matrix, and whether to project left."""

    perm: tuple[int, ...]
    rows: int
    cols: int
    rank: int

    @property
    def left(self) -> bool:
        return self.rows >= self.cols

    def to_matrix(self, x: jax.Array) -> jax.Array:
        return jnp.transpose(x, self.perm).reshape(self.rows, self.cols)

    def from_matrix(self, m: jax.Array, shape: tuple[int, ...]) -> jax.Array:
        permuted = tuple(shape[axis] for axis in self.perm)
        inverse = tuple(sorted(range(len(shape)), key=self.perm.__getitem__))
        return m.reshape(permuted).transpose(inverse)


def _view(shape: tuple[int, ...], dims: GaLoreDimensionNumbers, rank: int):
    ndim = len(shape)
    if ndim < 2:
        raise ValueError(f"GaLore projects arrays of rank >= 2, got shape {shape}")
    rows = matrix_axes(dims.reduction_axis, ndim)
    cols = matrix_axes(dims.output_axis, ndim)
    if set(rows) & set(cols) or len(set(rows) | set(cols)) != ndim:
        raise ValueError(
            f"GaLore dimension numbers must split the axes of shape {shape} into "
            f"two disjoint groups covering all of them; got reduction axes {rows} "
            f"and output axes {cols}"
        )
    m = math.prod(shape[a] for a in rows)
    n = math.prod(shape[a] for a in cols)
    return _MatrixView(rows + cols, m, n, min(rank, m, n))


def _projector_shape(view: _MatrixView) -> tuple[int, int]:
    return (view.rows, view.rank) if view.left else (view.cols, view.rank)


def _low_rank_shape(view: _MatrixView) -> tuple[int, int]:
    return (view.rank, view.cols) if view.left else (view.rows, view.rank)


def _new_projector(g2: jax.Array, view: _MatrixView) -> jax.Array:
    """The top singular vectors of the gradient matrix (left or right)."""
    work = jnp.promote_types(g2.dtype, jnp.float32)
    u, _, vh = jnp.linalg.svd(g2.astype(work), full_matrices=False)
    if view.left:
        p = u[:, : view.rank]
    else:
        p = jnp.conj(vh[: view.rank, :]).T
    return p.astype(g2.dtype)


# scale_by_galore's options, declared once: it and the optimizers that
# build it take each field from here and pass the values on with Alias.part.
_GALORE = Shared(
    rank=hyper(default=128, valid=POSITIVE_INT, static=True),
    update_proj_gap=hyper(default=200, valid=POSITIVE_INT, static=True),
    scale=hyper(default=1.0, valid=ANY),  # a plain factor, as scale()
    weight_dimension_numbers=static_field(default=None),
)


# The projected optimizer when none is given: built once, for every instance
# (base_optimizer=None stays the field's value, as in optax's signature).
_DEFAULT_BASE = scale_by_adam()


class scale_by_galore(GradientTransformation):
    """Runs `base_optimizer` on GaLore projections. See :class:`galore`.

    Args:
      rank: the rank :math:`r` of the projections, a positive integer.
      update_proj_gap: recompute the projectors every this many steps, an
        integer >= 1.
      scale: :math:`\\alpha`, any real number multiplying the projected-back
        updates (a plain factor, as in optax: its sign is the direction).
      base_optimizer: a transformation that does not need `params` (it sees
        the projected gradients, and the full ones of unprojected leaves);
        default :class:`scale_by_adam`.
      weight_dimension_numbers: which leaves to project and how to see them
        as matrices: None (the 2-D leaves), one
        :class:`GaLoreDimensionNumbers` (every leaf of rank >= 2), a tree
        like the params of those or None, or a function of the params
        returning such a tree.
    """

    rank: int = _GALORE.field()
    update_proj_gap: int = _GALORE.field()
    scale: Any = _GALORE.field()
    base_optimizer: Any = None
    weight_dimension_numbers: Any = _GALORE.field()

    def _base(self) -> GradientTransformation:
        return _DEFAULT_BASE if self.base_optimizer is None else self.base_optimizer

    def _views(self, tree: Any) -> tuple[list, list, Any]:
        """Leaves of `tree`, their matrix views (None: not projected), treedef."""
        leaves, treedef = jax.tree.flatten(tree)
        spec = self.weight_dimension_numbers
        if spec is None:
            dims = [GaLoreDimensionNumbers() if x.ndim == 2 else None for x in leaves]
        elif isinstance(spec, GaLoreDimensionNumbers):
            dims = [spec if x.ndim >= 2 else None for x in leaves]
        else:
            chosen = spec(tree) if callable(spec) else spec
            dims = treedef.flatten_up_to(chosen)
        views = [
            None if d is None else _view(tuple(x.shape), d, self.rank)
            for x, d in zip(leaves, dims, strict=True)
        ]
        return leaves, views, treedef

    def init_state(self, params):
        leaves, views, treedef = self._views(params)
        projectors, proxies = [], []
        for p, view in zip(leaves, views, strict=True):
            if view is None:
                projectors.append(MaskedNode())
                proxies.append(jnp.zeros_like(p))
            else:
                projectors.append(jnp.zeros(_projector_shape(view), p.dtype))
                proxies.append(jnp.zeros(_low_rank_shape(view), p.dtype))
        return GaLoreState(
            count=zero_count(),
            base_optimizer_state=self._base().init(treedef.unflatten(proxies)),
            projector=treedef.unflatten(projectors),
        )

    def update_state(self, updates, state, params=None, **extra_args):
        leaves, views, treedef = self._views(updates)
        refresh = state.count % self.update_proj_gap == 0
        old_projectors = treedef.flatten_up_to(state.projector)
        low_rank, projectors = [], []
        for g, view, old in zip(leaves, views, old_projectors, strict=True):
            if view is None:
                low_rank.append(g)
                projectors.append(old)
                continue
            if explicit_sharding(g) is not None:
                # The SVD needs whole matrices: work replicated, reshard at the end.
                g, old = (reshard(x, P()) for x in (g, old))
            g2 = view.to_matrix(g)
            # In the state's dtype (the params'), whatever the gradients' is:
            # both branches of the cond must agree.
            p = jax.lax.cond(
                refresh,
                lambda g2=g2, v=view, o=old: _new_projector(g2, v).astype(o.dtype),
                lambda o=old: o,
            )
            projected = jnp.conj(p).T @ g2 if view.left else g2 @ p
            # The singular vectors of a rank-deficient gradient past its rank
            # are chosen by rounding, and so are the rows (columns) of the
            # projection along them: noise that an Adam-like base optimizer
            # would scale up to O(1) steps in arbitrary directions. They are
            # set to exactly zero (see gradax/linalg/null_space.py).
            # Only the projector's side: the other axis is the gradient's own.
            n, side = (view.rows, (-1,)) if view.left else (view.cols, (-2,))
            low_rank.append(drop_null_lines(projected, frobenius(g2), n, side))
            projectors.append(p)
        base_updates, base_state = self._base().update(
            treedef.unflatten(low_rank), state.base_optimizer_state, None, **extra_args
        )
        out = []
        for g, view, p, u in zip(
            leaves, views, projectors, treedef.flatten_up_to(base_updates), strict=True
        ):
            if view is None:
                out.append(u)
                continue
            full = p @ u if view.left else u @ jnp.conj(p).T
            # The gradients' dtype, as every update keeps it.
            full = (self.scale * view.from_matrix(full, g.shape)).astype(g.dtype)
            sharding = explicit_sharding(g)
            if sharding is not None:
                full = reshard(full, sharding.spec)
            out.append(full)
        return treedef.unflatten(out), GaLoreState(
            count=safe_increment(state.count),
            base_optimizer_state=base_state,
            projector=treedef.unflatten(projectors),
        )


class galore(Alias):
    r"""GaLore: full-parameter training with optimizer state on low-rank projections.

    For a matrix gradient :math:`G_t \in \mathbb{R}^{m \times n}` with
    :math:`m \ge n` (else the same on the right), every `update_proj_gap`
    steps :math:`P_t` is set to the top-:math:`r` left singular vectors of
    :math:`G_t` (otherwise :math:`P_t = P_{t-1}`), and

    .. math::
      R_t = P_t^\top G_t,\quad N_t = \text{base}(R_t),\quad
      u_t = -\eta_t \left(\alpha P_t N_t + \lambda \theta_{t-1}\right),

    so the base optimizer (Adam by default) keeps :math:`r \times n` moments
    instead of :math:`m \times n`. Leaves that are not projected (by default
    those that are not 2-D) get the base optimizer's update directly.

    Differences from optax: the singular vectors are computed in float64 for
    float64 gradients (optax: always float32); complex gradients are
    projected with the conjugate transpose (optax drops their imaginary part
    when computing the projector); a leaf that is not projected has an empty
    :class:`~gradax.MaskedNode` as its projector, not optax's `(0, 0)`
    array, which orbax refuses to save.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule.
      rank: :math:`r`, a positive integer (at most the matrix's smaller side
        is used).
      update_proj_gap: recompute the projectors every this many steps, an
        integer >= 1.
      scale: :math:`\alpha`, any real number (a plain factor, as in optax).
      base_optimizer: the transformation run on the projections; it must not
        need `params` (use `weight_decay` here, not `adamw` there).
        Default: :class:`scale_by_adam`. Give it no learning rate, or set
        `learning_rate=1.0` here.
      weight_decay: :math:`\lambda >= 0`, decoupled weight decay in the full
        space.
      mask: a tree of booleans like the params (or a function of the params
        returning one) selecting the leaves that decay.
      weight_dimension_numbers: which leaves to project and how to see them
        as matrices; see :class:`scale_by_galore`.

    Returns:
      The optimizer, a gradient transformation; `update` needs `params`.

    Example:
      >>> import jax, jax.numpy as jnp, gradax
      >>> params = {"w": jnp.ones((8, 4)), "b": jnp.ones(4)}
      >>> tx = gradax.contrib.galore(0.01, rank=2)
      >>> state = tx.init(params)
      >>> state[0].projector["w"].shape
      (8, 2)
      >>> grads = jax.grad(lambda p: jnp.sum(p["w"] ** 2) + jnp.sum(p["b"]))(params)
      >>> updates, state = tx.update(grads, state, params)
      >>> updates["w"].shape
      (8, 4)

    References:
      Zhao et al., GaLore: Memory-Efficient LLM Training by Gradient Low-Rank
      Projection, ICML 2024 (arXiv:2403.03507).
    """

    learning_rate: Any = hyper(valid=LEARNING_RATE)
    rank: int = _GALORE.field()
    update_proj_gap: int = _GALORE.field()
    scale: Any = _GALORE.field()
    base_optimizer: Any = None
    weight_decay: Any = hyper(default=0.0, valid=NONNEGATIVE)
    mask: Any = static_field(default=None)
    weight_dimension_numbers: Any = _GALORE.field()

    def build(self):
        return decayed_descent(
            self.part(scale_by_galore), self.weight_decay, self.mask, self.learning_rate
        )
