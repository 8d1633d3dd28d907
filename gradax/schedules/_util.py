"""Shared pieces of the schedules: the base class and a few small helpers.

Step counts, boundaries and fractions that decide *where* a schedule changes
are static (they fix the traced program); the values a schedule takes are
pytree leaves, so they may be arrays or tracers.
"""

from __future__ import annotations

import dataclasses
import logging
import numbers
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._core.declarations import Range, is_static, spec_of
from .._core.hyper import Schedule

logger = logging.getLogger("gradax.schedules")


def canonical_step(name: str, value: Any) -> Any:
    """A static step count or fraction as a plain Python number, if it is one.

    NumPy scalars and concrete 0-d arrays become Python numbers; other values
    are returned as they are, for the field's declaration to refuse. Traced
    values are refused here: a static number decides the shape of the program.
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
    return value


def step_number(name: str, value: Any) -> numbers.Real:
    """A static step (a boundary) as a plain Python number, or a ValueError."""
    value = canonical_step(name, value)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    return value


def concrete_scalar(value: Any) -> Any | None:
    """`value` if it is a host number known now, else None.

    JAX arrays count as unknown (reading one back would sync with the device,
    and inside `jit` it is traced), so their branch is taken by `where`.
    """
    if isinstance(value, (bool, int, float, np.bool_, np.number)):
        return value
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value
    return None


@dataclasses.dataclass(frozen=True)
class Tolerated(Range):
    """Values optax takes (the range itself), and the `usual` ones among them.

    A schedule's argument declared with it accepts every value in the range,
    as optax does, and building the schedule warns (a
    :class:`~gradax.declare.HyperparameterWarning` naming the argument) for
    a known value outside `usual`: a fractional step count, a negative
    warmup, a percentage above 1. `note` says what the value does.
    """

    usual: Range = Range()
    note: str = ""


def tolerated(usual: Range, note: str, **accepted: Any) -> Tolerated:
    """A :class:`Tolerated` range: `accepted` bounds, `usual` values."""
    return Tolerated(usual=usual, note=note, **accepted)


def _known_numbers_of(value: Any) -> np.ndarray | None:
    """The numbers of a host value or a concrete array, else None."""
    if isinstance(value, (bool, np.bool_)) or value is None:
        return None
    if isinstance(value, (int, float, np.number, np.ndarray)):
        return np.asarray(value, dtype=float)
    if isinstance(value, jax.Array) and not isinstance(value, jax.core.Tracer):
        if getattr(value, "is_fully_addressable", True):
            return np.asarray(value, dtype=float)
    return None


def outside_usual(name: str, value: Any, valid: Tolerated) -> tuple[str, str] | None:
    """`(what, why)` when `value` is accepted but not `valid.usual`."""
    known = _known_numbers_of(value)
    if known is None:
        return None
    usual = valid.usual
    fractional = usual.integer and not np.all(np.equal(np.mod(known, 1), 0))
    if not fractional and usual.contains(known):
        return None
    what = "an integer" if usual.integer else "a number"
    bounds = usual.describe()
    expected = bounds if bounds.startswith("an integer") else f"{what} {bounds}"
    why = f"usually {expected}"
    return f"{name}={value!r}", f"{why}; {valid.note}" if valid.note else why


_AS_OPTAX = "used as given, with optax's numbers"

STEPS = tolerated(Range(integer=True), _AS_OPTAX)
"""A step count or offset: any real, as optax takes it; a fraction warns."""
POWER = tolerated(Range(0.0), _AS_OPTAX)
"""An exponent (of a polynomial or a cosine factor): a negative one warns."""
DECAY_RATE = tolerated(Range(0.0), _AS_OPTAX)
"""A factor per period: a negative one warns (the value alternates in sign)."""
WARMUP_STEPS = tolerated(Range(0, integer=True), _AS_OPTAX)
"""A warmup length: any real; a fraction or a negative length warns."""
PERIOD_STEPS = tolerated(Range(1, integer=True), _AS_OPTAX, low=0.0, low_open=True)
"""A length optax needs positive (decay_steps): a fraction in (0, 1) or above
1 warns."""
FRACTION = tolerated(Range(0.0, 1.0), _AS_OPTAX)
"""A fraction of the steps: any real; one outside [0, 1] warns."""


def select(pred: Any, on_true: Any, on_false: Any) -> Any:
    """`on_true if pred else on_false`, also when `pred` is traced."""
    if concrete_scalar(pred) is not None:
        return on_true if bool(pred) else on_false
    return jnp.where(pred, on_true, on_false)


class ScheduleBase(Schedule):
    """A gradax schedule: fields are its arguments, `_evaluate` its formula.

    Static numbers (step counts, fractions) are declared with
    `hyper(..., static=True)` and brought to plain Python numbers before
    their declarations are checked. Calls evaluate `_evaluate` under
    standard dtype promotion, because a schedule mixes an integer step count
    with float values by design (as optax does), and must give the same
    numbers when a caller has turned on strict promotion.
    """

    def _convert_field(self, field: Any, value: Any) -> Any:
        spec = spec_of(field)
        if not is_static(field) or spec is None or not isinstance(spec.valid, Range):
            return value
        value = canonical_step(field.name, value)
        integer = spec.valid.integer or (
            isinstance(spec.valid, Tolerated) and spec.valid.usual.integer
        )
        # A whole float (``1e4``, which optax accepts) counts as that step.
        if integer and isinstance(value, float) and value.is_integer():
            value = int(value)
        return value

    def _unusual_values(self) -> list[tuple[str, str]]:
        notes = super()._unusual_values()
        for name, spec in self._declared:
            if isinstance(spec.valid, Tolerated):
                note = outside_usual(name, getattr(self, name), spec.valid)
                if note is not None:
                    notes.append(note)
        return notes

    def __call__(self, count: Any) -> Any:
        with jax.numpy_dtype_promotion("standard"):
            return self._evaluate(count)

    def _evaluate(self, count: Any) -> Any:
        """The value at step `count`; subclasses implement it."""
        raise NotImplementedError


def join(count: Any, pieces: Any, boundaries: Any) -> Any:
    """Runs `pieces[i]` from `boundaries[i-1]` on, counting from there."""
    out = pieces[0](count)
    for boundary, piece in zip(boundaries, pieces[1:], strict=True):
        out = jnp.where(count < boundary, out, piece(count - boundary))
    return out


# --------------------------------------------------------------------------
# Bounds: the smallest and largest value a schedule takes, from its arguments.
# --------------------------------------------------------------------------


def known_numbers(*values: Any) -> tuple[float, ...] | None:
    """`values` as floats when all are host numbers, else None.

    Arrays and tracers are not read (nothing touches a device when a schedule
    is checked at construction), so a schedule holding one has no known bounds.
    """
    out = []
    for value in values:
        number = concrete_scalar(value)
        if number is None or isinstance(number, (bool, np.bool_)):
            return None
        out.append(float(number))
    return tuple(out)


def hull(*values: float) -> tuple[float, float]:
    """The smallest interval holding all `values`."""
    return min(values), max(values)


def hull_of_bounds(parts: Any) -> tuple[float, float] | None:
    """The interval holding the bounds of every part, or None if one is unknown."""
    lows, highs = [], []
    for part in parts:
        bounds = part.bounds() if isinstance(part, Schedule) else None
        if bounds is None:
            return None
        lows.append(bounds[0])
        highs.append(bounds[1])
    return min(lows), max(highs)
