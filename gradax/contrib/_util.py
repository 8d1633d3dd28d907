"""Small helpers shared by the contrib optimizers."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from .._core.declarations import DECAY, OneOf
from .._core.optax_wrapper import dropped_by_optax


def _is_decay(value: Any) -> bool:
    """A real number in [0, 1), or a tracer (whose value is not known yet)."""
    if isinstance(value, jax.core.Tracer):
        return True
    if isinstance(value, (bool, np.bool_)) or not isinstance(
        value, (int, float, np.number, np.ndarray, jax.Array)
    ):
        return False
    numbers = np.asarray(value)
    return numbers.dtype.kind in "iuf" and DECAY.contains(numbers.astype(float))


def _is_decay_pair(value: Any) -> bool:
    return (
        isinstance(value, (tuple, list))
        and len(value) == 2
        and all(_is_decay(b) for b in value)
    )


# Adam's (beta1, beta2) as one argument, as torch and optax's contrib take it.
DECAY_PAIR = OneOf(
    (), also=_is_decay_pair, also_text="a pair (beta1, beta2), each in [0, 1)"
)


def require_value(value: Any, name: str) -> None:
    """Raise a ValueError saying that `name` needs `value=` in update."""
    if value is None:
        raise ValueError(
            f"{name}.update needs the objective's value: pass value=loss "
            "(a scalar) as a keyword argument." + dropped_by_optax()
        )
