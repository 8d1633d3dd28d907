"""Options shared by the Muon family, each declared once.

``muon``, ``normuon``, ``adamuon``, ``dion2`` and their directions
(``scale_by_muon``, ...) orthogonalize with Newton–Schulz, and all but the
Dion ones keep Muon's momentum. The keyword-only options of those two steps
are declared here, once, with their valid values and documentation; a class
takes a group by inheriting it, and passes it on to the transformation it
builds with :meth:`NewtonSchulzOptions.newton_schulz_options` or
:meth:`MomentumOptions.momentum_options`, which name every option. The
options of the AdamW group and the routing are declared on
:class:`gradax.orthogonal.muon.MuonGroups`, the base of every optimizer of
the family.

Positional arguments (``ns_coeffs``, ``ns_steps``, ``beta``, ``eps``, ...)
are declared by each class: their place in the signature differs between
optimizers (NorMuon's ``beta2`` comes between ``beta`` and ``eps``), and a
base class can only put its fields first. Their valid values are shared
constants (:data:`gradax.orthogonal.coefficients.NS_COEFFS`,
``POSITIVE_INT``, ``DECAY``, ...).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from .._declare import OneOf, hyper, static_field
from .._pytree import Module
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


class NewtonSchulzOptions(Module):
    """How a member of the Muon family orthogonalizes (keyword-only options).

    A class with these options also declares ``ns_coeffs``, ``ns_steps`` and
    ``eps`` among its positional arguments.

    Args:
      preconditioning: 'frobenius' (divide by the Frobenius norm), 'spectral'
        (by the spectral norm), 'aol' (Turbo-Muon's row scaling) or
        'schatten' (by the Schatten-4 norm); see :func:`orthogonalize`.
      method: Newton–Schulz variant: "auto", "ns" or "gram" (see
        :func:`orthogonalize`).
      precision: the iteration's dtype: None, "float32", "highest",
        "bfloat16" or "float16" (see :func:`orthogonalize`).
      distributed: "auto" (under ``jax.set_mesh``, stack same-shape matrices
        and give each device whole matrices to orthogonalize, so no
        collective runs inside the iteration), True (require a mesh), False
        or None (never), or a mesh.
    """

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

    def __check_init__(self):
        check_coefficient_rows(self.ns_coeffs, self.ns_steps)

    def newton_schulz_options(self) -> dict[str, Any]:
        """Every Newton–Schulz option, by name, to build a direction with."""
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

    A class with these options also declares ``beta`` among its positional
    arguments.

    Args:
      nesterov: use Nesterov momentum (in an optimizer, for both groups).
      momentum: "ema" (``m = beta m + (1 - beta) g``; KellerJordan, torch,
        optax) or "sum" (``m = beta m + g``; Moonlight, Keras, Dion).
      bias_correction: divide EMA momentum by ``1 - beta^t`` (optax's
        NAdam-style rule); False for KellerJordan and torch.
    """

    nesterov: bool = static_field(default=True, kw_only=True)
    momentum: str = hyper(
        default="ema", valid=OneOf(("ema", "sum")), static=True, kw_only=True
    )
    bias_correction: bool = static_field(default=True, kw_only=True)

    def momentum_options(self) -> dict[str, Any]:
        """Every momentum option, by name, to build a direction with."""
        return dict(
            beta=self.beta,
            nesterov=self.nesterov,
            momentum=self.momentum,
            bias_correction=self.bias_correction,
        )


def check_coefficient_rows(ns_coeffs: Any, ns_steps: int) -> None:
    """A table of coefficients must not have more rows than ``ns_steps``.

    optax's rule: one row is used ``ns_steps`` times; a table is used whole.
    """
    if isinstance(ns_coeffs, str):
        return
    rows = len(coefficient_rows(ns_coeffs))
    if 1 < rows and ns_steps < rows:
        raise ValueError(
            f"ns_coeffs has {rows} rows but ns_steps is {ns_steps}: a table "
            "must not have more rows than steps"
        )


def coefficient_rows(ns_coeffs: Any) -> tuple[tuple[float, float, float], ...]:
    """Explicit coefficients as a tuple of (a, b, c) rows of Python floats."""
    table = np.atleast_2d(np.asarray(ns_coeffs, dtype=np.float64))
    return tuple(tuple(float(v) for v in row) for row in table)
