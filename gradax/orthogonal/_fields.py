"""The Muon family's shared option declarations, in one place.

Each member declares its own fields, in its own signature's order, and takes
each shared option's declaration (valid values, default, static or leaf)
from here, so an option means the same thing in every member while its
signature puts it where optax (or the paper) puts it: NorMuon's `beta2`
comes between `beta` and `eps`.

- The positional options are one :class:`gradax._core.declarations.Shared`,
  :data:`MUON`: `ns_coeffs: Any = fields.MUON.field()`, or
  `fields.MUON.field(default="polar_express_fixed5")` for a member's own
  default.
- A keyword-only option is declared at the member with `hyper(...,
  kw_only=True)` (or `static_field`) and the valid values named here
  (`valid=fields.METHOD`): static tools see a field keyword-only only where
  its specifier says so at the class, and `_: KW_ONLY` cannot say it here,
  since several members keep keyword-only options before positional ones
  (their repr and leaf order). The function of the same name here is the
  reference, which :class:`gradax.orthogonal._steps.NewtonSchulz` uses.

A member may change a default it documents; never the valid values.
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
CONSISTENT_RMS = NONNEGATIVE


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


# Newton–Schulz: the keyword-only options (the reference declarations; see
# :class:`gradax.orthogonal._steps.NewtonSchulz`).


def preconditioning() -> Any:
    """'frobenius', 'spectral', 'aol' or 'schatten'."""
    return hyper(default="frobenius", valid=PRECONDITIONINGS, static=True, kw_only=True)


def method() -> Any:
    """The Newton–Schulz variant (see :func:`gradax.orthogonalize`)."""
    return hyper(default="auto", valid=METHOD, static=True, kw_only=True)


def precision() -> Any:
    """The iteration's dtype (see :func:`gradax.orthogonalize`)."""
    return hyper(default=None, valid=PRECISION, static=True, kw_only=True)


def distributed(default: Any = "auto", *, kw_only: bool = True) -> Any:
    """ "auto", True, False, None or a mesh: where the matrices are spread."""
    return hyper(
        default=default,
        valid=OneOf(
            ("auto", True, False), also=_is_mesh, also_text="a jax.sharding.Mesh"
        ),
        static=True,
        allow_none=True,
        kw_only=kw_only,
    )


# Momentum (see :func:`gradax.orthogonal._steps.momentum_step`).


def nesterov(default: bool = True) -> Any:
    """Nesterov momentum (in an optimizer, for both groups)."""
    return static_field(default=default, kw_only=True)


def momentum() -> Any:
    """ "ema" (`m = beta m + (1 - beta) g`) or "sum" (`m = beta m + g`)."""
    return hyper(default="ema", valid=MOMENTUM, static=True, kw_only=True)


def bias_correction(default: bool = True) -> Any:
    """Divide EMA momentum by `1 - beta^t`."""
    return static_field(default=default, kw_only=True)


# The matrices' group of an optimizer (see :func:`gradax.orthogonal.groups`).


def consistent_rms(default: Any, *, allow_none: bool | None = None) -> Any:
    """The matrices' update RMS, >= 0 (None: the shape factor alone)."""
    return hyper(
        default=default, valid=NONNEGATIVE, allow_none=allow_none, kw_only=True
    )


def shape_scaling(default: Any) -> Any:
    """The shape factor: 'keller', 'rms', 'spectral' or 'none'."""
    return hyper(default=default, valid=SHAPE_SCALING, static=True, kw_only=True)
