"""The zoom line search: sufficient decrease and small curvature (strong Wolfe)."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .. import tree as gtree
from .._core.declarations import (
    NONNEGATIVE,
    NONNEGATIVE_INT,
    POSITIVE,
    OneOf,
    Range,
    hyper,
)
from .._core.protocol import GradientTransformation
from .._core.pytree import static_field
from . import _common as common
from ._backtracking import POSITIVE_OR_INF


class ZoomLinesearchInfo(NamedTuple):
    """What the last zoom line search did (positive errors: a criterion failed)."""

    num_linesearch_steps: jax.Array  # int32 scalar: objective evaluations
    decrease_error: jax.Array  # scalar: sufficient-decrease violation
    curvature_error: jax.Array  # scalar: curvature violation


class ScaleByZoomLinesearchState(NamedTuple):
    """State of :class:`scale_by_zoom_linesearch`."""

    learning_rate: jax.Array  # scalar: the step size found last
    value: jax.Array  # scalar: objective at the accepted point
    grad: Any  # like params: gradient at the accepted point
    info: ZoomLinesearchInfo


class _Search(NamedTuple):
    """Carry of the search loop. `low`/`high` bracket an acceptable step;
    `value(low) <= value(high)`, not `low <= high`."""

    count: jax.Array
    stepsize: jax.Array
    value: jax.Array
    grad: Any
    slope: jax.Array
    decrease_error: jax.Array
    curvature_error: jax.Array
    interval_found: jax.Array
    done: jax.Array
    failed: jax.Array
    low: jax.Array
    value_low: jax.Array
    slope_low: jax.Array
    high: jax.Array
    value_high: jax.Array
    slope_high: jax.Array
    cubic_ref: jax.Array
    value_cubic_ref: jax.Array
    safe_stepsize: jax.Array
    safe_value: jax.Array
    safe_grad: Any


def _cubic_minimizer(a, fa, fpa, b, fb, c, fc):
    """Critical point of the cubic through (a, fa), (b, fb), (c, fc) with slope
    `fpa` at `a`; NaN when it has none (the caller then falls back)."""
    db, dc = b - a, c - a
    denom = (db * dc) ** 2 * (db - dc)
    rb, rc = fb - fa - fpa * db, fc - fa - fpa * dc
    # The 2x2 solve as a matrix product: XLA's dot rounds differently from the
    # written-out sums, and this keeps iterates bit-equal to optax's.
    coefficients = jnp.stack(
        [jnp.stack([dc**2, -(db**2)]), jnp.stack([-(dc**3), db**3])]
    )
    residuals = jnp.stack([rb, rc])
    cubic, square = (
        jnp.matmul(coefficients, residuals, precision=jax.lax.Precision.HIGHEST) / denom
    )
    radical = square * square - 3.0 * cubic * fpa
    return a + (-square + jnp.sqrt(radical)) / (3.0 * cubic)


def _quadratic_minimizer(a, fa, fpa, b, fb):
    """Critical point of the parabola through (a, fa), (b, fb), slope fpa at a."""
    db = b - a
    curvature = (fb - fa - fpa * db) / (db**2)
    return a - fpa / (2.0 * curvature)


# What ``verbose=True`` prints, line for line as optax 0.2.8 prints it, so
# logs and the tools that read them match.
_HEADER = (
    "INFO: optax.scale_by_zoom_linesearch:\n"
    "Value at current params: {value_init}\n"
    "Slope along update direction: {slope_init}\n"
    "Stepsize reached: {stepsize}\n"
    "Decrease Error: {decrease_error}\n"
    "Curvature Error: {curvature_error}"
)
_NO_INTERVAL = (
    "No interval satisfying curvature condition. "
    "Consider increasing maximal possible stepsize of the linesearch."
)
_ONLY_DECREASE = (
    "Returning stepsize with sufficient decrease but curvature condition not satisfied."
)


def _report_no_interval(pred, value0, slope0, t, decrease, curvature) -> None:
    """The largest step was reached before any bracket: said as optax says it."""
    common.print_if(
        pred,
        # optax joins the header and the first flag without a line break.
        _HEADER + _NO_INTERVAL + "\n" + _ONLY_DECREASE,
        value_init=value0,
        slope_init=slope0,
        stepsize=t,
        decrease_error=decrease,
        curvature_error=curvature,
    )


def _report_failure(
    value0, slope0, t, decrease, curvature, interval, safe_t, precision
):
    """The search ran out of trials: what was reached, and why, as optax says."""
    values = dict(
        value_init=value0,
        slope_init=slope0,
        stepsize=t,
        decrease_error=decrease,
        curvature_error=curvature,
    )
    jax.debug.print(_HEADER, **values, ordered=True)
    common.print_if(
        interval <= precision,
        "Length of searched interval has been reduced below threshold. "
        "Interval length: {interval_length}.",
        interval_length=interval,
    )
    common.print_if(
        safe_t > 0.0,
        _ONLY_DECREASE + " Stepsize ensuring sufficient decrease: {safe_stepsize}.",
        safe_stepsize=safe_t,
    )
    no_safe = ~(safe_t > 0.0)
    common.print_if(
        no_safe,
        "Linesearch failed, no stepsize satisfying sufficient decrease found.",
    )
    descent = slope0 < 0.0
    common.print_if(
        no_safe & ~descent,
        "The linesearch failed because the provided direction is not a "
        "descent direction. The slope (={slope_init}) at stepsize=0 should "
        "be negative",
        slope_init=slope0,
    )
    common.print_if(
        no_safe & descent,
        "Consider augmenting the maximal number of linesearch iterations.",
    )
    eps = jnp.finfo(jnp.float32).eps
    common.print_if(
        no_safe & descent & (t < eps),
        "Computed stepsize (={stepsize}) is below machine precision (={eps}), "
        "consider passing to higher precision like x64, using "
        "jax.config.update('jax_enable_x64', True).",
        stepsize=t,
        eps=eps,
    )
    common.print_if(
        no_safe & descent & (jnp.abs(slope0) > 1e16),
        "Very large absolute slope at stepsize=0. (|slope|={abs_slope_init}). "
        "The objective is badly conditioned. Consider reparameterizing "
        "objective (e.g., normalizing parameters) or finding a better guess "
        "for the initial parameters for the solver.",
        abs_slope_init=jnp.abs(slope0),
    )
    stuck = jnp.isinf(decrease)
    common.print_if(
        no_safe & stuck,
        "Cannot even make a step without getting Inf or Nan. The linesearch "
        "won't make a step and the optimizer is stuck.",
    )
    common.print_if(
        no_safe & ~stuck,
        "Making an unsafe step, not decreasing enough the objective. "
        "Convergence of the solver is compromised as it does not reduce values.",
    )


def _zoom_point(s: _Search, precision: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Next trial inside the bracket: cubic, else quadratic, else bisection."""
    delta = jnp.abs(s.high - s.low)
    left, right = jnp.minimum(s.high, s.low), jnp.maximum(s.high, s.low)
    cubic = _cubic_minimizer(
        s.low, s.value_low, s.slope_low, s.high, s.value_high,
        s.cubic_ref, s.value_cubic_ref,
    )  # fmt: skip
    use_cubic = (cubic > left + 0.2 * delta) & (cubic < right - 0.2 * delta)
    quad = _quadratic_minimizer(s.low, s.value_low, s.slope_low, s.high, s.value_high)
    use_quad = ~use_cubic & (quad > left + 0.1 * delta) & (quad < right - 0.1 * delta)
    middle = jnp.where(use_cubic, cubic, s.cubic_ref)
    middle = jnp.where(use_quad, quad, middle)
    middle = jnp.where(~use_cubic & ~use_quad, (s.low + s.high) / 2.0, middle)
    return middle, delta <= precision


