"""The Muon family's shared option declarations, in one place.

The keyword-only options are declared on the bases beside the steps that
read them (gradax/orthogonal/_steps.py: `NewtonSchulzOptions`,
`MuonOptions`), with the valid values named here. The positional options
are one :class:`gradax._core.declarations.Shared`, :data:`MUON`, since each
member puts them in its own signature's order (NorMuon's `beta2` comes
between `beta` and `eps`): `ns_coeffs: Any = fields.MUON.field()`, or
`fields.MUON.field(default="polar_express_fixed5")` for a member's own
default.

A member may change a default it documents (`bias_correction: bool =
False`, which keeps the declaration); never the valid values.
tests/orthogonal/test_family_contract.py checks every member against these.
"""

from __future__ import annotations

from typing import Any

import jax

from .._core.declarations import (
    DECAY,
    NONNEGATIVE,
    POSITIVE_INT,
    OneOf,
    Shared,
    hyper,
    static_field,
)
from .coefficients import KELLER, NS_COEFFS
from .dimensions import SHAPE_SCALING
from .newton_schulz import METHODS, PRECISIONS

# optax's names of the preconditioning -> (normalization, preconditioner) of
# :func:`gradax.orthogonalize`.
PRECONDITIONING = {
    "frobenius": ("frobenius", None),
    "spectral": ("spectral", None),
    "aol": ("none", "aol"),
    "schatten": ("schatten", None),
}


def _is_mesh(value: Any) -> bool:
    return isinstance(value, (jax.sharding.Mesh, jax.sharding.AbstractMesh))


# The valid values of the keyword-only options.
PRECONDITIONINGS = OneOf(tuple(PRECONDITIONING))
METHOD = OneOf(METHODS)
PRECISION = OneOf(PRECISIONS)
DISTRIBUTED = OneOf(
    ("auto", True, False), also=_is_mesh, also_text="a jax.sharding.Mesh"
)
MOMENTUM = OneOf(("ema", "sum"))


# The positional options, each member in its own signature's order.
MUON = Shared(
    # Newton–Schulz: a preset name or coefficients of shape (3,) or (T, 3);
    # the steps; added to norms before dividing (also the AdamW group's eps).
    ns_coeffs=hyper(default=KELLER[0], valid=NS_COEFFS, static=True),
    ns_steps=hyper(default=5, valid=POSITIVE_INT, static=True),
    eps=hyper(default=1e-8, valid=NONNEGATIVE),
    # Momentum (see gradax.orthogonal._steps.momentum_step): its decay, and
    # its dtype (in an optimizer, also the AdamW group's).
    beta=hyper(default=0.95, valid=DECAY),
    mu_dtype=static_field(default=None),
    # The matrices' group of an optimizer (see gradax.orthogonal.groups):
    # their decoupled weight decay, and which decay (booleans or a function).
    weight_decay=hyper(default=0.0, valid=NONNEGATIVE),
    weight_decay_mask=static_field(default=None),
)


# The matrices' group of an optimizer (see :func:`gradax.orthogonal.groups`).


def consistent_rms(default: Any, *, allow_none: bool | None = None) -> Any:
    """The matrices' update RMS, >= 0 (None: the shape factor alone)."""
    return hyper(
        default=default, valid=NONNEGATIVE, allow_none=allow_none, kw_only=True
    )


def shape_scaling(default: Any) -> Any:
    """The shape factor: 'keller', 'rms', 'spectral' or 'none'."""
    return hyper(default=default, valid=SHAPE_SCALING, static=True, kw_only=True)
