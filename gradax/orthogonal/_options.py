"""The Muon family's one contract: its options and its two shared steps.

Every member that orthogonalizes with Newton–Schulz (`muon`, `normuon`,
`adamuon`, `dion2`, `scion` and their directions) derives from
:class:`NewtonSchulzSteps`; every member with Muon's momentum from
:class:`MomentumOptions`. These bases declare the options once, with their
valid values, and own the steps that read them:

- :meth:`NewtonSchulzSteps.orthogonalize_matrices` (and `_tree`,
  `_leaf`): the iteration, from `ns_coeffs` and `ns_steps` through
  :func:`gradax.orthogonal.coefficients.newton_schulz_table`, the one rule
  that maps the two to the iterations run;
- :meth:`MomentumOptions.momentum_step`: the momentum and the direction
  that is orthogonalized.

Positional options (`ns_coeffs`, `ns_steps`, `eps`, `beta`) have a
place in the signature that differs between members (NorMuon's `beta2`
comes between `beta` and `eps`), and a base class can only put its own
fields first. So the bases declare them as :class:`AbstractField`\\ s (the
`*_OPTION` constants here), and each member writes `ns_coeffs: Any =
NS_COEFFS_OPTION.declare()` where the argument goes; class creation fails if
a member leaves one out or declares it with other valid values. The keyword-only options
(`preconditioning`, `method`, `precision`, `distributed`;
`nesterov`, `momentum`, `bias_correction`) are ordinary fields of
:class:`NewtonSchulzOptions` and :class:`MomentumOptions`.

Option names are optax's (`ns_coeffs`, `ns_steps`, `preconditioning`)
all the way down to :meth:`NewtonSchulzSteps.orthogonalize_matrices`, the one
place that hands them to :func:`gradax.orthogonalize` under its own names
(`coefficients`, `steps`, `normalization` and `precondition`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import jax

from .. import tree as gtree
from .._compat import reshard
from .._declare import DECAY, NONNEGATIVE, POSITIVE_INT, OneOf, hyper, static_field
from .._matrices import MuonDimensionNumbers, is_spec_leaf
from .._numerics import safe_increment
from .._pytree import AbstractField, Module
from .._sharding import explicit_sharding
from ..sharding.distributed import current_mesh, orthogonalize_many
from ._grouped import orthogonalize_grouped
from .blocks import matrix_blocks
from .coefficients import KELLER, NS_COEFFS, newton_schulz_table
from .newton_schulz import METHODS, PRECISIONS, orthogonalize

# optax's names of the preconditioning -> (normalization, preconditioner) of
# :func:`gradax.orthogonalize`.
# optax's AOL and Schatten-4 first steps floor their row sums and norms at
# this constant: the family's ``eps`` is for the Frobenius and spectral norms
# (with a small gradient and another eps, using eps there moved Muon's update
# by 2e-2 from optax's).
FIRST_STEP_EPS = 1e-8

PRECONDITIONING = {
    "frobenius": ("frobenius", None),
    "spectral": ("spectral", None),
    "aol": ("none", "aol"),
    "schatten": ("schatten", None),
}


def _is_mesh(value: Any) -> bool:
    return isinstance(value, (jax.sharding.Mesh, jax.sharding.AbstractMesh))


# The options every member declares among its positional arguments, where
# its signature puts them: ``ns_coeffs: Any = NS_COEFFS_OPTION.declare()``.
NS_COEFFS_OPTION = AbstractField(
    "a Newton–Schulz preset name or coefficients of shape (3,) or (T, 3)",
    default=KELLER[0],
    valid=NS_COEFFS,
    static=True,
)
NS_STEPS_OPTION = AbstractField(
    "Newton–Schulz steps, an integer >= 1",
    default=5,
    valid=POSITIVE_INT,
    static=True,
)
EPS_OPTION = AbstractField(
    "added to the norm before dividing, >= 0",
    default=1e-8,
    valid=NONNEGATIVE,
)
BETA_OPTION = AbstractField("the momentum decay, in [0, 1)", default=0.95, valid=DECAY)


class NewtonSchulzSteps(Module):
    """The Newton–Schulz iteration of a member of the Muon family.

    Requires `ns_coeffs`, `ns_steps` and `eps` among the member's
    arguments (declared with `NS_COEFFS_OPTION.declare()` and so on). A
    member without the keyword options of :class:`NewtonSchulzOptions`
    (Scion) orthogonalizes with their defaults, the class constants here.
    """

    _abstract = True

    if TYPE_CHECKING:
        # Static tools see what each member declares as a read-only value.
        @property
        def ns_coeffs(self) -> Any: ...
        @property
        def ns_steps(self) -> int: ...
        @property
        def eps(self) -> Any: ...

    else:
        ns_coeffs = NS_COEFFS_OPTION
        ns_steps = NS_STEPS_OPTION
        eps = EPS_OPTION

    if TYPE_CHECKING:
        # NewtonSchulzOptions makes these fields; static tools see values.
        @property
        def preconditioning(self) -> str: ...
        @property
        def method(self) -> str: ...
        @property
        def precision(self) -> Any: ...
        @property
        def distributed(self) -> Any: ...

    else:
        # The keyword options' defaults; NewtonSchulzOptions makes them fields.
        preconditioning = "frobenius"
        method = "auto"
        precision = None
        distributed = False

    def __check_init__(self) -> None:
        # Refuses a table with more rows than steps, at construction.
        newton_schulz_table(self.ns_coeffs, self.ns_steps)

    def orthogonalize_matrices(self, matrices: jax.Array) -> jax.Array:
        """Orthogonalize a stack of matrices `(..., m, n)` with these options.

        The one place where the family's option names become those of
        :func:`gradax.orthogonalize`: `newton_schulz_table(ns_coeffs,
        ns_steps)` gives its `coefficients` and `steps`, and
        `preconditioning` its `normalization` and `precondition`.
        """
        coefficients, steps = newton_schulz_table(self.ns_coeffs, self.ns_steps)
        normalization, precondition = PRECONDITIONING[self.preconditioning]
        eps = self.eps
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

    def orthogonalization_mesh(self) -> Any | None:
        """The mesh to spread the matrices over, from `distributed`."""
        if self.distributed is False or self.distributed is None:
            return None
        if isinstance(self.distributed, str) or self.distributed is True:
            mesh = current_mesh()
            if mesh is None and self.distributed is True:
                raise ValueError(
                    f"{self._public_name()}(distributed=True) needs a mesh: call "
                    "it under jax.set_mesh(mesh), or pass distributed=mesh"
                )
            return mesh
        return self.distributed

    def orthogonalize_tree(self, dims: Any, tree: Any) -> Any:
        """Orthogonalize every leaf of `tree` that has dimension numbers.

        Under a device mesh, same-shape matrices are stacked and each device
        orthogonalizes whole matrices (no collective inside the iteration).
        A leaf split into blocks (heads, fused QKV) gives one stack per block
        size, stacked with the other leaves' matrices of that shape.
        """
        flat_dims, treedef = jax.tree.flatten(dims, is_leaf=is_spec_leaf)
        flat = treedef.flatten_up_to(tree)
        mesh = self.orthogonalization_mesh()
        if mesh is None:
            return jax.tree.unflatten(
                treedef, self._orthogonalize_on_one(flat_dims, flat)
            )
        chosen = [i for i, d in enumerate(flat_dims) if d is not None]
        blocks = [matrix_blocks(flat[i].shape, flat_dims[i]) for i in chosen]
        stacks = [b.to_stacks(flat[i]) for b, i in zip(blocks, chosen, strict=True)]
        matrices = [m for leaf in stacks for m in leaf]
        results = iter(orthogonalize_many(matrices, self.orthogonalize_matrices, mesh))
        out: list[Any] = list(flat)
        for i, b, leaf in zip(chosen, blocks, stacks, strict=True):
            out[i] = b.from_stacks([next(results) for _ in leaf])
        return jax.tree.unflatten(treedef, out)

    def _orthogonalize_on_one(self, flat_dims: list, flat: list) -> list:
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
                out[i] = self.orthogonalize_leaf(flat[i], d)
        blocks = [matrix_blocks(flat[i].shape, flat_dims[i]) for i in grouped]
        stacks = [b.to_stacks(flat[i]) for b, i in zip(blocks, grouped, strict=True)]
        matrices = [m for leaf in stacks for m in leaf]
        results = iter(orthogonalize_grouped(matrices, self.orthogonalize_matrices))
        for i, b, leaf in zip(grouped, blocks, stacks, strict=True):
            out[i] = b.from_stacks([next(results) for _ in leaf])
        return out

    def orthogonalize_leaf(self, x: jax.Array, dims: MuonDimensionNumbers) -> jax.Array:
        """Orthogonalize one weight-shaped array along its matrix axes."""
        sharding = explicit_sharding(x)
        if sharding is not None:
            # Sharding in types forbids the row-sharded X X^T; iterate on a
            # replicated copy (distributing the work is the sharding module's).
            x = reshard(x, jax.sharding.PartitionSpec())
        # One batched call per block size (one for a whole matrix or heads).
        blocks = matrix_blocks(x.shape, dims)
        out = blocks.from_stacks(
            [self.orthogonalize_matrices(m) for m in blocks.to_stacks(x)]
        )
        if sharding is not None:
            out = reshard(out, sharding.spec)
        return out


class NewtonSchulzOptions(NewtonSchulzSteps):
    """How a member of the Muon family orthogonalizes (keyword-only options).

    Args:
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
    """

    _abstract = True

    preconditioning: str = hyper(
        default="frobenius",
        valid=OneOf(tuple(PRECONDITIONING)),
        static=True,
        kw_only=True,
    )
    method: str = hyper(default="auto", valid=OneOf(METHODS), static=True, kw_only=True)
    precision: Any = hyper(
        default=None, valid=OneOf(PRECISIONS), static=True, kw_only=True
    )
    distributed: Any = hyper(
        default="auto",
        valid=OneOf(
            ("auto", True, False), also=_is_mesh, also_text="a jax.sharding.Mesh"
        ),
        static=True,
        allow_none=True,
        kw_only=True,
    )

    def newton_schulz_options(self) -> dict[str, Any]:
        """Every Newton–Schulz option, by its user-facing name."""
        return dict(
            ns_coeffs=self.ns_coeffs,
            ns_steps=self.ns_steps,
            eps=self.eps,
            preconditioning=self.preconditioning,
            method=self.method,
            precision=self.precision,
            distributed=self.distributed,
        )


class MomentumOptions(Module):
    """How Muon accumulates momentum (keyword-only options).

    Requires `beta` among the member's arguments (declared with
    `BETA_OPTION.declare()`).

    Args:
      nesterov: use Nesterov momentum (in an optimizer, for both groups).
      momentum: "ema" (`m = beta m + (1 - beta) g`; KellerJordan, torch,
        optax) or "sum" (`m = beta m + g`; Moonlight, Keras, Dion).
      bias_correction: divide EMA momentum by `1 - beta^t` (optax's
        NAdam-style rule); False for KellerJordan and torch.
    """

    _abstract = True

    if TYPE_CHECKING:

        @property
        def beta(self) -> Any: ...

    else:
        beta = BETA_OPTION

    nesterov: bool = static_field(default=True, kw_only=True)
    momentum: str = hyper(
        default="ema", valid=OneOf(("ema", "sum")), static=True, kw_only=True
    )
    bias_correction: bool = static_field(default=True, kw_only=True)

    def momentum_options(self) -> dict[str, Any]:
        """Every momentum option, by its user-facing name."""
        return dict(
            beta=self.beta,
            nesterov=self.nesterov,
            momentum=self.momentum,
            bias_correction=self.bias_correction,
        )

    def momentum_step(self, updates: Any, mu: Any, count: jax.Array) -> tuple[Any, Any]:
        """The new momentum, and the direction to orthogonalize.

        Args:
          updates: the gradients.
          mu: the momentum so far.
          count: the number of updates done before this one.

        Returns:
          `(new_mu, direction)`.
        """
        beta, count = self.beta, safe_increment(count)
        if self.momentum == "sum":
            mu = jax.tree.map(lambda g, m: g + beta * m, updates, mu)
            if self.nesterov:
                return mu, jax.tree.map(lambda g, m: g + beta * m, updates, mu)
            return mu, mu
        mu = gtree.update_moment(updates, mu, beta, 1)
        if not self.bias_correction:
            if self.nesterov:
                return mu, jax.tree.map(
                    lambda g, m: beta * m + (1 - beta) * g, updates, mu
                )
            return mu, mu
        if self.nesterov:
            return mu, jax.tree.map(
                lambda m, g: beta * m + (1 - beta) * g,
                gtree.bias_correction(mu, beta, safe_increment(count)),
                gtree.bias_correction(updates, beta, count),
            )
        return mu, gtree.bias_correction(mu, beta, count)
