"""Shared pieces of the schedules: the base class and a few small helpers.

Step counts, boundaries and fractions that decide *where* a schedule changes
are static (they fix the traced program); the values a schedule takes are
pytree leaves, so they may be arrays or tracers.
"""

from __future__ import annotations

import logging
import numbers
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._hyper import Schedule

logger = logging.getLogger("gradax.schedules")


def step_number(name: str, value: Any) -> int | float:
    """A static step count as a plain Python number.

    NumPy scalars and concrete 0-d arrays are converted; traced values are
    refused because a step count decides the shape of the program.
    """
    if isinstance(value, jax.core.Tracer):
        raise ValueError(
            f"{name} must be a concrete number (it is static: it fixes where "
            f"the schedule changes), got a traced value {value!r}"
        )
    if isinstance(value, (np.ndarray, jax.Array)) and np.ndim(value) == 0:
        value = value.item()
    elif isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    return value


def concrete_scalar(value: Any) -> Any | None:
    """``value`` if it is a host number known now, else None.

    JAX arrays count as unknown (reading one back would sync with the device,
    and inside ``jit`` it is traced), so their branch is taken by ``where``.
    """
    if isinstance(value, (bool, int, float, np.bool_, np.number)):
        return value
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value
    return None


def select(pred: Any, on_true: Any, on_false: Any) -> Any:
    """``on_true if pred else on_false``, also when ``pred`` is traced."""
    if concrete_scalar(pred) is not None:
        return on_true if bool(pred) else on_false
    return jnp.where(pred, on_true, on_false)


class ScheduleBase(Schedule):
    """A gradax schedule: fields are its arguments, ``_evaluate`` its formula.

    Subclasses list their static step counts in ``_static_numbers``; these are
    normalized to Python numbers when the schedule is built. Calls evaluate
    ``_evaluate`` under standard dtype promotion, because a schedule mixes an
    integer step count with float values by design (as optax does), and must
    give the same numbers when a caller has turned on strict promotion.
    """

    _static_numbers = ()

    def __post_init__(self) -> None:
        for name in self._static_numbers:
            object.__setattr__(self, name, step_number(name, getattr(self, name)))
        super().__post_init__()

    def __call__(self, count: Any) -> Any:
        with jax.numpy_dtype_promotion("standard"):
            return self._evaluate(count)

    def _evaluate(self, count: Any) -> Any:
        """The value at step ``count``; subclasses implement it."""
        raise NotImplementedError


def join(count: Any, pieces: Any, boundaries: Any) -> Any:
    """Runs ``pieces[i]`` from ``boundaries[i-1]`` on, counting from there."""
    out = pieces[0](count)
    for boundary, piece in zip(boundaries, pieces[1:], strict=True):
        out = jnp.where(count < boundary, out, piece(count - boundary))
    return out
