"""The zoom and backtracking line searches and value_and_grad_from_state."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax_versions import enable_x64

import gradax


def rosenbrock(x):
    return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def steep(x):
    """Needs a tiny step along the negative gradient: the search must zoom."""
    return jnp.sum(jnp.exp(3.0 * x)) + jnp.sum(x**4)


def flat(x):
    """Needs a step far above 1: the search must grow the step first."""
    return 1e-3 * jnp.sum((x - 5.0) ** 2)


PROBLEMS = {
    "rosenbrock": (rosenbrock, jnp.array([-1.2, 1.0, -0.5, 0.8])),
    "steep": (steep, jnp.array([1.0, 2.0, -1.0])),
    "flat": (flat, jnp.zeros(3)),
}


def descend(lib, tx, fun, x, steps, **data):
    """``steps`` of ``chain(sgd(1), tx)``; returns the iterates and the state."""
    solver = lib.chain(lib.sgd(1.0), tx)
    state = solver.init(x)

    @jax.jit
    def step(x, state):
        value, grad = jax.value_and_grad(fun)(x, **data)
        updates, state = solver.update(
            grad, state, x, value=value, grad=grad, value_fn=fun, **data
        )
        return lib.apply_updates(x, updates), state

    iterates = []
    for _ in range(steps):
        x, state = step(x, state)
        iterates.append(x)
    return jnp.stack(iterates), state


# Each configuration on the problem that exercises it (compiling dominates the
# cost of these tests, so the matrix is not a full product).
ZOOM_CASES = [
    ("rosenbrock", dict(max_linesearch_steps=15)),
    ("steep", dict(max_linesearch_steps=15, initial_guess_strategy="one")),
    ("steep", dict(max_linesearch_steps=4, stepsize_precision=1e-2)),
    ("flat", dict(max_linesearch_steps=15, max_learning_rate=20.0)),
    ("flat", dict(max_linesearch_steps=15, approx_dec_rtol=None, curv_rtol=jnp.inf)),
]


@pytest.mark.parametrize("problem, kwargs", ZOOM_CASES, ids=str)
def test_zoom_equals_optax(problem, kwargs):
    fun, x0 = PROBLEMS[problem]
    ours, state = descend(gradax, gradax.scale_by_zoom_linesearch(**kwargs), fun, x0, 6)
    theirs, their_state = descend(
        optax, optax.scale_by_zoom_linesearch(**kwargs), fun, x0, 6
    )
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(
        state[1].learning_rate, their_state[1].learning_rate, rtol=1e-6
    )
    assert int(state[1].info.num_linesearch_steps) == int(
        their_state[1].info.num_linesearch_steps
    )


BACKTRACKING_CASES = [
    ("rosenbrock", dict(max_backtracking_steps=15, store_grad=True)),
    (
        "steep",
        dict(
            max_backtracking_steps=6,
            decrease_factor=0.5,
            increase_factor=1.0,
            atol=1e-3,
            rtol=1e-4,
            max_learning_rate=2.0,
        ),
    ),
]


@pytest.mark.parametrize("problem, kwargs", BACKTRACKING_CASES, ids=str)
def test_backtracking_equals_optax(problem, kwargs):
    fun, x0 = PROBLEMS[problem]
    ours, state = descend(
        gradax, gradax.scale_by_backtracking_linesearch(**kwargs), fun, x0, 6
    )
    theirs, their_state = descend(
        optax, optax.scale_by_backtracking_linesearch(**kwargs), fun, x0, 6
    )
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(state[1].value, their_state[1].value, rtol=1e-6)
    if kwargs.get("store_grad"):
        np.testing.assert_allclose(state[1].grad, their_state[1].grad, rtol=1e-5)
    else:
        assert state[1].grad is None


def _one_search(tx, fun, x, direction):
    value, grad = jax.value_and_grad(fun)(x)
    updates, state = tx.update(
        direction, tx.init(x), x, value=value, grad=grad, value_fn=fun
    )
    return float(updates @ direction / (direction @ direction)), state


def test_zoom_step_meets_strong_wolfe():
    fun = steep
    x = jnp.array([1.0, 2.0, -1.0])
    direction = -jax.grad(fun)(x)
    c1, c2 = 1e-4, 0.5
    tx = gradax.scale_by_zoom_linesearch(
        30, slope_rtol=c1, curv_rtol=c2, approx_dec_rtol=None
    )
    eta, state = _one_search(tx, fun, x, direction)
    assert float(state.info.decrease_error) == 0.0
    assert float(state.info.curvature_error) == 0.0
    slope0 = float(jax.grad(fun)(x) @ direction)
    new = x + eta * direction
    assert float(fun(new)) <= float(fun(x)) + c1 * eta * slope0
    assert abs(float(jax.grad(fun)(new) @ direction)) <= c2 * abs(slope0)
    # The state keeps the value and gradient at the accepted point.
    np.testing.assert_allclose(state.value, fun(new), rtol=1e-6)
    np.testing.assert_allclose(state.grad, jax.grad(fun)(new), rtol=1e-5)


def test_zoom_ascent_direction_reports_failure():
    x = jnp.array([1.0, -2.0])
    fun = lambda x: jnp.sum(x**2)  # noqa: E731
    _, state = _one_search(
        gradax.scale_by_zoom_linesearch(10), fun, x, jax.grad(fun)(x)
    )
    assert float(state.info.decrease_error) > 0.0
    assert int(state.info.num_linesearch_steps) == 10


def test_searches_make_no_step_where_the_objective_is_not_finite():
    x = jnp.array([1.0, 2.0])

    def fun(y):
        return jnp.where(jnp.all(y == x), 1.0, jnp.nan) + jnp.sum(y)

    direction = -jnp.ones(2)
    for tx in (
        gradax.scale_by_zoom_linesearch(8),
        gradax.scale_by_backtracking_linesearch(8),
    ):
        eta, state = _one_search(tx, fun, x, direction)
        assert eta == 0.0
        assert np.isinf(float(state.info.decrease_error))


def test_extra_args_reach_value_fn_and_unknown_ones_are_refused():
    data = dict(a=jnp.array([1.0, 2.0]), b=jnp.array(3.0))

    def fun(x, a, b):
        return jnp.sum((a * x - b) ** 2)

    x = jnp.zeros(2)
    value, grad = jax.value_and_grad(fun)(x, **data)
    line_search = dict(value=value, grad=grad, value_fn=fun)
    tx = gradax.scale_by_backtracking_linesearch(10)
    updates, _ = tx.update(-grad, tx.init(x), x, **line_search, **data)
    assert float(fun(x + updates, **data)) < float(value)
    ours, _ = descend(gradax, gradax.scale_by_zoom_linesearch(10), fun, x, 3, **data)
    theirs, _ = descend(optax, optax.scale_by_zoom_linesearch(10), fun, x, 3, **data)
    np.testing.assert_allclose(ours, theirs, rtol=1e-6)
    # As optax: a keyword value_fn does not take (a misspelt batch
    # argument) is an error naming it.
    for tx in (
        gradax.scale_by_backtracking_linesearch(10),
        gradax.scale_by_zoom_linesearch(10),
    ):
        with pytest.raises(TypeError, match="Unexpected keyword arguments.*unrelated"):
            tx.update(
                -grad, tx.init(x), x, **line_search, unrelated=jnp.ones(3), **data
            )


def test_missing_line_search_arguments_are_named():
    x = jnp.ones(2)
    for tx in (
        gradax.scale_by_zoom_linesearch(5),
        gradax.scale_by_backtracking_linesearch(5),
    ):
        with pytest.raises(TypeError, match="value_fn"):
            tx.update(x, tx.init(x), x, value=1.0, grad=x)


@pytest.mark.parametrize(
    "build, name",
    [
        (
            lambda: gradax.scale_by_zoom_linesearch(5, initial_guess_strategy="x"),
            "initial_guess_strategy",
        ),  # noqa: E501
        (lambda: gradax.scale_by_zoom_linesearch(-1), "max_linesearch_steps"),
        (lambda: gradax.scale_by_zoom_linesearch(5, slope_rtol=-0.1), "slope_rtol"),
        (
            lambda: gradax.scale_by_backtracking_linesearch(5, decrease_factor=1.5),
            "decrease_factor",
        ),  # noqa: E501
        (
            lambda: gradax.scale_by_backtracking_linesearch(5, max_learning_rate=0.0),
            "max_learning_rate",
        ),  # noqa: E501
    ],
)
def test_invalid_arguments_are_named(build, name):
    with pytest.raises(ValueError, match=name):
        build()


@pytest.mark.parametrize(
    "dtype, value_dtype", [("float16", "float32"), ("float32", "float64")]
)
@pytest.mark.parametrize("kind", ["zoom", "backtracking"])
def test_search_state_is_stable_with_another_value_dtype(dtype, value_dtype, kind):
    # lbfgs' tests cover the whole matrix; here each search on its own.
    with enable_x64(True):
        x = jnp.array([1.0, -2.0, 0.5], dtype)

        def fun(y):
            return jnp.sum((y.astype(value_dtype) - 0.25) ** 2)

        if kind == "zoom":
            tx = gradax.scale_by_zoom_linesearch(10)
        else:
            tx = gradax.scale_by_backtracking_linesearch(10, store_grad=True)
        state = tx.init(x)
        avals = jax.tree.map(lambda a: (a.shape, a.dtype), state)

        def step(carry):
            y, s, k = carry
            value, grad = gradax.value_and_grad_from_state(fun)(y, state=s)
            u, s = tx.update(-grad, s, y, value=value, grad=grad, value_fn=fun)
            return gradax.apply_updates(y, u), s, k + 1

        y, s, _ = jax.lax.while_loop(lambda c: c[2] < 5, step, (x, state, 0))
        assert y.dtype == x.dtype
        assert jax.tree.map(lambda a: (a.shape, a.dtype), s) == avals
        # At least the default float (float64 with x64 on).
        assert s.value.dtype == jnp.float64
        assert float(fun(y)) < 0.05 * float(fun(x))


def test_value_and_grad_from_state():
    fun = lambda x, scale: scale * jnp.sum(x**2)  # noqa: E731
    tx = gradax.scale_by_zoom_linesearch(5)
    x = jnp.array([1.0, 2.0])
    value_and_grad = gradax.value_and_grad_from_state(fun)
    state = tx.init(x)
    # After init the stored value is inf: both are computed.
    value, grad = value_and_grad(x, 2.0, state=state)
    assert float(value) == 10.0
    np.testing.assert_allclose(grad, [4.0, 8.0])
    # A finite stored value is returned as is, without calling fun.
    stored = state._replace(value=jnp.asarray(7.0), grad=jnp.array([1.0, 1.0]))
    value, grad = value_and_grad(x, 2.0, state=stored)
    assert float(value) == 7.0
    np.testing.assert_allclose(grad, [1.0, 1.0])
    no_grad = gradax.scale_by_backtracking_linesearch(5)
    with pytest.raises(ValueError, match="grad"):
        value_and_grad(x, 2.0, state=no_grad.init(x))


_NUMBER = re.compile(r"-?(?:\d+\.?\d*(?:e[-+]?\d+)?|inf|nan)")

# Failed searches of each kind optax 0.2.8 reports: no step with sufficient
# decrease along an ascent direction, a step with sufficient decrease but
# too much curvature (the safe step), and the largest step reached before
# any bracket.
VERBOSE_CASES = {
    "ascent": (rosenbrock, jnp.array([-1.2, 1.0]), 0.1, {"max_linesearch_steps": 3}),
    "safe_step": (
        lambda x: jnp.sum(x**2),
        jnp.array([1.0, -2.0, 3.0]),
        -0.01,
        {"max_linesearch_steps": 1},
    ),
    "no_interval": (
        rosenbrock,
        jnp.array([-1.2, 1.0]),
        -1e-4,
        {"max_linesearch_steps": 10, "max_learning_rate": 0.5},
    ),
}


def _printed(lib, case, capfd):
    fun, x, scale, kwargs = VERBOSE_CASES[case]
    tx = lib.scale_by_zoom_linesearch(verbose=True, **kwargs)
    value, grad = jax.value_and_grad(fun)(x)
    capfd.readouterr()
    tx.update(scale * grad, tx.init(x), x, value=value, grad=grad, value_fn=fun)
    jax.effects_barrier()
    return capfd.readouterr().out


@pytest.mark.parametrize("case", sorted(VERBOSE_CASES))
def test_verbose_prints_optax_lines(case, capfd):
    ours, theirs = _printed(gradax, case, capfd), _printed(optax, case, capfd)
    assert theirs  # each case is a failure optax reports
    # The same lines, word for word, with the numbers in the same places.
    assert _NUMBER.sub("#", ours) == _NUMBER.sub("#", theirs)
    got = np.array([float(n) for n in _NUMBER.findall(ours)])
    want = np.array([float(n) for n in _NUMBER.findall(theirs)])
    # The numbers are the search's: values, slopes (dot products over at most
    # 3 float32 terms) and the curvature error |slope| - c2 |slope0|, whose
    # rounding is absolute, at the scale of the slopes. 8 float32 ulps of the
    # largest finite number printed bound it.
    scale = np.max(np.abs(want[np.isfinite(want)]))
    eps = float(np.finfo(np.float32).eps)
    np.testing.assert_allclose(got, want, rtol=8 * eps, atol=8 * eps * scale)


def test_backtracking_verbose_prints_optax_lines(capfd):
    x = jnp.array([-1.2, 1.0])
    value, grad = jax.value_and_grad(rosenbrock)(x)
    out = []
    for lib in (gradax, optax):
        tx = lib.scale_by_backtracking_linesearch(2, verbose=True)
        capfd.readouterr()
        tx.update(grad, tx.init(x), x, value=value, grad=grad, value_fn=rosenbrock)
        jax.effects_barrier()
        out.append(capfd.readouterr().out)
    assert "failed to find a stepsize" in out[1]
    # Both evaluate the same float32 expressions on a 2-vector for the
    # numbers printed; the text is the same word for word.
    assert out[0] == out[1]
