"""`minimize`: a whole L-BFGS run in one compiled `lax.while_loop`."""

from __future__ import annotations

import enum
import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import tree as gtree
from .._core.declarations import Range, Spec, validate
from .._core.updates import apply_updates
from . import _common as common
from .lbfgs import lbfgs

# ``tol`` is an argument of a function, not a field: its declaration, checked
# at the call (inf stops at once).
_TOL = Spec(Range(0.0, allow_inf=True), schedule=False, array=True, allow_none=False)


class MinimizeStatus(enum.IntEnum):
    """Why :func:`minimize` stopped (the `status` of a :class:`MinimizeResult`)."""

    CONVERGED = 0
    MAX_STEPS = 1
    LINESEARCH_FAILED = 2
    NONFINITE = 3
    INVALID_OBJECTIVE = 4


_RUNNING = -1

_MESSAGES = {
    MinimizeStatus.CONVERGED: "converged: the gradient norm is at most tol",
    MinimizeStatus.MAX_STEPS: "stopped after max_steps steps without reaching tol",
    MinimizeStatus.LINESEARCH_FAILED: (
        "the line search could not decrease the objective along the L-BFGS "
        "direction (a wrong gradient, a non-smooth objective, or the limit of "
        "floating-point precision); params is the point of lowest value found"
    ),
    MinimizeStatus.NONFINITE: (
        "the objective or its gradient is not finite (NaN or inf) at x0"
    ),
    MinimizeStatus.INVALID_OBJECTIVE: (
        "the objective must return one real floating-point number (shape () or "
        "(1,)); nothing was run"
    ),
}


class MinimizeResult(NamedTuple):
    """The outcome of :func:`minimize`.

    Attributes:
      params: the final parameters, a tree like `x0`.
      value: the objective there.
      grad_norm: the Euclidean norm of the gradient there.
      steps: the number of L-BFGS steps taken.
      converged: whether `grad_norm <= tol`.
      status: a :class:`MinimizeStatus` code; `message` explains it.
      num_fun_evals: evaluations of the objective and its gradient.
    """

    params: Any
    value: jax.Array
    grad_norm: jax.Array
    steps: jax.Array
    converged: jax.Array
    status: jax.Array
    num_fun_evals: jax.Array

    @property
    def message(self) -> str:
        """Why the run stopped, in words."""
        return _MESSAGES[MinimizeStatus(int(self.status))]


def _as_params(x: Any) -> jax.Array:
    """A leaf of `x0` as a strongly typed floating-point array."""
    if (
        isinstance(x, jax.Array)
        and not x.weak_type
        and jnp.issubdtype(x.dtype, jnp.inexact)
    ):
        return x  # already one: no eager operation to dispatch
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.inexact):
        x = x.astype(jnp.result_type(float))
    return jax.lax.convert_element_type(x, x.dtype)  # drops a weak type


def _grad_norm(grad: Any, dtype: Any) -> jax.Array:
    return jnp.sqrt(common.real_vdot(grad, grad, dtype)).astype(dtype)


def _invalid_result(x0: Any) -> MinimizeResult:
    nan = jnp.asarray(jnp.nan, jnp.result_type(float))
    return MinimizeResult(
        params=x0,
        value=nan,
        grad_norm=nan,
        steps=jnp.zeros([], jnp.int32),
        converged=jnp.asarray(False),
        status=jnp.asarray(MinimizeStatus.INVALID_OBJECTIVE, jnp.int32),
        num_fun_evals=jnp.zeros([], jnp.int32),
    )


# Steps in a row that may fail to lower the best value (within the tolerance
# of the line search's approximate decrease condition) before giving up.
_PATIENCE = 10


class _Point(NamedTuple):
    params: Any
    value: jax.Array
    grad_norm: jax.Array


class _Carry(NamedTuple):
    steps: jax.Array
    params: Any
    state: Any
    value: jax.Array
    grad: Any
    grad_norm: jax.Array
    status: jax.Array
    evals: jax.Array
    stalled: jax.Array  # steps in a row without a new best value
    best: _Point


