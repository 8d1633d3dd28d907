"""How the results of microbatches are combined: Accumulator and its kinds."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from .._compat import are_all_axes_explicit


@dataclasses.dataclass(frozen=True)
class Accumulator:
    """How to combine a function's results over microbatches.

    For results :math:`x_0, \\dots, x_{n-1}` of the microbatches the
    combined result is

    .. code-block:: python

        carry = init(shape_dtype_of(x_0))
        for i in range(n):
            carry = update(carry, x_i, i)
        result = finalize(carry)

    and `aggregate` reduces a stack of results along axis 0 in one go (what
    :func:`micro_vmap` does inside one microbatch).

    Attributes:
      init: `init(shape_dtype) -> carry`, from the shape and dtype of one
        microbatch's result.
      update: `update(carry, value, index) -> carry`.
      finalize: `finalize(carry) -> result`.
      aggregate: `aggregate(stacked_values) -> result`.
    """

    init: Callable[[Any], Any]
    update: Callable[[Any, Any, Any], Any]
    finalize: Callable[[Any], Any]
    aggregate: Callable[[Any], Any]


class AccumulationType(enum.Enum):
    """The built-in ways to combine microbatch results."""

    MEAN = enum.auto()
    """The mean over microbatches (floating-point results only)."""
    SUM = enum.auto()
    """The sum over microbatches."""
    RUNNING_MEAN = enum.auto()
    """A running mean, correct also when stopped early by
    ``num_real_microbatches`` (floating-point results only)."""
    CONCAT = enum.auto()
    """The results concatenated along axis 0, in the original batch order."""


def _floating_only(init: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def checked(value):
        if not jnp.issubdtype(value.dtype, jnp.floating):
            raise ValueError(
                "MEAN and RUNNING_MEAN accumulators need floating-point results, "
                f"got dtype {value.dtype}"
            )
        return init(value)

    return checked


def _per_leaf(acc: Accumulator) -> Accumulator:
    """`acc` (for one array) applied to every leaf of a tree."""
    return Accumulator(
        init=lambda value: jax.tree.map(acc.init, value),
        update=lambda carry, value, i: jax.tree.map(
            lambda c, v: acc.update(c, v, i), carry, value
        ),
        finalize=lambda carry: jax.tree.map(acc.finalize, carry),
        aggregate=lambda values: jax.tree.map(acc.aggregate, values),
    )


def _check_count(num_microbatches: int | None) -> None:
    if num_microbatches is None or num_microbatches <= 0:
        raise ValueError(f"{num_microbatches=} must be positive.")


def _sum() -> Accumulator:
    return _per_leaf(
        Accumulator(
            init=jnp.zeros_like,
            update=lambda carry, value, _: carry + value,
            finalize=lambda carry: carry,
            aggregate=lambda values: jnp.sum(values, axis=0),
        )
    )


def _mean(num_microbatches: int | None) -> Accumulator:
    _check_count(num_microbatches)
    return _per_leaf(
        Accumulator(
            init=_floating_only(jnp.zeros_like),
            update=lambda carry, value, _: carry + value,
            finalize=lambda carry: carry / num_microbatches,
            aggregate=lambda values: jnp.mean(values, axis=0),
        )
    )


def _running_mean() -> Accumulator:
    def update(carry, value, index):
        kept = index / (index + 1)
        return carry * kept + value * (1 - kept)

    return _per_leaf(
        Accumulator(
            init=_floating_only(jnp.zeros_like),
            update=update,
            finalize=lambda carry: carry,
            aggregate=lambda values: jnp.mean(values, axis=0),
        )
    )


def _explicit_sharding(x: Any) -> Any:
    """The sharding of `x` when its mesh axes are all Explicit, else None."""
    sharding = getattr(jax.typeof(x), "sharding", None)
    mesh = getattr(sharding, "mesh", None)
    if mesh is None or mesh.empty or not are_all_axes_explicit(mesh):
        return None
    return sharding


def _concat(num_microbatches: int | None) -> Accumulator:
    _check_count(num_microbatches)

    def init(value):
        return jnp.zeros((num_microbatches, *value.shape), value.dtype)

    def finalize(carry):
        # Entry (i, j) is batch row i + num_microbatches * j: a Fortran-order
        # reshape of the first two axes restores the batch order.
        shape = (-1, *carry.shape[2:])
        sharding = _explicit_sharding(carry)
        if sharding is None:
            return carry.reshape(shape, order="F")
        spec = jax.sharding.PartitionSpec(*sharding.spec[1:])
        target = jax.sharding.NamedSharding(sharding.mesh, spec)
        return jnp.reshape(carry, shape, order="F", out_sharding=target)

    return _per_leaf(
        Accumulator(
            init=init,
            update=lambda carry, value, i: carry.at[i].set(value),
            finalize=finalize,
            aggregate=lambda values: values,
        )
    )


def _from_kind(kind: Any, num_microbatches: int | None) -> Accumulator:
    if isinstance(kind, Accumulator):
        return kind
    if isinstance(kind, enum.Enum) and type(kind).__name__ == "AccumulationType":
        # optax's enum member (code switching one call at a time) means the
        # member of the same name here.
        kind = AccumulationType.__members__.get(kind.name, kind)
    if kind is AccumulationType.MEAN:
        return _mean(num_microbatches)
    if kind is AccumulationType.SUM:
        return _sum()
    if kind is AccumulationType.RUNNING_MEAN:
        return _running_mean()
    if kind is AccumulationType.CONCAT:
        return _concat(num_microbatches)
    raise ValueError(
        f"Unknown accumulator: {kind!r}; accumulator must be an "
        f"AccumulationType ({', '.join(AccumulationType.__members__)}) or an "
        "Accumulator"
    )


def canonicalize(tree: Any, num_microbatches: int | None) -> Accumulator:
    """One Accumulator from a tree (a prefix of the results) of them or kinds."""
    accs = jax.tree.map(lambda kind: _from_kind(kind, num_microbatches), tree)
    return Accumulator(
        init=lambda values: jax.tree.map(lambda a, v: a.init(v), accs, values),
        update=lambda carry, values, i: jax.tree.map(
            lambda a, c, v: a.update(c, v, i), accs, carry, values
        ),
        finalize=lambda carry: jax.tree.map(lambda a, c: a.finalize(c), accs, carry),
        aggregate=lambda values: jax.tree.map(
            lambda a, v: a.aggregate(v), accs, values
        ),
    )
