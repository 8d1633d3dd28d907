"""Small helpers shared by the contrib optimizers."""

from __future__ import annotations

from typing import Any

import jax


def canonical_dtype(dtype: Any) -> Any:
    """``dtype`` as JAX stores it (float64 is float32 without x64), or None."""
    return None if dtype is None else jax.dtypes.canonicalize_dtype(dtype)


def require_params(params: Any, name: str) -> None:
    """Raise a ValueError saying that ``name`` needs ``params`` in update."""
    if params is None:
        raise ValueError(f"{name}.update needs the current params: pass params=.")


def require_value(value: Any, name: str) -> None:
    """Raise a ValueError saying that ``name`` needs ``value=`` in update."""
    if value is None:
        raise ValueError(
            f"{name}.update needs the objective's value: pass value=loss "
            "(a scalar) as a keyword argument."
        )
