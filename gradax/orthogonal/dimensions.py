"""Which axes of a weight form the matrix that Muon orthogonalizes.

The dimension numbers and matrix views live in `gradax.linalg.matrices` (Shampoo
and SOAP use them too); Muon's shape factor is here.
"""

from __future__ import annotations

import math
from typing import Any

from .._core.declarations import OneOf
from ..linalg.matrices import MatrixView as MatrixView
from ..linalg.matrices import MuonDimensionNumbers as MuonDimensionNumbers
from ..linalg.matrices import is_dimension_numbers as is_dimension_numbers
from ..linalg.matrices import matrix_view as matrix_view

# The rules of :func:`shape_scale`, by name, and the declaration's valid values.
SHAPE_SCALINGS = ("keller", "rms", "spectral", "none")
SHAPE_SCALING = OneOf(SHAPE_SCALINGS)


def shape_scale(fan_in: int, fan_out: int, rule: str, rms: Any = 0.2) -> Any:
    """The factor Muon multiplies an orthogonalized update by.

    `"keller"`: `sqrt(max(1, fan_out / fan_in))` (KellerJordan, torch's
    'original'); `"rms"`: `rms * sqrt(max(fan_in, fan_out))` (Moonlight's
    0.2, torch's 'match_rms_adamw'); `"spectral"`: `sqrt(fan_out / fan_in)`
    (Dion); `"none"`: 1.
    """
    if rule == "keller":
        return math.sqrt(max(1.0, fan_out / fan_in))
    if rule == "rms":
        return rms * math.sqrt(max(fan_in, fan_out))
    if rule == "spectral":
        return math.sqrt(fan_out / fan_in)
    if rule == "none":
        return 1.0
    raise ValueError(
        f"shape_scaling must be 'keller', 'rms', 'spectral' or 'none', got {rule!r}"
    )
