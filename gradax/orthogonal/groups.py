"""The two parameter groups of the Muon family, and Muon's shape factor.

:class:`MuonGroups` is the base of every optimizer of the family (`muon`,
`normuon`, `adamuon`, `dion`, `dion2`, `muonh`, `adamh`): it holds the
options of the AdamW group and of the routing, resolves the routing once per
call, and builds the two groups; a member gives the matrices' group.
:func:`matrix_group` is that group for every member but the hyperball ones:
the member's direction, the shape factor (:class:`scale_by_shape`),
decoupled weight decay and the learning rate.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np

from .._compat import Self
from .._core.declarations import DECAY, LEARNING_RATE, NONNEGATIVE, hyper, static_field
from .._core.protocol import (
    Alias,
    GradientTransformation,
    TransformationLike,
    as_transformation,
)
from .._core.pytree import field
from .._core.state_guard import initializing_for_shapes
from ..combinators.chain import chain
from ..combinators.masked import partition
from ..linalg.matrices import (
    full_dimension_numbers,
    is_dimension_numbers,
    is_routing_function,
    is_spec_leaf,
)
from ..optimizers.adam import adamw
from ..transforms.cautious import decayed_weights
from ..transforms.scaling import scale_by_learning_rate
from .blocks import matrix_blocks
from .dimensions import SHAPE_SCALING, shape_scale
from .routing import quiet_report
from .routing_checks import warn_likely_input_or_output


def _optional_transformation(value: Any, name: str) -> Any:
    """Converter of `adam=`: None, or a transformation (optax ones wrapped)."""
    return None if value is None else as_transformation(value, name)


def shape_rule(shape_scaling: str | None, consistent_rms: Any) -> str:
    """The shape factor's rule: `shape_scaling`, else from `consistent_rms`."""
    if shape_scaling is not None:
        return shape_scaling
    return "keller" if consistent_rms is None else "rms"


class scale_by_shape(GradientTransformation):
    """Multiplies each orthogonalized update by its shape factor.

    Args:
      weight_dimension_numbers: as in :class:`scale_by_muon`.
      consistent_rms: if a number, use `consistent_rms * sqrt(max(fan_in,
        fan_out))` (Moonlight: 0.2); if None, `sqrt(max(1, fan_out /
        fan_in))` (KellerJordan).
      shape_scaling: overrides the rule: 'keller', 'rms', 'spectral', 'none'.
    """

    weight_dimension_numbers: Any = static_field(default=None)
    consistent_rms: Any = hyper(default=None, valid=NONNEGATIVE)
    shape_scaling: str | None = hyper(
        default=None, valid=SHAPE_SCALING, static=True, kw_only=True
    )

    def update_state(self, updates, state, params=None, **extra_args):
        rule = shape_rule(self.shape_scaling, self.consistent_rms)
        rms = self.consistent_rms

        def scaled(dims, u):
            if dims is None:
                return u
            blocks = matrix_blocks(u.shape, dims)
            factors = [shape_scale(fi, fo, rule, rms) for fi, fo in blocks.fans]
            if len(factors) == 1:
                return factors[0] * u
            # Blocks of different shapes (fused QKV) have their own factors.
            stacks = blocks.to_stacks(u)
            return blocks.from_stacks(
                [f * m for f, m in zip(factors, stacks, strict=True)]
            )

        dims = full_dimension_numbers(
            self.weight_dimension_numbers, updates, default_2d_only=False
        )
        scaled_updates = jax.tree.map(scaled, dims, updates, is_leaf=is_spec_leaf)
        return scaled_updates, state


def matrix_group(
    direction: GradientTransformation,
    dims: Any,
    learning_rate: Any,
    *,
    weight_decay: Any,
    weight_decay_mask: Any,
    cautious_weight_decay: bool,
    consistent_rms: Any,
    shape_scaling: str | None,
) -> GradientTransformation:
    """The matrices' group: the direction, the shape factor, decay, the rate."""
    return chain(
        direction,
        scale_by_shape(dims, consistent_rms, shape_scaling=shape_scaling),
        decayed_weights(
            weight_decay, weight_decay_mask, cautious=cautious_weight_decay
        ),
        scale_by_learning_rate(learning_rate),
    )