def _solve(fun, solver, x0, args, max_steps, tol) -> MinimizeResult:
    def objective(p):
        return fun(p, *args)

    out = jax.eval_shape(objective, x0)
    if (
        not isinstance(out, jax.ShapeDtypeStruct)
        or math.prod(out.shape) != 1
        or not jnp.issubdtype(out.dtype, jnp.floating)
    ):
        return _invalid_result(x0)
    value_dtype = out.dtype
    norm_dtype = common.search_dtype(x0, out)

    def value_fn(p):
        return jnp.reshape(objective(p), ())

    def evaluate(p):
        v, g = jax.value_and_grad(value_fn)(p)
        return v.astype(value_dtype), common.cast_tree_like(g, p)

    def status_after(ok, grad_norm, steps):
        status = jnp.where(steps >= max_steps, MinimizeStatus.MAX_STEPS, _RUNNING)
        status = jnp.where(grad_norm <= tol, MinimizeStatus.CONVERGED, status)
        status = jnp.where(ok, status, MinimizeStatus.LINESEARCH_FAILED)
        return status.astype(jnp.int32)

    def value_and_grad_after(state, params):
        """The line search's value and gradient at `params`, if it kept them."""
        stored_value, stored_grad = gtree.get(state, "value"), gtree.get(state, "grad")
        if stored_value is None or stored_grad is None:
            return (*evaluate(params), 1)
        reuse = jnp.isfinite(stored_value)
        value, grad = jax.lax.cond(
            reuse,
            lambda: (
                stored_value.astype(value_dtype),
                common.cast_tree_like(stored_grad, params),
            ),
            lambda: evaluate(params),
        )
        return value, grad, jnp.where(reuse, 0, 1)

    def body(c: _Carry) -> _Carry:
        # JAX's gradient of a real function of complex parameters is the
        # conjugate of the steepest-ascent direction; L-BFGS wants the latter.
        direction = gtree.conj(c.grad)
        updates, state = solver.update(
            direction, c.state, c.params, value=c.value, grad=direction,
            value_fn=value_fn,
        )  # fmt: skip
        params = apply_updates(c.params, updates)
        value, grad, extra = value_and_grad_after(state, params)
        evals = c.evals + extra
        info = gtree.get(state, "info")
        if info is not None and hasattr(info, "num_linesearch_steps"):
            evals = evals + info.num_linesearch_steps
        grad_norm = _grad_norm(grad, norm_dtype)

        # A step counts if it moves to finite numbers and the line search met
        # its decrease condition (which tolerates a rise at rounding level
        # near a minimum) or at least lowered the value.
        searched_ok = jnp.asarray(True)
        if info is not None and hasattr(info, "decrease_error"):
            searched_ok = info.decrease_error <= 0.0
        moved = jnp.asarray(False)
        for new, old in zip(
            jax.tree.leaves(params), jax.tree.leaves(c.params), strict=True
        ):
            moved = moved | jnp.any(new != old)
        accepted = (
            jnp.isfinite(value)
            & jnp.isfinite(grad_norm)
            & moved
            & (searched_ok | (value < c.value))
        )
        improved = accepted & (value < c.best.value)
        stalled = jnp.where(improved, 0, c.stalled + 1)
        steps = c.steps + accepted
        ok = accepted & (stalled < _PATIENCE)
        point = _Point(params, value, grad_norm)
        moved_on = c._replace(
            steps=steps, params=params, value=value, grad=grad, grad_norm=grad_norm
        )
        new = gtree.where(accepted, moved_on, c)._replace(
            state=state,
            status=status_after(ok, grad_norm, steps),
            evals=evals,
            stalled=stalled,
            best=gtree.where(improved, point, c.best),
        )
        return common.cast_tree_like(new, c)

    value, grad = evaluate(x0)
    grad_norm = _grad_norm(grad, norm_dtype)
    zero = jnp.zeros([], jnp.int32)
    status = status_after(True, grad_norm, zero)
    finite = jnp.isfinite(value) & jnp.isfinite(grad_norm)
    status = jnp.where(finite, status, MinimizeStatus.NONFINITE).astype(jnp.int32)
    start = _Point(x0, value, grad_norm)
    init = _Carry(
        zero, x0, solver.init(x0), value, grad, grad_norm, status, zero + 1, zero,
        start,
    )  # fmt: skip
    final = jax.lax.while_loop(lambda c: c.status == _RUNNING, body, init)
    # Report the converged point, else the lowest value seen.
    converged = final.status == MinimizeStatus.CONVERGED
    last = _Point(final.params, final.value, final.grad_norm)
    point = gtree.where(converged, last, final.best)
    return MinimizeResult(
        params=point.params,
        value=point.value,
        grad_norm=point.grad_norm,
        steps=final.steps,
        converged=converged,
        status=final.status,
        num_fun_evals=final.evals,
    )


def _solve_flat(fun, solver_def, solver_leaves, *inputs) -> MinimizeResult:
    solver = jax.tree.unflatten(solver_def, solver_leaves)
    return _solve(fun, solver, *inputs)


# The solver travels flattened: its tree definition (static) and its leaves,
# built once per set of options. Building it at every call cost about 0.2 ms
# of Python, most of minimize's overhead on a small problem.
_solve_jit = jax.jit(_solve_flat, static_argnums=(0, 1))


