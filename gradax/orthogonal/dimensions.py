"""Which axes of a weight form the matrix that Muon orthogonalizes."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax


class MuonDimensionNumbers(NamedTuple):
    """The reduction (fan-in) and output (fan-out) axes of a weight.

    For ``y = x @ W`` the reduction axis is 0 and the output axis 1 (the
    default). Every other axis is a batch axis: each slice along it is its own
    matrix (stacked layers from ``scan``). Several reduction axes are
    flattened together (a conv kernel ``(h, w, c_in, c_out)`` has reduction
    axes ``(0, 1, 2)`` and output axis 3).
    """

    reduction_axis: Any = 0
    output_axis: Any = 1


def is_dimension_numbers(x: Any) -> bool:
    return isinstance(x, MuonDimensionNumbers)


def _axes(value: Any, ndim: int) -> tuple[int, ...]:
    values = (value,) if isinstance(value, int) else tuple(value)
    return tuple(v % ndim for v in values)


class MatrixView(NamedTuple):
    """How one weight maps to a batch of (fan_in, fan_out) matrices."""

    to_matrices: Callable[[jax.Array], jax.Array]
    from_matrices: Callable[[jax.Array], jax.Array]
    fan_in: int
    fan_out: int


def matrix_view(shape: tuple[int, ...], dims: MuonDimensionNumbers) -> MatrixView:
    """Reshape functions between a weight and its ``(batch, fan_in, fan_out)``."""
    ndim = len(shape)
    if ndim < 2:
        raise ValueError(f"Muon needs weights of rank >= 2, got shape {shape}")
    reduction = _axes(dims.reduction_axis, ndim)
    output = _axes(dims.output_axis, ndim)
    if set(reduction) & set(output) or not reduction or not output:
        raise ValueError(
            f"dimension numbers {dims} need disjoint, non-empty reduction and "
            f"output axes for shape {shape}"
        )
    batch = tuple(a for a in range(ndim) if a not in reduction + output)
    order = batch + reduction + output
    inverse = tuple(sorted(range(ndim), key=order.__getitem__))
    fan_in = math.prod(shape[a] for a in reduction)
    fan_out = math.prod(shape[a] for a in output)
    batch_shape = tuple(shape[a] for a in batch)
    permuted = tuple(shape[a] for a in order)

    def to_matrices(x):
        return x.transpose(order).reshape((*batch_shape, fan_in, fan_out))

    def from_matrices(x):
        return x.reshape(permuted).transpose(inverse)

    return MatrixView(to_matrices, from_matrices, fan_in, fan_out)


def shape_scale(fan_in: int, fan_out: int, rule: str, rms: Any = 0.2) -> Any:
    """The factor Muon multiplies an orthogonalized update by.

    ``"keller"``: ``sqrt(max(1, fan_out / fan_in))`` (KellerJordan, torch's
    'original'); ``"rms"``: ``rms * sqrt(max(fan_in, fan_out))`` (Moonlight's
    0.2, torch's 'match_rms_adamw'); ``"spectral"``: ``sqrt(fan_out / fan_in)``
    (Dion); ``"none"``: 1.
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
