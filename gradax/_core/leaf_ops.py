"""Leaf arithmetic for the optimizers' hot paths, chosen once per tree.

A `jnp` operator promotes its operands' dtypes and runs through a jitted
function: traced, each one costs about three times the Python work of the
`lax` primitive it ends in, and an optimizer's update is traced again at
every `jit` of a training step. Where promotion can change nothing, the
primitive can be called directly, with the same numbers bit for bit:

- every leaf of the trees is a traced, strongly typed float32 (or float64)
  array of one dtype, paired leaves have one shape, and
- each coefficient is a Python number (numpy rounds it to that dtype once,
  as `jnp` does) or a rank-0 array of that dtype (`lax` broadcasts it).

:func:`arithmetic` checks that once for a whole `jax.tree.map` and returns
the operations to write the formula with: :data:`LAX`'s primitives, or
:data:`PYTHON`'s operators (what the code wrote before; bfloat16 leaves, a
float32 hyperparameter meeting float16, weak types and NumPy leaves keep
`jnp`'s rules that way). A formula is written once, against either.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


class Arithmetic(NamedTuple):
    """The operations a leaf formula is written with."""

    add: Callable[[Any, Any], Any]
    sub: Callable[[Any, Any], Any]
    mul: Callable[[Any, Any], Any]
    div: Callable[[Any, Any], Any]
    sqrt: Callable[[Any], Any]
    # An integer power (a Python int exponent): `integer_pow`, as `jnp` makes it.
    power: Callable[[Any, int], Any]


LAX = Arithmetic(lax.add, lax.sub, lax.mul, lax.div, lax.sqrt, lax.integer_pow)
PYTHON = Arithmetic(
    operator.add, operator.sub, operator.mul, operator.truediv, jnp.sqrt, operator.pow
)

# Dtypes a Python number is converted to by numpy exactly as jnp converts it.
_DIRECT = frozenset((np.dtype("float32"), np.dtype("float64")))


def arithmetic(
    trees: Sequence[Any], coefficients: Sequence[Any] = (), exponent: Any = 1
) -> tuple[Arithmetic, tuple[Any, ...]]:
    """The operations for a formula over the leaves of `trees`, and its
    coefficients ready for them.

    `trees` are mapped together (leaf `i` of each meets leaf `i` of the
    others); `coefficients` are the numbers or scalars the formula applies to
    every leaf; `exponent`, the power it takes, if any. :data:`LAX` with the
    Python numbers among the coefficients converted to the leaves' dtype
    where that changes no result (see the module's documentation), else
    :data:`PYTHON` with the coefficients as given.
    """
    as_given = PYTHON, tuple(coefficients)
    if type(exponent) is not int:
        return as_given
    dtype, shapes = None, None
    for tree in trees:
        leaves = jax.tree_util.tree_leaves(tree)
        if shapes is None:
            shapes = []
        elif len(leaves) != len(shapes):
            return as_given
        for index, leaf in enumerate(leaves):
            if not isinstance(leaf, jax.core.Tracer):
                # Eagerly a jnp operator is a cached compiled call, faster
                # than a primitive dispatched by itself: traced only.
                return as_given
            aval: Any = leaf.aval  # a ShapedArray (typed as any abstract value)
            if aval.weak_type:
                return as_given
            dtype = aval.dtype if dtype is None else dtype
            if aval.dtype != dtype or dtype not in _DIRECT:
                return as_given
            if index == len(shapes):
                shapes.append(aval.shape)
            elif aval.shape != shapes[index]:
                return as_given
    if dtype is None:
        return as_given
    ready = []
    for value in coefficients:
        if type(value) in (int, float):
            value = np.asarray(value, dtype)
        else:
            aval = getattr(value, "aval", None)
            if aval is None or aval.dtype != dtype or aval.shape != ():
                return as_given
        ready.append(value)
    return LAX, tuple(ready)


def cast(x: Any, dtype: Any) -> Any:
    """`x.astype(dtype)`; `x` itself where that would change nothing (a
    strongly typed array of that dtype already)."""
    aval = getattr(x, "aval", None)
    if aval is not None and aval.dtype == dtype and not aval.weak_type:
        return x
    return x.astype(dtype)
