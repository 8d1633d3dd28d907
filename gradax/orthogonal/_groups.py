"""The two parameter groups of the Muon family, and Muon's shape factor.

:class:`MuonGroups` is the base of `muon`, `normuon`, `adamuon`,
`dion` and `dion2`: matrices get the member's direction, the shape factor
(:class:`scale_by_shape`), decoupled weight decay and the learning rate;
every other leaf gets AdamW or the transformation given as `adam`.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from .._declare import (
    DECAY,
    LEARNING_RATE,
    NONNEGATIVE,
    hyper,
    static_field,
)
from .._matrices import full_dimension_numbers, is_routing_function, is_spec_leaf
from .._protocol import (
    Alias,
    GradientTransformation,
    TransformationLike,
    as_transformation,
)
from .._pytree import AbstractField, field
from ..combinators.chain import chain
from ..combinators.masked import partition
from ..optimizers.adam import adamw
from ..transforms.cautious import decayed_weights
from ..transforms.scaling import scale_by_learning_rate
from ._options import EPS_OPTION
from .blocks import matrix_blocks
from .dimensions import SHAPE_SCALING, shape_scale
from .routing import quiet_report, warn_about_embeddings


def _optional_transformation(value: Any, name: str) -> Any:
    """Converter of `adam=`: None, or a transformation (optax ones wrapped)."""
    return None if value is None else as_transformation(value, name)


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

    def _rule(self) -> str:
        if self.shape_scaling is not None:
            return self.shape_scaling
        return "keller" if self.consistent_rms is None else "rms"

    def update_state(self, updates, state, params=None, **extra_args):
        rule = self._rule()
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


# The options that build the default AdamW group; adam= replaces them.
_ADAM_OPTIONS = (
    "adam_b1",
    "adam_b2",
    "adam_eps_root",
    "adam_weight_decay",
    "adam_learning_rate",
    "adam_eps",
)


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


# What MuonGroups.build reads besides its own fields, declared once.
WEIGHT_DECAY_OPTION = AbstractField(
    "the matrices' decoupled weight decay, >= 0", default=0.0, valid=NONNEGATIVE
)
WEIGHT_DECAY_MASK_OPTION = AbstractField(
    "which matrices decay: a tree of booleans or a function",
    default=None,
    static=True,
)
MU_DTYPE_OPTION = AbstractField(
    "dtype of the momentum, also the AdamW group's", default=None, static=True
)
NESTEROV_OPTION = AbstractField("Nesterov momentum, also the AdamW group's")
CONSISTENT_RMS_OPTION = AbstractField(
    "the matrices' update RMS (None: the shape factor alone)", valid=NONNEGATIVE
)
SHAPE_SCALING_OPTION = AbstractField(
    "the shape factor of the matrices", valid=SHAPE_SCALING, static=True
)


class MuonGroups(Alias):
    r"""Base of every optimizer of the Muon family: two parameter groups.

    Matrices (as routed by `muon_weight_dimension_numbers`) get the
    optimizer's direction, the shape factor, decoupled weight decay and the
    learning rate; every other leaf gets AdamW, or the transformation given
    as `adam`. The options of the AdamW group and of the routing are
    declared here, once, for every member.

    A member (`muon`, `normuon`, `adamuon`, `dion`, `dion2`)
    extends Muon in one way: it overrides :meth:`_muon_direction`, which
    builds its direction from its own fields, named one by one. It also
    declares what :meth:`build` reads besides the fields below, as arguments
    or as fixed class constants: `eps` (also AdamW's default eps),
    `weight_decay`, `weight_decay_mask`, `mu_dtype`, `nesterov`
    (also AdamW's), `consistent_rms` and `shape_scaling`. These are
    :class:`gradax._pytree.AbstractField`\ s: a member that leaves one out
    fails when its class is created.

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

    if TYPE_CHECKING:
        # Static tools see what each member declares as a read-only value.
        @property
        def eps(self) -> Any: ...
        @property
        def weight_decay(self) -> Any: ...
        @property
        def weight_decay_mask(self) -> Any: ...
        @property
        def mu_dtype(self) -> Any: ...
        @property
        def nesterov(self) -> bool: ...
        @property
        def consistent_rms(self) -> Any: ...
        @property
        def shape_scaling(self) -> Any: ...

    else:
        # What build() reads besides the fields below. Each member declares
        # them among its arguments (``weight_decay: Any =
        # WEIGHT_DECAY_OPTION.declare()``) or, where the value is fixed, as a
        # class constant.
        eps = EPS_OPTION
        weight_decay = WEIGHT_DECAY_OPTION
        weight_decay_mask = WEIGHT_DECAY_MASK_OPTION
        mu_dtype = MU_DTYPE_OPTION
        nesterov = NESTEROV_OPTION
        consistent_rms = CONSISTENT_RMS_OPTION
        shape_scaling = SHAPE_SCALING_OPTION

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

    def _muon_direction(self) -> GradientTransformation:
        """The direction of the matrices (the one hook a member overrides)."""
        raise NotImplementedError

    def _dims(self, tree: Any) -> Any:
        return full_dimension_numbers(
            self.muon_weight_dimension_numbers, tree, default_2d_only=True
        )

    def _labels(self, params: Any) -> Any:
        dims = self._dims(params)
        warn_about_embeddings(dims)
        return jax.tree.map(
            lambda d, _: "adam" if d is None else "muon",
            dims,
            params,
            is_leaf=is_spec_leaf,
        )

    def _routed(self, tree: Any, *, quiet: bool) -> MuonGroups:
        """This optimizer with a routing function replaced by its result.

        The function is called once per `init`/`update`, on the whole tree
        the optimizer was given; the groups it builds then never call it on a
        masked part of the tree. `quiet` silences a report the function
        prints with :func:`muon_labels` (printed at `init`, not at each
        `update`).
        """
        spec = self.muon_weight_dimension_numbers
        if not is_routing_function(spec):
            return self
        with quiet_report(quiet):
            resolved = spec(tree)
        if is_routing_function(resolved):
            raise TypeError(
                "muon_weight_dimension_numbers: the function returned a function "
                f"({resolved!r}); it must return the routing itself: None, "
                '"auto", a MuonDimensionNumbers or a tree of them'
            )
        return self._with_fields(muon_weight_dimension_numbers=resolved)

    def init_state(self, params):
        return self._routed(params, quiet=False).build().init(params)

    def update_state(self, updates, state, params=None, **extra_args):
        routed = self._routed(updates, quiet=True)
        return routed.build().update(updates, state, params, **extra_args)

    def build(self):
        decay = decayed_weights(
            self.weight_decay,
            self.weight_decay_mask,
            cautious=self.cautious_weight_decay,
        )
        muon_group = chain(
            self._muon_direction(),
            scale_by_shape(
                self._dims, self.consistent_rms, shape_scaling=self.shape_scaling
            ),
            decay,
            scale_by_learning_rate(self.learning_rate),
        )
        return self._with_adam_group(muon_group)

    def _with_adam_group(self, matrices: Any) -> Any:
        """`matrices` for the routed leaves, the AdamW group for the rest."""
        if self.adam is not None:
            return partition({"muon": matrices, "adam": self.adam}, self._labels)
        adam_lr = self.adam_learning_rate
        adam_group = adamw(
            self.learning_rate if adam_lr is None else adam_lr,
            b1=self.adam_b1,
            b2=self.adam_b2,
            eps=self.eps if self.adam_eps is None else self.adam_eps,
            eps_root=self.adam_eps_root,
            mu_dtype=self.mu_dtype,
            weight_decay=self.adam_weight_decay,
            nesterov=self.nesterov,
        )
        return partition({"muon": matrices, "adam": adam_group}, self._labels)
