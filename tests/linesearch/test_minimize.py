"""gradax.minimize: results, caching, scipy parity, and clear failures."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize
from jax_versions import enable_x64

import gradax
from gradax import MinimizeStatus


def rosenbrock(x):
    return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def logistic(w, features, labels):
    margins = labels * (features @ w)
    return jnp.mean(jax.nn.softplus(-margins)) + 5e-3 * jnp.sum(w * w)


def logistic_data(samples=200, features=20):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(samples, features)) * np.exp(rng.normal(size=features))
    y = np.where(
        rng.random(samples) < 1 / (1 + np.exp(-x @ rng.normal(size=features))),
        1.0,
        -1.0,
    )
    return x, y


def tree_objective(p):
    return (
        jnp.sum((p["a"] - 1.0) ** 2)
        + 2.0 * (p["b"] + 0.5) ** 2
        + jnp.sum((p["c"][0].astype(jnp.float32) - 3.0) ** 2)
    )


def test_result_on_a_tree():
    x0 = {
        "a": jnp.zeros((2, 3)),
        "b": 0.0,
        "c": (jnp.ones(4, jnp.bfloat16),),
    }
    result = gradax.minimize(tree_objective, x0, tol=1e-4)
    assert bool(result.converged)
    assert int(result.status) == MinimizeStatus.CONVERGED
    assert "converged" in result.message
    assert float(result.grad_norm) <= 1e-4
    assert 0 < int(result.steps) <= int(result.num_fun_evals)
    assert result.params["c"][0].dtype == jnp.bfloat16
    assert result.params["b"].dtype == jnp.float32
    np.testing.assert_allclose(result.params["a"], 1.0, atol=1e-4)
    np.testing.assert_allclose(result.params["b"], -0.5, atol=1e-4)
    np.testing.assert_allclose(np.float32(result.params["c"][0]), 3.0, atol=2e-2)
    np.testing.assert_allclose(result.value, tree_objective(result.params), rtol=1e-5)


def test_second_call_does_not_recompile():
    traces = []

    def fun(w, features, labels):
        traces.append(1)
        return logistic(w, features, labels)

    x, y = logistic_data(40, 5)
    first = gradax.minimize(fun, jnp.zeros(5), args=(x, y), tol=1e-4)
    count = len(traces)
    second = gradax.minimize(
        fun, jnp.ones(5), args=(x[::-1], y[::-1]), tol=1e-6, max_steps=50,
        memory_size=10,
    )  # fmt: skip
    assert len(traces) == count
    assert bool(first.converged) and bool(second.converged)
    np.testing.assert_allclose(first.value, second.value, rtol=1e-5)


@pytest.fixture
def x64():
    with enable_x64(True):
        yield


@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("problem", ["rosenbrock", "logistic"])
def test_matches_scipy_lbfgsb(problem):
    if problem == "rosenbrock":
        fun, args, x0 = rosenbrock, (), np.tile([-1.2, 1.0], 5)
    else:
        fun, args, x0 = logistic, logistic_data(), np.zeros(20)
    value_and_grad = jax.jit(jax.value_and_grad(fun))
    reference = scipy.optimize.minimize(
        lambda x: [np.asarray(v) for v in value_and_grad(x, *args)],
        x0,
        jac=True,
        method="L-BFGS-B",
    )
    assert reference.success
    result = gradax.minimize(fun, jnp.asarray(x0), args=args, tol=1e-5)
    assert bool(result.converged), result.message
    assert result.params.dtype == jnp.float64
    assert abs(float(result.value) - reference.fun) <= 1e-5
    assert int(result.steps) <= 1.5 * reference.nit + 10


@pytest.mark.usefixtures("x64")
def test_max_steps_is_a_clear_status():
    result = gradax.minimize(rosenbrock, jnp.zeros(10), max_steps=3)
    assert int(result.status) == MinimizeStatus.MAX_STEPS
    assert int(result.steps) == 3
    assert not bool(result.converged)
    assert float(result.value) < float(rosenbrock(jnp.zeros(10)))
    assert "max_steps" in result.message


@pytest.mark.parametrize(
    "fun",
    [
        lambda x: x**2,
        lambda x: {"value": jnp.sum(x)},
        lambda x: jnp.sum(x).astype(jnp.int32),
        lambda x: jnp.sum(x) * (1.0 + 1.0j),
    ],
    ids=["vector", "dict", "integer", "complex"],
)
def test_objective_that_is_not_a_real_scalar(fun):
    result = gradax.minimize(fun, jnp.ones(3))
    assert int(result.status) == MinimizeStatus.INVALID_OBJECTIVE
    assert not bool(result.converged)
    assert int(result.num_fun_evals) == 0
    assert "real floating-point number" in result.message


def test_objective_of_shape_one_is_accepted():
    result = gradax.minimize(lambda x: jnp.sum((x - 2.0) ** 2)[None], jnp.zeros(2))
    assert bool(result.converged)
    assert result.value.shape == ()


def test_nan_at_the_start_is_a_clear_status():
    x0 = jnp.array([1.0, jnp.nan])
    result = gradax.minimize(lambda x: jnp.sum(x**2), x0)
    assert int(result.status) == MinimizeStatus.NONFINITE
    assert int(result.steps) == 0
    assert "not finite" in result.message
    np.testing.assert_array_equal(result.params, x0)


@jax.custom_vjp
def wrong_gradient(x):
    return jnp.sum(x**2)


wrong_gradient.defvjp(
    lambda x: (wrong_gradient(x), x), lambda x, g: (-2.0 * g * x,)
)  # the sign is wrong: L-BFGS walks uphill


def nan_off_start(x):
    return jnp.where(jnp.all(x == 1.0), 0.0, jnp.nan) + jnp.sum(x)


@pytest.mark.parametrize("fun", [wrong_gradient, nan_off_start])
def test_line_search_without_progress_is_a_clear_status(fun):
    x0 = jnp.ones(3)
    result = gradax.minimize(fun, x0)
    assert int(result.status) == MinimizeStatus.LINESEARCH_FAILED
    assert "line search" in result.message
    assert not bool(result.converged)
    # No garbage: the answer is the point of lowest value found.
    np.testing.assert_array_equal(result.params, x0)
    assert float(result.value) == float(fun(x0))
    assert int(result.num_fun_evals) <= 100


def test_complex_parameters_match_the_real_problem():
    target = jnp.array([1.0 + 2.0j, -0.5j, 3.0 + 0.0j])
    weights = jnp.array([1.0, 2.0, 0.5])

    def f_complex(z):
        return jnp.sum(weights * jnp.abs(z - target) ** 2) + 0.1 * jnp.sum(
            jnp.abs(z) ** 4
        )

    def f_real(x):
        return f_complex(x[0] + 1j * x[1])

    z = gradax.minimize(f_complex, jnp.zeros(3, jnp.complex64), tol=1e-5)
    x = gradax.minimize(f_real, jnp.zeros((2, 3)), tol=1e-5)
    assert bool(z.converged) and bool(x.converged)
    assert z.params.dtype == jnp.complex64
    np.testing.assert_allclose(z.params, x.params[0] + 1j * x.params[1], atol=1e-4)


def test_options_reach_lbfgs():
    def fun(x):
        return jnp.sum(jnp.arange(1.0, 6.0) * (x - 1.0) ** 2) + jnp.sum(x**4)

    # An Armijo-only search cannot resolve float32 decreases below 1e-7 of
    # the value, so the tolerance is looser than the default.
    search = gradax.scale_by_backtracking_linesearch(30)  # keeps no gradient
    result = gradax.minimize(
        fun, jnp.zeros(5), tol=1e-3, memory_size=3, linesearch=search
    )
    assert bool(result.converged), result.message
    reference = gradax.minimize(fun, jnp.zeros(5))
    np.testing.assert_allclose(result.params, reference.params, atol=1e-3)


def test_each_call_gets_the_solver_of_its_options():
    # minimize builds the solver of each distinct set of options once and
    # reuses it: another value must not get the cached solver, and an
    # unhashable array or an int of the same value must work as well.
    def fun(x):
        return jnp.sum(jnp.arange(1.0, 4.0) * (x - 1.0) ** 2)

    def one_step(learning_rate):
        result = gradax.minimize(
            fun, jnp.zeros(3), max_steps=1, linesearch=None,
            learning_rate=learning_rate,
        )  # fmt: skip
        return np.asarray(result.params)

    half = one_step(0.5)
    assert np.all(half > 0.0)
    np.testing.assert_array_equal(one_step(jnp.asarray(0.5)), half)
    np.testing.assert_allclose(one_step(1), 2.0 * half, rtol=1e-6)
    np.testing.assert_allclose(one_step(1.0), 2.0 * half, rtol=1e-6)
    np.testing.assert_array_equal(one_step(0.5), half)


def test_bad_arguments_raise_at_once():
    with pytest.raises(ValueError, match="method"):
        gradax.minimize(rosenbrock, jnp.zeros(2), method="bfgs")
    with pytest.raises(ValueError, match="tol"):
        gradax.minimize(rosenbrock, jnp.zeros(2), tol=-1.0)
    with pytest.raises(ValueError, match="max_steps"):
        gradax.minimize(rosenbrock, jnp.zeros(2), max_steps=-1)
    with pytest.raises(TypeError, match="memmory_size"):
        gradax.minimize(rosenbrock, jnp.zeros(2), memmory_size=3)
