"""Moment updates used by optimizers' hot paths."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from .._core.leaf_ops import LAX, PYTHON, Arithmetic, arithmetic, cast

# ---------------------------------------------------------------------------
# Moments (optimizer hot paths).
#
# A hyperparameter such as ``decay`` may be a Python number, an array or a
# tracer. Weakly typed values (Python numbers, ``jnp.asarray(0.9)``) already
# adopt the dtype of the arrays they meet. A strongly typed one (a float32 array
# meeting bfloat16 moments) would promote the result, so it is cast to the
# arrays' dtype first: the moment keeps its dtype and weak_type, and strict
# dtype promotion does not object.
# ---------------------------------------------------------------------------


def _coefficient(value: Any, dtype: Any) -> Any:
    if jax.typeof(value).weak_type:
        return value
    return jnp.asarray(value).astype(dtype)


def _ema(decay: Any, new: Any, old: Any, order: Any = 1) -> tuple[Arithmetic, Any]:
    """The leaf rule `(x, t) -> (1 - decay) * x + decay * t` for the trees
    `new` (raised to `order`) and `old`, and the arithmetic it is written in.

    It keeps the leaves' dtype. The weights are worked out once for the
    tree, not once per leaf: a weakly typed decay (the usual Python number)
    needs no cast at all, and the arithmetic is chosen once (`leaf_ops`).
    """
    keep = 1 - decay
    if jax.typeof(decay).weak_type and jax.typeof(keep).weak_type:
        op, (keep, decay) = arithmetic((new, old), (keep, decay), order)
        return op, lambda x, t: op.add(op.mul(keep, x), op.mul(decay, t))

    def ema(x: Any, t: Any) -> Any:
        dtype = jnp.result_type(x, t)
        return _coefficient(keep, dtype) * x + _coefficient(decay, dtype) * t

    return PYTHON, ema


# Compiled (and inlined when traced) so eager calls round ``decay**count`` the
# way a compiled update does, and the way optax does.
@functools.partial(jax.jit, inline=True)
def bias_correction(moment: Any, decay: Any, count: Any) -> Any:
    """Divides a moment estimate by `1 - decay**count`.

    Corrects the bias towards zero of an exponential moving average started at
    zero; the correction vanishes as `count` grows.

    Args:
        moment: pytree of moment estimates.
        decay: the moving average's decay rate.
        count: number of updates so far (at least 1).

    Returns:
        The corrected moment, with each leaf's dtype.
    """
    correction = 1 - decay**count
    op, _ = arithmetic((moment,))
    if op is LAX:  # every leaf has one dtype: the correction is cast once
        one = cast(correction, jax.tree.leaves(moment)[0].dtype)
        return jax.tree.map(lambda t: op.div(t, one), moment)
    return jax.tree.map(lambda t: t / correction.astype(t.dtype), moment)


def update_moment(updates: Any, moments: Any, decay: Any, order: Any) -> Any:
    """Updates the moving average of the `order`-th power of the updates.

    `moments <- (1 - decay) * updates**order + decay * moments`, leaf by
    leaf; `None` updates give `None`.

    Args:
        updates: pytree of updates.
        moments: pytree of moving averages, same structure.
        decay: decay rate (number, array or tracer).
        order: the power of the updates.

    Returns:
        The new moments, in the dtype of `updates` and `moments`.
    """
    op, ema = _ema(decay, updates, moments, order)
    return jax.tree.map(
        lambda g, t: None if g is None else ema(op.power(g, order), t),
        updates,
        moments,
        is_leaf=lambda x: x is None,
    )


def update_infinity_moment(updates: Any, moments: Any, decay: Any, eps: Any) -> Any:
    """Updates the decaying infinity norm of the updates.

    `moments <- maximum(|updates| + eps, decay * moments)`, leaf by leaf;
    `None` updates give `None`.

    Args:
        updates: pytree of updates.
        moments: pytree of running maxima, same structure.
        decay: decay rate (number, array or tracer).
        eps: small constant added to `|updates|`.

    Returns:
        The new moments, in the dtype of `updates` and `moments`.
    """

    def update(g: Any, t: Any) -> Any:
        if g is None:
            return None
        g = jnp.abs(g)
        dtype = jnp.result_type(g, t)
        return jnp.maximum(g + _coefficient(eps, dtype), _coefficient(decay, dtype) * t)

    return jax.tree.map(update, updates, moments, is_leaf=lambda x: x is None)


def update_moment_per_elem_norm(
    updates: Any, moments: Any, decay: Any, order: Any
) -> Any:
    """Updates the moving average of `|updates|**order`, for complex updates too.

    `moments <- (1 - decay) * |updates|**order + decay * moments`; for real
    updates `|g|**order` is `g**order`, as in :func:`update_moment`.

    Args:
        updates: pytree of (possibly complex) updates.
        moments: pytree of real moving averages, same structure.
        decay: decay rate (number, array or tracer).
        order: the power of the element-wise modulus.

    Returns:
        The new moments, in the real dtype of `updates` and `moments`.
    """

    def complex_power(g: Any) -> Any:
        half = order / 2
        modulus_sq = jnp.real(jnp.conj(g) * g)  # optax's formula, bit for bit
        return modulus_sq ** (int(half) if float(half).is_integer() else half)

    op, ema = _ema(decay, updates, moments, order)
    return jax.tree.map(
        lambda g, t: (
            None
            if g is None
            else ema(complex_power(g) if jnp.iscomplexobj(g) else op.power(g, order), t)
        ),
        updates,
        moments,
        is_leaf=lambda x: x is None,
    )
