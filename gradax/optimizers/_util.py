"""Small helpers shared by the optimizers (and contrib's)."""

from __future__ import annotations

from typing import Any

import jax


def canonical_dtype(dtype: Any) -> Any:
    """``dtype`` as JAX stores it (float64 is float32 without x64), or None.

    A state made in this dtype does not warn that float64 is unavailable.
    """
    return None if dtype is None else jax.dtypes.canonicalize_dtype(dtype)