class scale_by_zoom_linesearch(GradientTransformation):
    r"""Scales updates by a step size meeting the strong Wolfe conditions.

    Looks for :math:`\eta` with sufficient decrease and small curvature along
    the update :math:`u` from the parameters :math:`w`:

    .. math::
      f(w + \eta u) \le f(w) + c_1 \eta \langle u, \nabla f(w)\rangle + \epsilon,
      \qquad
      |\langle \nabla f(w + \eta u), u\rangle|
      \le c_2 |\langle \nabla f(w), u\rangle| + \epsilon.

    First the step grows by `increase_factor` until it brackets such a step
    (Nocedal and Wright, Algorithm 3.5); then the bracket shrinks by cubic or
    quadratic interpolation, or bisection (Algorithm 3.6). Close to a minimum,
    where values cannot resolve the decrease, the approximate condition of
    Hager and Zhang,
    :math:`\langle\nabla f(w+\eta u), u\rangle \le (2c_1 - 1)\langle\nabla
    f(w), u\rangle` with :math:`f(w + \eta u) \le f(w) + c_3|f(w)|`, is also
    accepted. If the search fails, the largest step with sufficient decrease
    seen is used (or a zero step when the objective is not finite there).

    `update` needs the keyword arguments `value` (of the objective at
    `params`), `grad` (its gradient there) and `value_fn` (the
    objective, `value_fn(params, **kwargs)`); other keyword arguments that
    `value_fn` accepts are passed on to it. The state keeps the value and
    gradient at the accepted point; :func:`value_and_grad_from_state` reuses
    them.

    Differences from optax: scalars are computed in the widest of the
    parameters', the objective's and the default float dtypes, and kept in the
    state in at least the default float dtype (float32 for float16 or bfloat16
    parameters), so the state never changes dtype under `lax.cond` or
    `lax.while_loop`; the search evaluates the objective once per iteration
    outside a `lax.cond`. As in optax, a keyword argument that `value_fn`
    does not take is a TypeError.

    The numbers are constants of the search (numbers or arrays, not
    schedules): the state keeps no step count.

    Args:
      max_linesearch_steps: the most objective evaluations per search, an
        integer >= 0.
      max_learning_rate: largest step allowed, > 0, or None for no bound.
      tol: :math:`\epsilon \ge 0`, tolerance on both criteria.
      increase_factor: growth of the step while looking for a bracket, > 0.
      slope_rtol: :math:`c_1 \ge 0`.
      curv_rtol: :math:`c_2 \ge 0` (`jnp.inf` drops the curvature
        condition).
      approx_dec_rtol: :math:`c_3 \ge 0`, or None for the plain Armijo
        condition.
      stepsize_precision: once the bracket is shorter than this (>= 0) and a
        step with sufficient decrease is known, the search ends with that
        step.
      initial_guess_strategy: `"one"` (start every search at 1, best for
        quasi-Newton directions) or `"keep"` (start at the last step size).
      verbose: print optax's diagnostic lines when a search fails.

    Returns:
      A transformation whose state is a :class:`ScaleByZoomLinesearchState`.

    Example:
      >>> import jax, jax.numpy as jnp, gradax
      >>> f = lambda x: jnp.sum((x - 1.0) ** 2)
      >>> x = jnp.zeros(3)
      >>> tx = gradax.scale_by_zoom_linesearch(max_linesearch_steps=15)
      >>> state = tx.init(x)
      >>> value, grad = jax.value_and_grad(f)(x)
      >>> u, state = tx.update(-grad, state, x, value=value, grad=grad, value_fn=f)
      >>> gradax.apply_updates(x, u)
      Array([1., 1., 1.], dtype=float32)

    References:
      Nocedal and Wright, Numerical Optimization, 1999, Algorithms 3.5, 3.6;
      Hager and Zhang, Algorithm 851: CG_DESCENT, 2006
      (doi:10.1145/1132973.1132979).
    """

    max_linesearch_steps: Any = hyper(valid=NONNEGATIVE_INT, schedule=False)
    max_learning_rate: Any = hyper(default=None, valid=POSITIVE_OR_INF, schedule=False)
    tol: Any = hyper(default=0.0, valid=NONNEGATIVE, schedule=False)
    increase_factor: Any = hyper(default=2.0, valid=POSITIVE, schedule=False)
    slope_rtol: Any = hyper(default=0.0001, valid=NONNEGATIVE, schedule=False)
    curv_rtol: Any = hyper(
        default=0.9, valid=Range(0.0, allow_inf=True), schedule=False
    )
    approx_dec_rtol: Any = hyper(
        default=1e-6, valid=NONNEGATIVE, schedule=False, allow_none=True
    )
    stepsize_precision: Any = hyper(default=1e-5, valid=NONNEGATIVE, schedule=False)
    initial_guess_strategy: str = hyper(
        default="keep", valid=OneOf(("one", "keep")), static=True
    )
    verbose: bool = static_field(default=False)

    def init_state(self, params):
        return ScaleByZoomLinesearchState(
            **common.initial_step(params),
            grad=gtree.zeros_like(params),
            # Weakly typed, as optax's: a Python 0 and inf.
            info=ZoomLinesearchInfo(
                jnp.asarray(0), jnp.asarray(jnp.inf), jnp.asarray(jnp.inf)
            ),
        )

    def update_state(self, updates, state, params=None, **extra_args):
        name = type(self).__name__
        value, grad, value_fn, fn_kwargs = common.line_search_inputs(
            name, extra_args, params
        )

        def value_and_grad(p):
            return jax.value_and_grad(
                lambda q: common.scalar_value(value_fn(q, **fn_kwargs), name)
            )(p)

        out = jax.eval_shape(value_and_grad, params)
        dtype = common.search_dtype(params, jnp.asarray(value), out[0])
        final = self._search(updates, params, value, grad, state, value_and_grad, dtype)
        new_state = ScaleByZoomLinesearchState(
            learning_rate=final.stepsize,
            value=final.value,
            grad=final.grad,
            info=ZoomLinesearchInfo(
                final.count, final.decrease_error, final.curvature_error
            ),
        )
        return gtree.scale(final.stepsize, updates), new_state

    def _search(self, updates, params, value, grad, state, value_and_grad, dtype):
        def num(x):
            return jnp.asarray(x, dtype)

        c1, c2, tol = num(self.slope_rtol), num(self.curv_rtol), num(self.tol)
        grow, precision = num(self.increase_factor), num(self.stepsize_precision)
        max_steps = jnp.asarray(self.max_linesearch_steps)
        if self.initial_guess_strategy == "one":
            guess = num(1.0)
        else:
            guess = num(state.learning_rate)
        value0 = num(jnp.real(jnp.asarray(value)))
        grad0 = common.cast_tree_like(grad, params)
        slope0 = common.real_vdot(updates, grad0, dtype).astype(dtype)

        def errors(t, v, slope):
            decrease = v - value0 - c1 * t * slope0
            if self.approx_dec_rtol is not None:
                approx = slope - (2 * c1 - 1.0) * slope0
                near = v - value0 - num(self.approx_dec_rtol) * jnp.abs(value0)
                decrease = jnp.minimum(jnp.maximum(approx, near), decrease)
            decrease = common.nan_to_inf(decrease)
            curvature = common.nan_to_inf(jnp.abs(slope) - c2 * jnp.abs(slope0))
            return decrease, curvature

        def body(s: _Search) -> _Search:
            # The trial step: growing while no bracket is known, else zooming.
            grown = jnp.where(s.count == 0, guess, grow * s.stepsize)
            reached = jnp.asarray(False)
            if self.max_learning_rate is not None:
                reached = grown >= num(self.max_learning_rate)
                grown = jnp.minimum(grown, num(self.max_learning_rate))
            middle, too_small = _zoom_point(s, precision)
            found = s.interval_found
            t = jnp.where(found, middle, grown)

            v, g = value_and_grad(common.step_along(params, t, updates))
            v, g = num(v), common.cast_tree_like(g, params)
            slope = common.real_vdot(gtree.conj(g), updates, dtype).astype(dtype)
            decrease, curvature = errors(t, v, slope)
            good = jnp.maximum(decrease, curvature) <= tol
            last = s.count + 1 >= max_steps

            # Keep the best step with sufficient decrease, as a fallback.
            keep_safe = (decrease <= tol) & (~found | (v < s.safe_value))
            safe = gtree.where(
                keep_safe,
                (t, v, g),
                (s.safe_stepsize, s.safe_value, s.safe_grad),
            )

            # Bracketing phase (Algorithm 3.5).
            high_is_new = (decrease > 0.0) | ((v >= s.value) & (s.count > 0))
            low_is_new = (slope >= 0.0) & ~high_is_new
            prev, new = (s.stepsize, s.value, s.slope), (t, v, slope)
            b_low = gtree.where(low_is_new, new, prev)
            b_high = gtree.where(low_is_new, prev, new)
            b_found = high_is_new | low_is_new | good
            b_done = good | (reached & ~b_found)

            # Zoom phase (Algorithm 3.6).
            high_is_mid = (decrease > 0.0) | (v >= s.value_low)
            high_is_low = (slope * (s.high - s.low) >= 0.0) & ~high_is_mid
            low = (s.low, s.value_low, s.slope_low)
            high = (s.high, s.value_high, s.slope_high)
            z_high = gtree.where(high_is_low, low, gtree.where(high_is_mid, new, high))
            z_low = gtree.where(high_is_mid, low, new)
            z_ref = gtree.where(
                high_is_mid | high_is_low, (s.high, s.value_high), (s.low, s.value_low)
            )
            z_stuck = too_small & (safe[0] > 0.0)

            new_low = gtree.where(found, z_low, b_low)
            new_high = gtree.where(found, z_high, b_high)
            ref = gtree.where(found, z_ref, new_low[:2])
            done = jnp.where(found, good, b_done)
            failed = jnp.where(found, last | z_stuck, last) & ~done
            if self.verbose:
                _report_no_interval(
                    ~found & reached & ~b_found, value0, slope0, t, decrease, curvature
                )
                interval = jnp.abs(new_low[0] - new_high[0])
                jax.lax.cond(
                    failed,
                    lambda: _report_failure(
                        value0,
                        slope0,
                        t,
                        decrease,
                        curvature,
                        interval,
                        safe[0],
                        precision,
                    ),  # fmt: skip
                    lambda: None,
                )

            # On failure fall back to the safe step, or to no step at all when
            # the objective was not finite at the last trial.
            fallback = failed & ((safe[0] > 0.0) | jnp.isinf(decrease))
            t, v, g = gtree.where(fallback, safe, (t, v, g))
            out = _Search(
                s.count + 1, t, v, g, slope, decrease, curvature,
                found | b_found, done, failed, *new_low, *new_high, *ref, *safe,
            )  # fmt: skip
            return common.cast_tree_like(out, s)

        zero = num(0.0)
        inf = num(jnp.inf)
        init = _Search(
            jnp.zeros([], jnp.int32), zero, value0, grad0, slope0, inf, inf,
            jnp.asarray(False), jnp.asarray(False), jnp.asarray(False),
            zero, value0, slope0, zero, value0, slope0, zero, value0,
            zero, value0, grad0,
        )  # fmt: skip
        return jax.lax.while_loop(lambda s: ~(s.done | s.failed), body, init)