@functools.lru_cache(maxsize=64)
def _cached_solver(options: tuple[tuple[str, type, Any], ...]) -> tuple[Any, tuple]:
    solver = lbfgs(**{name: value for name, _, value in options})
    leaves, solver_def = jax.tree.flatten(solver)
    return solver_def, tuple(leaves)


def _flat_solver(options: dict[str, Any]) -> tuple[Any, tuple]:
    """`lbfgs(**options)` flattened, built once per distinct (hashable) options."""
    # The type is part of the key: True == 1 and 1 == 1.0, but they build
    # solvers of different leaves (and errors).
    key = tuple((name, type(value), value) for name, value in sorted(options.items()))
    try:
        hash(key)
    except TypeError:  # an array or other unhashable option: build it afresh
        leaves, solver_def = jax.tree.flatten(lbfgs(**options))
        return solver_def, tuple(leaves)
    return _cached_solver(key)


def _as_traced_number(value: Any, dtype: Any = None) -> Any:
    """A Python number as is (jit converts it without an eager dispatch, to the
    same weak type as `jnp.asarray`), anything else as an array."""
    if type(value) in (int, float) and dtype is None:
        return value
    if type(value) is int:
        return np.asarray(value, dtype)  # a strong int32 scalar, like jnp's
    return jnp.asarray(value, dtype)


def minimize(
    fun: Callable[..., Any],
    x0: Any,
    *,
    method: str = "lbfgs",
    max_steps: int = 1000,
    tol: float = 1e-5,
    args: tuple[Any, ...] = (),
    **options: Any,
) -> MinimizeResult:
    r"""Minimizes `fun` from `x0` with L-BFGS, in one compiled loop.

    Runs :class:`lbfgs` steps, reusing the value and gradient each line
    search computes, inside one `lax.while_loop` until
    :math:`\|\nabla f(x)\|_2 \le` `tol`, `max_steps` steps, or a failure.
    The compiled loop is cached: calling again with the same `fun` (the
    same object), options and shapes does not recompile, even with other
    `x0`, `args`, `max_steps` or `tol`.

    Failures end with a status instead of an exception or a silent answer:
    an objective that is not a real scalar (`INVALID_OBJECTIVE`), a value or
    gradient that is not finite at `x0` (`NONFINITE`), a line search that
    cannot decrease the objective (`LINESEARCH_FAILED`; `params` is then
    the point of lowest value found).

    Args:
      fun: the objective `fun(params, *args)`, returning a real scalar.
      x0: the starting point, any pytree of arrays (real or complex).
      method: `"lbfgs"` (the only method so far).
      max_steps: the most L-BFGS steps.
      tol: stop when the Euclidean norm of the gradient is at most this.
      args: extra positional arguments of `fun` (for example data), traced
        rather than baked into the compiled loop.
      **options: arguments of :class:`lbfgs` (`memory_size`,
        `scale_init_precond`, `linesearch`, `learning_rate`).

    Returns:
      A :class:`MinimizeResult` (`params`, `value`, `grad_norm`,
      `steps`, `converged`, `status`, `num_fun_evals`; `message`).

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> def rosenbrock(x):
      ...     return jnp.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)
      >>> result = gradax.minimize(rosenbrock, jnp.zeros(5), tol=1e-4)
      >>> bool(result.converged), result.params.round(3)
      (True, Array([1., 1., 1., 1., 1.], dtype=float32))
    """
    if not isinstance(method, str) or method.lower() != "lbfgs":
        raise ValueError(f"minimize: unknown method {method!r}; use 'lbfgs'")
    validate("tol", tol, _TOL)
    steps: int | jax.Array = max_steps
    if isinstance(max_steps, bool) or not isinstance(max_steps, int):
        steps = jnp.asarray(max_steps, jnp.int32)
    elif max_steps < 0:
        raise ValueError(f"max_steps must be an integer >= 0, got {max_steps!r}")
    unknown = sorted(set(options) - set(lbfgs.__dataclass_fields__))
    if unknown:
        raise TypeError(
            f"minimize: unknown option(s) {', '.join(unknown)}; the options are "
            f"those of lbfgs: {', '.join(lbfgs.__dataclass_fields__)}"
        )
    solver_def, solver_leaves = _flat_solver(options)
    x0 = jax.tree.map(_as_params, x0)
    inputs = (
        solver_leaves,
        x0,
        tuple(args),
        _as_traced_number(steps, jnp.int32),
        _as_traced_number(tol),
    )
    try:
        hash(fun)
    except TypeError:  # not cacheable: compile for this call only
        solve = jax.jit(functools.partial(_solve_flat, fun, solver_def))
        return solve(*inputs)
    return _solve_jit(fun, solver_def, *inputs)
