"""Pieces the line searches share: dtypes, extra arguments, reuse of values.

The line searches run their own `lax.while_loop`. The carry of such a loop
must keep one type from iteration to iteration, whatever the precision of the
parameters and of the objective. The rule used throughout:

- the *state* keeps scalars (learning rate, value, errors) in
  :func:`state_dtype`: the parameters' real dtype, at least the default float
  (float32, or float64 with x64 on), so a float16 model keeps a float32 value;
- *inside* a search, scalars live in :func:`search_dtype`, which also takes in
  the objective's dtype, so a float64 objective is compared in float64;
- trial parameters are always cast back to the parameters' dtypes before the
  objective sees them, and gradients to the parameters' dtypes after.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from .. import tree as gtree
from .._core.numerics import real_dtype


def state_dtype(params: Any) -> Any:
    """Dtype of the scalars a line search keeps in its state."""
    result = jnp.result_type(float)  # float32, or float64 with x64 on
    for leaf in jax.tree.leaves(params):
        dtype = getattr(leaf, "dtype", None)
        if dtype is not None and jnp.issubdtype(dtype, jnp.inexact):
            result = jnp.promote_types(result, real_dtype(dtype))
    return result


def initial_step(params: Any) -> dict[str, jax.Array]:
    """Where a search starts: `learning_rate` 1 and `value` inf (state dtype)."""
    dtype = state_dtype(params)
    return {
        "learning_rate": jnp.asarray(1.0, dtype),
        "value": jnp.asarray(jnp.inf, dtype),
    }


def search_dtype(params: Any, *values: Any) -> Any:
    """Dtype of the scalars inside one line search."""
    result = state_dtype(params)
    for value in values:
        dtype = getattr(value, "dtype", None)
        if dtype is not None and jnp.issubdtype(dtype, jnp.inexact):
            result = jnp.promote_types(result, real_dtype(dtype))
    return result


def real_vdot(tree_x: Any, tree_y: Any, dtype: Any) -> jax.Array:
    """`real(vdot(x, y))` with leaves upcast to at least `dtype`.

    A half-precision dot product over many elements loses most of its digits
    (or overflows), so each leaf is promoted to the search dtype first.
    """

    def up(x):
        return x.astype(jnp.promote_types(x.dtype, dtype))

    return jnp.real(gtree.vdot(jax.tree.map(up, tree_x), jax.tree.map(up, tree_y)))


def step_along(params: Any, stepsize: jax.Array, updates: Any) -> Any:
    """`params + stepsize * updates`, in each parameter's dtype."""
    return jax.tree.map(
        lambda p, u: (p + stepsize * u).astype(p.dtype), params, updates
    )


def cast_tree_like(tree: Any, like: Any) -> Any:
    """`tree` with each leaf cast to the dtype of the same leaf of `like`."""
    return jax.tree.map(lambda x, y: jnp.asarray(x).astype(y.dtype), tree, like)


def nan_to_inf(error: jax.Array) -> jax.Array:
    """A violated-criterion measure: negative parts dropped, NaN made `inf`."""
    error = jnp.maximum(error, 0.0)
    return jnp.where(jnp.isnan(error), jnp.inf, error)