# The options that build the default AdamW group; adam= replaces them.
_ADAM_OPTIONS = (
    "adam_b1",
    "adam_b2",
    "adam_eps_root",
    "adam_weight_decay",
    "adam_learning_rate",
    "adam_eps",
)

# Where a MuonGroups keeps its built parts, one per routing result, in its
# __dict__ beside the fields (as Alias keeps its one composition).
_PARTS_BY_ROUTING = "_parts_by_routing"


def routes_each_leaf(spec: Any) -> bool:
    """Whether a routing decides each leaf from the leaf alone.

    None (2-D leaves), "auto" and one :class:`MuonDimensionNumbers` do: a
    group given part of the tree resolves them as on the whole tree, so the
    groups are built once. A tree of them or a function of the params needs
    the whole tree.
    """
    return spec is None or isinstance(spec, str) or is_dimension_numbers(spec)


class RoutingLabels:
    """`param_labels` of the two groups: "muon" where the routing finds a
    matrix, "adam" elsewhere. Compared by its routing (static structure)."""

    __slots__ = ("spec",)

    def __init__(self, spec: Any):
        self.spec = spec

    def __call__(self, tree: Any) -> Any:
        dims = full_dimension_numbers(self.spec, tree, default_2d_only=True)
        return MuonGroups._labels(dims, tree)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RoutingLabels) and self.spec == other.spec

    def __hash__(self) -> int:
        return hash(self.spec)

    def __repr__(self) -> str:
        return f"RoutingLabels({self.spec!r})"


def _spec_source(spec: Any) -> str:
    """A per-leaf routing ("auto", one MuonDimensionNumbers) as Python source."""
    return f'"{spec}"' if isinstance(spec, str) else f"gradax.{spec!r}"


def _is_default(module: Any, name: str, defaults: dict[str, Any]) -> bool:
    value, default = getattr(module, name), defaults[name]
    if value is default:
        return True
    if value is None or default is None or callable(value):
        return False
    if isinstance(value, jax.core.Tracer):
        # Rebuilt inside a trace (inject_hyperparams): checked when built.
        return True
    return bool(np.all(np.asarray(value) == default))


