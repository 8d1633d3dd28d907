"""The Muon family's two shared steps: Newton–Schulz and Muon's momentum.

A member composes them (optimistix's model: a solver holds its descent and
its search): it builds its :class:`NewtonSchulz` from its own fields once,
when it is constructed, holds it (`tx.newton_schulz`) and calls it with its
`eps`, and calls :func:`momentum_step` with its momentum options
(:meth:`MuonOptions.momentum_step`). Option names are optax's (`ns_coeffs`,
`ns_steps`, `preconditioning`) all the way down to
:meth:`NewtonSchulz.orthogonalize_matrices`, the one place that hands them to
:func:`gradax.orthogonalize` under its own names (`coefficients`, `steps`,
`normalization` and `precondition`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax

from .. import tree as gtree
from .._compat import reshard
from .._core.axes import explicit_sharding
from .._core.declarations import hyper
from .._core.leaf_ops import arithmetic
from .._core.numerics import safe_increment
from .._core.pytree import Module, static_field
from ..linalg.matrices import MuonDimensionNumbers, is_spec_leaf
from ..sharding.distributed import current_mesh, orthogonalize_many
from . import _fields as fields
from ._grouped import orthogonalize_grouped
from .blocks import matrix_blocks
from .coefficients import newton_schulz_table
from .newton_schulz import orthogonalize

# optax's AOL and Schatten-4 first steps floor their row sums and norms at
# this constant: the family's ``eps`` is for the Frobenius and spectral norms
# (with a small gradient and another eps, using eps there moved Muon's update
# by 2e-2 from optax's).
FIRST_STEP_EPS = 1e-8


class NewtonSchulzOptions(Module):
    """Newton–Schulz's keyword-only options, declared once.

    :class:`NewtonSchulz` reads them; a member inherits them through
    :class:`NewtonSchulzMember` (or :class:`MuonOptions`), which builds its
    NewtonSchulz from them. A member names that base first (`class
    scale_by_muon(MuonOptions, GradientTransformation)`, `class
    muon(MuonOptions, MuonGroups)`): a dataclass collects its bases' fields
    from the last base to the first, so these options follow the other
    base's and come before the member's own.
    """

    _abstract = True

    # 'frobenius', 'spectral', 'aol' or 'schatten'.
    preconditioning: str = hyper(
        default="frobenius", valid=fields.PRECONDITIONINGS, static=True, kw_only=True
    )
    # The Newton–Schulz variant and the iteration's dtype (see
    # gradax.orthogonalize).
    method: str = hyper(default="auto", valid=fields.METHOD, static=True, kw_only=True)
    precision: Any = hyper(
        default=None, valid=fields.PRECISION, static=True, kw_only=True
    )
    # "auto", True, False, None or a mesh: where the matrices are spread.
    distributed: Any = hyper(
        default="auto",
        valid=fields.DISTRIBUTED,
        static=True,
        allow_none=True,
        kw_only=True,
    )


class NewtonSchulz(NewtonSchulzOptions):
    """How a member of the Muon family orthogonalizes: its options, and the steps.

    A member builds it from its options of the same names when it is
    constructed, and holds it (:class:`NewtonSchulzMember`). Every option is
    structure (static), so it has no leaves: the member's `eps`, a leaf
    (`jit` traces it, `grad` differentiates it), is given at each call.

    Args:
      ns_coeffs: a preset name or coefficients of shape (3,) or (T, 3).
      ns_steps: Newton–Schulz steps, >= 1 (a table must not have more rows).
      preconditioning: 'frobenius' (divide by the Frobenius norm), 'spectral'
        (by the spectral norm), 'aol' (Turbo-Muon's row scaling) or
        'schatten' (by the Schatten-4 norm); see :func:`orthogonalize`.
      method: Newton–Schulz variant: "auto" (the fastest measured for the
        shape, dtype and backend), "ns", "gram", "symmetric" or
        "gram_symmetric" (see :func:`orthogonalize`).
      precision: the iteration's dtype: None, "float32", "highest",
        "bfloat16" or "float16" (see :func:`orthogonalize`).
      distributed: "auto" (under `jax.set_mesh`, stack same-shape matrices
        and give each device whole matrices to orthogonalize, so no
        collective runs inside the iteration), True (require a mesh), False
        or None (never), or a mesh.
      owner: the name an error message gives (the member's).
    """

    # The keyword-only options are NewtonSchulzOptions'.
    ns_coeffs: Any = fields.MUON.field()
    ns_steps: int = fields.MUON.field()
    owner: str = static_field(default="NewtonSchulz", kw_only=True, repr=False)

    def __check_init__(self) -> None:
        # A table longer than ns_steps fails here, not at the first update.
        newton_schulz_table(self.ns_coeffs, self.ns_steps)

    def orthogonalize_matrices(self, matrices: jax.Array, eps: Any) -> jax.Array:
        """Orthogonalize a stack of matrices `(..., m, n)` with these options.

        The one place where the family's option names become those of
        :func:`gradax.orthogonalize`: `newton_schulz_table(ns_coeffs,
        ns_steps)` gives its `coefficients` and `steps`, and
        `preconditioning` its `normalization` and `precondition`.

        Args:
          matrices: the stack to orthogonalize.
          eps: the member's `eps`, added to the norm before dividing.
        """
        coefficients, steps = newton_schulz_table(self.ns_coeffs, self.ns_steps)
        normalization, precondition = fields.PRECONDITIONING[self.preconditioning]
        if self.preconditioning in ("aol", "schatten"):
            eps = FIRST_STEP_EPS
        return orthogonalize(
            matrices,
            coefficients=coefficients,
            steps=steps,
            eps=eps,
            normalization=normalization,
            precondition=precondition,
            method=self.method,
            precision=self.precision,
        )

    def mesh(self) -> Any | None:
        """The mesh to spread the matrices over, from `distributed`."""
        if self.distributed is False or self.distributed is None:
            return None
        if isinstance(self.distributed, str) or self.distributed is True:
            mesh = current_mesh()
            if mesh is None and self.distributed is True:
                raise ValueError(
                    f"{self.owner}(distributed=True) needs a mesh: call "
                    "it under jax.set_mesh(mesh), or pass distributed=mesh"
                )
            return mesh
        return self.distributed

    def orthogonalize_tree(self, dims: Any, tree: Any, eps: Any) -> Any:
        """Orthogonalize every leaf of `tree` that has dimension numbers.

        Under a device mesh, same-shape matrices are stacked and each device
        orthogonalizes whole matrices (no collective inside the iteration).
        A leaf split into blocks (heads, fused QKV) gives one stack per block
        size, stacked with the other leaves' matrices of that shape.

        Args:
          dims: the dimension numbers of each leaf (None: not a matrix).
          tree: the arrays, like `dims`.
          eps: the member's `eps` (see :meth:`orthogonalize_matrices`).
        """
        flat_dims, treedef = jax.tree.flatten(dims, is_leaf=is_spec_leaf)
        flat = treedef.flatten_up_to(tree)
        mesh = self.mesh()
        if mesh is None:
            return jax.tree.unflatten(
                treedef, self._orthogonalize_on_one(flat_dims, flat, eps)
            )
        chosen = [i for i, d in enumerate(flat_dims) if d is not None]
        blocks = [matrix_blocks(flat[i].shape, flat_dims[i]) for i in chosen]
        stacks = [b.to_stacks(flat[i]) for b, i in zip(blocks, chosen, strict=True)]
        matrices = [m for leaf in stacks for m in leaf]
        orthogonalize = functools.partial(self.orthogonalize_matrices, eps=eps)
        results = iter(orthogonalize_many(matrices, orthogonalize, mesh))
        out: list[Any] = list(flat)
        for i, b, leaf in zip(chosen, blocks, stacks, strict=True):
            out[i] = b.from_stacks([next(results) for _ in leaf])
        return jax.tree.unflatten(treedef, out)

    def _orthogonalize_on_one(self, flat_dims: list, flat: list, eps: Any) -> list:
        """Every leaf with dimension numbers orthogonalized, no mesh given.

        Without a mesh the matrices are stacked by shape. Under one (with
        `distributed=False`) each leaf keeps its own call, as the compiler
        partitions it: a stack would change the collectives it places.
        """
        out: list[Any] = list(flat)
        on_a_mesh = current_mesh() is not None
        grouped = [
            i
            for i, d in enumerate(flat_dims)
            if d is not None and not on_a_mesh and explicit_sharding(flat[i]) is None
        ]
        for i, d in enumerate(flat_dims):
            if d is not None and i not in grouped:
                out[i] = self.orthogonalize_leaf(flat[i], d, eps)
        blocks = [matrix_blocks(flat[i].shape, flat_dims[i]) for i in grouped]
        stacks = [b.to_stacks(flat[i]) for b, i in zip(blocks, grouped, strict=True)]
        matrices = [m for leaf in stacks for m in leaf]
        orthogonalize = functools.partial(self.orthogonalize_matrices, eps=eps)
        results = iter(orthogonalize_grouped(matrices, orthogonalize))
        for i, b, leaf in zip(grouped, blocks, stacks, strict=True):
            out[i] = b.from_stacks([next(results) for _ in leaf])
        return out

    def orthogonalize_leaf(
        self, x: jax.Array, dims: MuonDimensionNumbers, eps: Any
    ) -> jax.Array:
        """Orthogonalize one weight-shaped array along its matrix axes.

        Args:
          x: the array.
          dims: its dimension numbers.
          eps: the member's `eps` (see :meth:`orthogonalize_matrices`).
        """
        sharding = explicit_sharding(x)
        if sharding is not None:
            # Sharding in types forbids the row-sharded X X^T; iterate on a
            # replicated copy (distributing the work is the sharding module's).
            x = reshard(x, jax.sharding.PartitionSpec())
        # One batched call per block size (one for a whole matrix or heads).
        blocks = matrix_blocks(x.shape, dims)
        out = blocks.from_stacks(
            [self.orthogonalize_matrices(m, eps) for m in blocks.to_stacks(x)]
        )
        if sharding is not None:
            out = reshard(out, sharding.spec)
        return out


class NewtonSchulzMember(NewtonSchulzOptions):
    """A member that orthogonalizes: the :class:`NewtonSchulz` options, and
    the NewtonSchulz they make.

    A concrete member declares `ns_coeffs`, `ns_steps` and `eps` (checked
    as the class is made); the keyword-only options are inherited. It
    builds its :class:`NewtonSchulz` once, when it is constructed (and
    again in :meth:`replace`), and holds it as `newton_schulz`, in its tree
    definition: unflattening it, `init`, `update` and a trace build none.
    It calls it with its `eps`, a leaf.
    """

    _abstract = True

    # How this member orthogonalizes: built by __check_init__ from its
    # options of the same names (not an argument; not in repr, which shows
    # those options). A dataclass sets a field that is not an argument only
    # from a factory: None until __check_init__ runs.
    newton_schulz: NewtonSchulz = static_field(
        default_factory=lambda: None, init=False, repr=False
    )

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        names = {f.name for f in dataclasses.fields(cls)}
        missing = sorted({"ns_coeffs", "ns_steps", "eps"} - names)
        if missing and not cls.__dict__.get("_abstract", False):
            raise TypeError(
                f"{cls.__name__} orthogonalizes by Newton–Schulz but declares "
                f"no {', '.join(missing)}"
            )

    def __check_init__(self) -> None:
        # A table longer than ns_steps fails here, not at the first update.
        built = self.part(NewtonSchulz, owner=self._public_name())
        object.__setattr__(self, "newton_schulz", built)


class MuonOptions(NewtonSchulzMember):
    """A member that orthogonalizes Muon's momentum: the Newton–Schulz
    options, then the momentum's (see :func:`momentum_step`).

    A member may change `nesterov`'s or `bias_correction`'s default (the
    NorMuon and AdaMuon papers' is off) by writing the field again with a
    plain default.
    """

    _abstract = True

    nesterov: bool = static_field(default=True, kw_only=True)
    # "ema" (m = beta m + (1 - beta) g) or "sum" (m = beta m + g).
    momentum: str = hyper(
        default="ema", valid=fields.MOMENTUM, static=True, kw_only=True
    )
    # Divide EMA momentum by 1 - beta^t.
    bias_correction: bool = static_field(default=True, kw_only=True)

    def momentum_step(self, updates: Any, mu: Any, count: jax.Array) -> tuple[Any, Any]:
        """:func:`momentum_step` with this member's options (and its `beta`):
        the new momentum, and the direction to orthogonalize."""
        # Each member declares `beta` where its arguments place it, so the
        # type checker does not see it on this base.
        member: Any = self
        return momentum_step(
            updates,
            mu,
            count,
            beta=member.beta,
            nesterov=self.nesterov,
            momentum=self.momentum,
            bias_correction=self.bias_correction,
        )


def momentum_step(
    updates: Any,
    mu: Any,
    count: jax.Array,
    *,
    beta: Any,
    nesterov: bool,
    momentum: str,
    bias_correction: bool,
) -> tuple[Any, Any]:
    """Muon's new momentum, and the direction to orthogonalize.

    Args:
      updates: the gradients.
      mu: the momentum so far.
      count: the number of updates done before this one.
      beta: the momentum decay.
      nesterov: look ahead one step (`beta m + (1 - beta) g`, or
        `g + beta m` for summed momentum).
      momentum: "ema" (`m = beta m + (1 - beta) g`; KellerJordan, torch,
        optax) or "sum" (`m = beta m + g`; Moonlight, Keras, Dion).
      bias_correction: divide EMA momentum by `1 - beta^t` (optax's
        NAdam-style rule); False for KellerJordan and torch.

    Returns:
      `(new_mu, direction)`.
    """
    count = safe_increment(count)
    if momentum == "sum":
        op, (beta_,) = arithmetic((updates, mu), (beta,))
        mu = jax.tree.map(lambda g, m: op.add(g, op.mul(beta_, m)), updates, mu)
        if nesterov:
            return mu, jax.tree.map(
                lambda g, m: op.add(g, op.mul(beta_, m)), updates, mu
            )
        return mu, mu
    mu = gtree.update_moment(updates, mu, beta, 1)
    if not nesterov:
        return mu, gtree.bias_correction(mu, beta, count) if bias_correction else mu
    # Nesterov's look-ahead `beta m + (1 - beta) g`, of the debiased values.
    m, g = mu, updates
    if bias_correction:
        m = gtree.bias_correction(mu, beta, safe_increment(count))
        g = gtree.bias_correction(updates, beta, count)
    op, (beta_, keep) = arithmetic((m, g), (beta, 1 - beta))
    return mu, jax.tree.map(
        lambda m, g: op.add(op.mul(beta_, m), op.mul(keep, g)), m, g
    )