def accepted_kwargs(fn: Callable[..., Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The entries of `kwargs` that `fn` takes as keyword arguments."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return dict(kwargs)
    names = set()
    for p in parameters:
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            return dict(kwargs)
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            names.add(p.name)
    return {k: v for k, v in kwargs.items() if k in names}


def line_search_inputs(
    owner: str, extra_args: dict[str, Any], params: Any
) -> tuple[Any, ...]:
    """`value`, `grad`, `value_fn` and the value_fn's keyword arguments.

    Also checks that `update` got the `params` the search steps from.
    """
    missing = [k for k in ("value", "grad", "value_fn") if k not in extra_args]
    if missing:
        raise TypeError(
            f"{owner}.update needs the keyword arguments value=, grad= and "
            f"value_fn= (missing: {', '.join(missing)}); see "
            "gradax.value_and_grad_from_state."
        )
    rest = dict(extra_args)
    value, grad, value_fn = rest.pop("value"), rest.pop("grad"), rest.pop("value_fn")
    if not callable(value_fn):
        raise TypeError(f"{owner}: value_fn must be callable, got {value_fn!r}")
    fn_kwargs = accepted_kwargs(value_fn, rest)
    # As optax: a keyword value_fn does not take is an error, not dropped
    # (a misspelt batch argument would otherwise go unnoticed).
    unused = sorted(set(rest) - set(fn_kwargs))
    if unused:
        raise TypeError(
            f"Unexpected keyword arguments passed to {owner}.update: "
            f"{', '.join(unused)}; besides value=, grad= and value_fn=, it "
            "takes only the keyword arguments value_fn accepts"
        )
    if params is None:
        raise TypeError(f"{owner}.update needs params")
    return value, grad, value_fn, fn_kwargs


def scalar_value(value: Any, owner: str) -> jax.Array:
    """`value` as a scalar array; a clear error if it is not one number."""
    value = jnp.asarray(value)
    if value.size != 1:
        raise TypeError(
            f"{owner}: the objective must return a scalar, got shape {value.shape}"
        )
    return value.reshape(())


def value_and_grad_from_state(
    value_fn: Callable[..., Any],
) -> Callable[..., tuple[jax.Array, Any]]:
    r"""Like :func:`jax.value_and_grad`, but reuses a value and grad in the state.

    A line search evaluates the objective and its gradient at the point it
    accepts; the next step starts there. The returned function looks up the
    unique `value` and `grad` entries of `state` and returns them, or
    computes them when the stored value is not finite (as after `init`).

    Differences from optax: the stored value is returned in the dtype the
    objective returns and the gradient in the parameters' dtypes, so the two
    branches agree under `lax.cond`/`while_loop` whatever the precisions.

    Args:
      value_fn: the objective, `value_fn(params, *args, **kwargs)`, returning
        a real scalar.

    Returns:
      `value_and_grad(params, *args, state, **kwargs) -> (value, grad)`;
      `state` is keyword-only.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> f = lambda x: jnp.sum(x**2)
      >>> params = jnp.array([1.0, 2.0, 3.0])
      >>> solver = gradax.lbfgs()
      >>> state = solver.init(params)
      >>> value_and_grad = gradax.value_and_grad_from_state(f)
      >>> for _ in range(2):
      ...     value, grad = value_and_grad(params, state=state)
      ...     updates, state = solver.update(
      ...         grad, state, params, value=value, grad=grad, value_fn=f
      ...     )
      ...     params = gradax.apply_updates(params, updates)
      >>> print(f"{f(params):.1e}")
      0.0e+00
    """

    def value_and_grad(params: Any, *fn_args: Any, state: Any, **fn_kwargs: Any):
        value = gtree.get(state, "value")
        grad = gtree.get(state, "grad")
        if value is None or grad is None:
            raise ValueError(
                "value_and_grad_from_state: no value or grad found in the state; "
                "use a line search that stores them (scale_by_zoom_linesearch, or "
                "scale_by_backtracking_linesearch with store_grad=True)."
            )

        def compute(p, args, kwargs):
            return jax.value_and_grad(value_fn)(p, *args, **kwargs)

        out = jax.eval_shape(compute, params, fn_args, fn_kwargs)

        def stored(p, args, kwargs):
            del p, args, kwargs
            return cast_tree_like((value, grad), out)

        return jax.lax.cond(
            jnp.isfinite(value), stored, compute, params, fn_args, fn_kwargs
        )

    return value_and_grad


def print_if(pred: jax.Array, message: str, **values: Any) -> None:
    """`jax.debug.print(message)` when `pred` holds, also under `jit`."""
    jax.lax.cond(
        pred,
        lambda: jax.debug.print(message, **values, ordered=True),
        lambda: None,
    )