class MuonGroups(Alias):
    r"""Base of every optimizer of the Muon family: two parameter groups.

    Matrices (as routed by `muon_weight_dimension_numbers`) get the
    member's group (:meth:`_build_groups`, usually :func:`matrix_group`);
    every other leaf gets AdamW, or the transformation given as `adam`. The
    fields here are the options of the AdamW group and of the routing, the
    same in every member; each member declares its own after them.

    The routing is resolved once per `init`/`update`, on the whole tree
    given (a routing function is called then, and only then), and the parts
    are built once per routing result and kept by the instance: one
    composition for a model, rebuilt only for a tree routed differently.

    Args:
      learning_rate: the learning rate of both groups, a number or
        schedule, >= 0.
      adam_b1: the AdamW group's first-moment decay, in [0, 1).
      adam_b2: the AdamW group's second-moment decay, in [0, 1).
      adam_eps_root: the AdamW group's eps inside the square root, >= 0.
      adam_weight_decay: the AdamW group's decoupled weight decay, >= 0.
      adam_learning_rate: the AdamW group's learning rate (None: the
        optimizer's `learning_rate`).
      adam_eps: the AdamW group's eps (None: the optimizer's `eps`).
      muon_weight_dimension_numbers: None (2-D leaves are matrices), "auto"
        (also stacked `(L, m, n)` and conv `(h, w, c_in, c_out)`), one
        :class:`MuonDimensionNumbers`, a tree of them with None for AdamW
        leaves, or a function of the params returning such a tree.
      cautious_weight_decay: decay matrices only where update and weight
        agree in sign (arXiv:2510.12402).
      adam: the whole transformation of the leaves that are not matrices,
        learning rate included (gradax or optax), e.g.
        `gradax.adam(3e-4, b1=0.9, b2=0.95, eps=1e-10)` for KellerJordan's
        plain Adam. None (the default): `adamw` built from the `adam_*`
        options, with the optimizer's `nesterov` and `mu_dtype` (optax's
        rule). Given together with an `adam_*` option, it is an error.
    """

    _abstract = True

    learning_rate: Any = hyper(valid=LEARNING_RATE)
    adam_b1: Any = hyper(default=0.9, valid=DECAY, kw_only=True)
    adam_b2: Any = hyper(default=0.999, valid=DECAY, kw_only=True)
    adam_eps_root: Any = hyper(default=0.0, valid=NONNEGATIVE, kw_only=True)
    adam_weight_decay: Any = hyper(default=0.0, valid=NONNEGATIVE, kw_only=True)
    adam_learning_rate: Any = hyper(default=None, valid=LEARNING_RATE, kw_only=True)
    adam_eps: Any = hyper(default=None, valid=NONNEGATIVE, kw_only=True)
    muon_weight_dimension_numbers: Any = static_field(default=None, kw_only=True)
    cautious_weight_decay: bool = static_field(default=False, kw_only=True)
    # A child of the pytree: its learning rate and other numbers are leaves.
    adam: TransformationLike | None = field(
        default=None, kw_only=True, converter=_optional_transformation
    )

    def __check_init__(self) -> None:
        if self.adam is None:
            return
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        given = [
            name for name in _ADAM_OPTIONS if not _is_default(self, name, defaults)
        ]
        if given:
            raise ValueError(
                f"{', '.join(given)} set the default AdamW group, which adam= "
                "replaces: pass these settings to the transformation given as "
                "adam instead"
            )

    def unused_fields(self) -> tuple[str, ...]:
        # A transformation given as adam= replaces the default AdamW group
        # (and __check_init__ refuses adam_* options set beside it).
        return _ADAM_OPTIONS if self.adam is not None else ()

    def shape_rule(self) -> str:
        """The rule of the matrices' shape factor: 'keller', 'rms',
        'spectral' or 'none' (see :func:`gradax.orthogonal.dimensions.shape_scale`).
        """
        raise NotImplementedError

    def _build_groups(self, dims: Any, labels: Any) -> GradientTransformation:
        """The optimizer for a tree routed as `dims` (the member's hook).

        A member builds its matrices' group with `dims` and returns
        :meth:`_two_groups` of it.
        """
        raise NotImplementedError

    def _finish_init(self) -> None:
        if routes_each_leaf(self.muon_weight_dimension_numbers):
            # The groups are built once and held (Alias): each resolves the
            # routing on the leaves it is given.
            Alias._finish_init(self)
        else:
            # A tree or a function of the params: the routing of the whole
            # tree decides the parts (parts_for).
            GradientTransformation._finish_init(self)

    def build(self) -> GradientTransformation:
        spec = self.muon_weight_dimension_numbers
        if not routes_each_leaf(spec):
            raise TypeError(
                f"{self._public_name()} builds its parts for the tree it is "
                "given (its routing is a tree or a function of the params): "
                "call init or update"
            )
        return self._build_groups(spec, RoutingLabels(spec))

    def _two_groups(
        self, labels: Any, matrices: Any, *, eps: Any, mu_dtype: Any, nesterov: bool
    ) -> GradientTransformation:
        """`matrices` for the routed leaves, the AdamW group for the rest.

        The default AdamW group takes the member's `eps` (unless
        `adam_eps`), `mu_dtype` and `nesterov`, optax's rule.
        """
        if self.adam is not None:
            return partition({"muon": matrices, "adam": self.adam}, labels)
        adam_lr = self.adam_learning_rate
        adam_group = adamw(
            self.learning_rate if adam_lr is None else adam_lr,
            b1=self.adam_b1,
            b2=self.adam_b2,
            eps=eps if self.adam_eps is None else self.adam_eps,
            eps_root=self.adam_eps_root,
            mu_dtype=mu_dtype,
            weight_decay=self.adam_weight_decay,
            nesterov=nesterov,
        )
        return partition({"muon": matrices, "adam": adam_group}, labels)

    def _routing(self, tree: Any, *, quiet: bool) -> Any:
        """The dimension numbers of each leaf of `tree` (None: AdamW).

        A routing function is called here, on the whole tree the optimizer
        was given, so the groups never call it on a masked part. `quiet`
        silences a report it prints with :func:`muon_labels` (printed at
        `init`, not at each `update`).
        """
        spec = self.muon_weight_dimension_numbers
        if is_routing_function(spec):
            with quiet_report(quiet):
                spec = spec(tree)
            if is_routing_function(spec):
                raise TypeError(
                    "muon_weight_dimension_numbers: the function returned a "
                    f"function ({spec!r}); it must return the routing itself: "
                    'None, "auto", a MuonDimensionNumbers or a tree of them'
                )
        dims = full_dimension_numbers(spec, tree, default_2d_only=True)
        if not quiet and not initializing_for_shapes():
            warn_likely_input_or_output(
                dims, tree, who=f"gradax.{self._public_name()}", fix=self._exclude_fix
            )
        return dims

    def _exclude_fix(self, pattern: str) -> str:
        """How to pass `exclude=pattern` to this optimizer's routing."""
        spec = self.muon_weight_dimension_numbers
        if routes_each_leaf(spec):
            args = "params" if spec is None else f"params, {_spec_source(spec)}"
            return (
                "pass muon_weight_dimension_numbers=lambda params: "
                f"gradax.muon_labels({args}, exclude={pattern})[1]"
            )
        return (
            f"pass exclude={pattern} (with what it excludes already) to the "
            "gradax.muon_labels call that builds muon_weight_dimension_numbers, "
            "or put None at those paths"
        )

    def parts_for(self, tree: Any, *, quiet: bool = True) -> GradientTransformation:
        """The parts this optimizer runs on `tree`: its routing resolved.

        With a routing that decides each leaf by itself (None, "auto", one
        :class:`MuonDimensionNumbers`), the parts held since construction,
        as :meth:`parts`. With a tree or a function of the params, the parts
        depend on the tree: they are built for its routing once and kept by
        the instance (a copy with other fields starts without them), so
        `init`, `update` and a reader such as :func:`gradax.group_labels` get
        the same object. `quiet=False` also warns about likely
        input or output layers routed to Muon and prints the report
        `muon_labels` prints (as `init` does).
        """
        if routes_each_leaf(self.muon_weight_dimension_numbers):
            if not quiet:
                self._routing(tree, quiet=False)
            return self.parts()
        dims = self._routing(tree, quiet=quiet)
        flat, treedef = jax.tree.flatten(dims, is_leaf=is_spec_leaf)
        key = (treedef, tuple(flat))
        kept = self.__dict__.setdefault(_PARTS_BY_ROUTING, {})
        try:
            built = kept.get(key)
        except TypeError:  # an unhashable routing: built for this call only
            return self._build_groups(dims, self._labels(dims, tree))
        if built is None:
            built = self._build_groups(dims, self._labels(dims, tree))
            kept[key] = built
        return built

    @staticmethod
    def _labels(dims: Any, tree: Any) -> Any:
        return jax.tree.map(
            lambda d, _: "adam" if d is None else "muon",
            dims,
            tree,
            is_leaf=is_spec_leaf,
        )

    def _with_fields(self, **values: Any) -> Self:
        obj = super()._with_fields(**values)
        obj.__dict__.pop(_PARTS_BY_ROUTING, None)  # built from the old fields
        return obj

    def init_state(self, params):
        return self.parts_for(params, quiet=False).init(params)

    def update_state(self, updates, state, params=None, **extra_args):
        parts = self.parts_for(updates, quiet=True)
        return parts.update(updates, state, params, **extra_args)


def matrices_and_adam(
    tx: Any,
    labels: Any,
    direction: GradientTransformation,
    dims: Any,
    *,
    consistent_rms: Any,
    shape_scaling: str | None,
    nesterov: bool,
) -> GradientTransformation:
    """The two groups of `tx`, a :class:`MuonGroups` member: :func:`matrix_group`
    of `direction` for the routed leaves, AdamW for the rest.

    `tx` declares `weight_decay`, `weight_decay_mask`, `eps` and `mu_dtype`.
    """
    matrices = matrix_group(
        direction,
        dims,
        tx.learning_rate,
        weight_decay=tx.weight_decay,
        weight_decay_mask=tx.weight_decay_mask,
        cautious_weight_decay=tx.cautious_weight_decay,
        consistent_rms=consistent_rms,
        shape_scaling=shape_scaling,
    )
    return tx._two_groups(
        labels, matrices, eps=tx.eps, mu_dtype=tx.mu_dtype, nesterov=nesterov
    )
