"""The backtracking line search: shrink the step until it decreases enough."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .. import tree as gtree
from .._core.declarations import NONNEGATIVE, NONNEGATIVE_INT, Range, hyper
from .._core.protocol import GradientTransformation
from .._core.pytree import static_field
from . import _common as common

# A growth factor or a largest step: > 0, and inf for "no bound".
POSITIVE_OR_INF = Range(0.0, low_open=True, allow_inf=True)


class BacktrackingLinesearchInfo(NamedTuple):
    """What the last backtracking search did."""

    num_linesearch_steps: jax.Array  # int32 scalar: objective evaluations
    decrease_error: jax.Array  # scalar: > 0 when no step decreased enough


class ScaleByBacktrackingLinesearchState(NamedTuple):
    """State of :class:`scale_by_backtracking_linesearch`."""

    learning_rate: jax.Array  # scalar: the step size found last
    value: jax.Array  # scalar: objective at the accepted point
    grad: Any  # like params when store_grad=True, else None
    info: BacktrackingLinesearchInfo


class _Search(NamedTuple):
    learning_rate: jax.Array
    value: jax.Array
    grad: Any
    decrease_error: jax.Array
    count: jax.Array


class scale_by_backtracking_linesearch(GradientTransformation):
    r"""Scales updates by the first step size, shrinking, with enough decrease.

    With parameters :math:`w`, update :math:`u` and objective :math:`f`, the
    step :math:`\eta` starts at :math:`\min(\gamma_{+}\eta_{prev},
    \eta_{max})` and is multiplied by `decrease_factor` until (Armijo)

    .. math::
      f(w + \eta u) \le (1 + \delta) f(w) + c\,\eta \langle u, \nabla f(w)
      \rangle + \epsilon.

    If no step qualifies within `max_backtracking_steps`, the last one is
    used, or no step at all when the objective was not finite there.
    `update` needs `value`, `grad` and `value_fn` keyword arguments,
    as for :class:`scale_by_zoom_linesearch`. `u` must be a descent
    direction (:math:`\langle u, \nabla f(w)\rangle < 0`).

    Differences from optax: scalars are kept in at least the default float
    dtype and searched in the widest of the parameters', the objective's and
    that dtype, so the state never changes dtype; with `store_grad` the
    gradient comes from one reverse pass of the accepted evaluation. As in
    optax, a keyword argument that `value_fn` does not take is a TypeError.

    The numbers are constants of the search (numbers or arrays, not
    schedules): the state keeps no step count.

    Args:
      max_backtracking_steps: the most shrinking steps per search, an integer
        >= 0.
      slope_rtol: :math:`c \ge 0`, the fraction of the predicted decrease
        required.
      decrease_factor: shrinking factor, in (0, 1).
      increase_factor: :math:`\gamma_{+} > 0`, growth of the first guess
        over the last step (`1` keeps it, `math.inf` starts at the
        maximum).
      max_learning_rate: :math:`\eta_{max} > 0` (`math.inf` for no bound).
      atol: :math:`\epsilon \ge 0`, absolute tolerance of the criterion.
      rtol: :math:`\delta \ge 0`, relative tolerance of the criterion.
      store_grad: also compute and keep the gradient at the accepted point
        (for :func:`value_and_grad_from_state`).
      verbose: print optax's diagnostic lines when a search fails.

    Returns:
      A transformation whose state is a
      :class:`ScaleByBacktrackingLinesearchState`.

    Example:
      >>> import jax, jax.numpy as jnp, gradax
      >>> f = lambda x: jnp.sum(x**2)
      >>> x = jnp.array([1.0, 2.0, 3.0])
      >>> tx = gradax.chain(
      ...     gradax.sgd(1.0), gradax.scale_by_backtracking_linesearch(15)
      ... )
      >>> state = tx.init(x)
      >>> value, grad = jax.value_and_grad(f)(x)
      >>> u, state = tx.update(grad, state, x, value=value, grad=grad, value_fn=f)
      >>> print(f"{f(gradax.apply_updates(x, u)):.2f}")
      5.04

    References:
      Armijo, Minimization of functions having Lipschitz continuous first
      partial derivatives, 1966; Vaswani et al., Painless Stochastic Gradient,
      2019 (arXiv:1905.09997); Nocedal and Wright, Numerical Optimization, 1999.
    """

    max_backtracking_steps: Any = hyper(valid=NONNEGATIVE_INT, schedule=False)
    slope_rtol: Any = hyper(default=0.0001, valid=NONNEGATIVE, schedule=False)
    decrease_factor: Any = hyper(
        default=0.8,
        valid=Range(0.0, 1.0, low_open=True, high_open=True),
        schedule=False,
    )
    increase_factor: Any = hyper(default=1.5, valid=POSITIVE_OR_INF, schedule=False)
    max_learning_rate: Any = hyper(default=1.0, valid=POSITIVE_OR_INF, schedule=False)
    atol: Any = hyper(default=0.0, valid=NONNEGATIVE, schedule=False)
    rtol: Any = hyper(default=0.0, valid=NONNEGATIVE, schedule=False)
    store_grad: bool = static_field(default=False)
    verbose: bool = static_field(default=False)

    def init_state(self, params):
        start = common.initial_step(params)
        return ScaleByBacktrackingLinesearchState(
            **start,
            grad=gtree.zeros_like(params) if self.store_grad else None,
            # The count weakly typed, as optax's.
            info=BacktrackingLinesearchInfo(jnp.asarray(0), start["value"]),
        )

    def update_state(self, updates, state, params=None, **extra_args):
        name = type(self).__name__
        value, grad, value_fn, fn_kwargs = common.line_search_inputs(
            name, extra_args, params
        )

        def objective(p):
            return common.scalar_value(value_fn(p, **fn_kwargs), name)

        out = jax.eval_shape(objective, params)
        dtype = common.search_dtype(params, jnp.asarray(value), out)

        def num(x):
            return jnp.asarray(x, dtype)

        value0 = num(jnp.real(jnp.asarray(value)))
        shrink, atol = num(self.decrease_factor), num(self.atol)
        max_steps = jnp.asarray(self.max_backtracking_steps)
        slope = common.real_vdot(updates, gtree.conj(grad), dtype).astype(dtype)

        def body(s: _Search) -> _Search:
            lr = jnp.where(s.count > 0, shrink * s.learning_rate, s.learning_rate)
            trial = common.step_along(params, lr, updates)
            if self.store_grad:
                v, pullback = jax.vjp(objective, trial)
            else:
                v = objective(trial)
            v = num(v)
            error = v - (1.0 + num(self.rtol)) * value0
            error = common.nan_to_inf(error - lr * num(self.slope_rtol) * slope)
            g = s.grad
            if self.store_grad:
                # One reverse pass, only for the step that ends the search.
                g = jax.lax.cond(
                    (error <= atol) | (s.count == max_steps),
                    lambda: common.cast_tree_like(
                        pullback(jnp.ones([], out.dtype))[0], params
                    ),
                    lambda: s.grad,
                )
            out_s = _Search(lr, v, g, error, s.count + 1)
            return common.cast_tree_like(out_s, s)

        start = jnp.minimum(
            num(self.increase_factor) * num(state.learning_rate),
            num(self.max_learning_rate),
        )
        init = _Search(
            start,
            value0,
            gtree.zeros_like(params) if self.store_grad else None,
            num(jnp.inf),
            jnp.zeros([], jnp.int32),
        )
        final = jax.lax.while_loop(
            lambda s: ~(s.decrease_error <= atol) & (s.count <= max_steps),
            body,
            init,
        )
        # A non-finite objective at every trial: make no step at all.
        lr = jnp.where(jnp.isinf(final.decrease_error), 0.0, final.learning_rate)
        if self.verbose:
            # optax 0.2.8's lines, word for word (its spelling and comma too),
            # so logs and the tools that read them match. The step printed
            # is the last one tried, before a non-finite search falls to 0.
            common.print_if(
                final.decrease_error > atol,
                "INFO: optax.scale_by_backtracking_linesearch:\n"
                "Backtracking linesearch failed to find a stepsize ensuring "
                "sufficent decrease.\n"
                "Value at current params: {value},\n"
                "Slope along update direction: {slope}\n"
                "Stepsize: {stepsize}\n"
                "Decrease Error: {decrease_error}",
                value=value0,
                slope=slope,
                stepsize=final.learning_rate,
                decrease_error=final.decrease_error,
            )
            common.print_if(
                jnp.isinf(final.decrease_error),
                "Using a stepsize of 0 to avoid infinite or nan values.",
            )
        new_state = ScaleByBacktrackingLinesearchState(
            learning_rate=lr,
            value=final.value,
            grad=final.grad,
            info=BacktrackingLinesearchInfo(final.count, final.decrease_error),
        )
        return gtree.scale(lr, updates), new_state
