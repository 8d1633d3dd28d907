"""L-BFGS: equal to optax, the two-loop recursion, dtype stability, complex."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax_versions import enable_x64

import gradax


def rosenbrock(x):
    return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def logistic(params):
    features = jnp.cos(jnp.arange(24.0).reshape(12, 2) * 1.3)
    labels = jnp.sign(jnp.sin(jnp.arange(12.0) * 2.1))
    logits = features @ params["w"][:, 0] + params["w"][:, 1].sum() + params["b"]
    return jnp.mean(jax.nn.softplus(-labels * logits)) + 1e-2 * jnp.sum(
        params["w"] ** 2
    )


def quadratic(x):
    return jnp.sum(jnp.arange(1.0, 1.0 + x.size) * (x - 0.5) ** 2)


def run(lib, solver, fun, params, steps):
    """``steps`` L-BFGS iterations the way optax documents them."""
    value_and_grad = lib.value_and_grad_from_state(fun)
    state = solver.init(params)

    @jax.jit
    def step(params, state):
        value, grad = value_and_grad(params, state=state)
        updates, state = solver.update(
            grad, state, params, value=value, grad=grad, value_fn=fun
        )
        return lib.apply_updates(params, updates), state

    iterates = []
    for _ in range(steps):
        params, state = step(params, state)
        iterates.append(params)
    return iterates, state


CASES = [
    ("default", rosenbrock, jnp.array([-1.2, 1.0, -1.2, 1.0, 0.0, 0.5]), {}),
    (
        "short-memory",
        logistic,
        {"w": jnp.full((2, 2), 0.3), "b": jnp.asarray(-0.2)},
        dict(memory_size=3, scale_init_precond=False),
    ),
    (
        "backtracking",
        rosenbrock,
        jnp.zeros(4),
        dict(
            linesearch="backtracking",
        ),
    ),
]


def _options(lib, kwargs):
    if kwargs.get("linesearch") == "backtracking":
        search = lib.scale_by_backtracking_linesearch(20, store_grad=True)
        return {**kwargs, "linesearch": search}
    return kwargs


@pytest.mark.parametrize("name, fun, params, kwargs", CASES, ids=[c[0] for c in CASES])
def test_lbfgs_equals_optax(name, fun, params, kwargs):
    # In float64. XLA fuses the objective differently inside our search loop
    # (one evaluation per iteration, no lax.cond) than in optax's, and in
    # float32 1-ulp differences grow through the curvature pairs to 2e-4
    # relative in 15 steps (jaxlib 0.12.1, XLA's default optimization). In
    # float64 the same growth stays below 5e-13.
    with enable_x64(True):
        params = jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), params)
        ours, _ = run(gradax, gradax.lbfgs(**_options(gradax, kwargs)), fun, params, 15)
        theirs, _ = run(optax, optax.lbfgs(**_options(optax, kwargs)), fun, params, 15)
        for mine, ref in zip(ours, theirs, strict=True):
            jax.tree.map(
                lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12),
                mine,
                ref,
            )
        assert jax.tree.leaves(ours[-1])[0].dtype == jnp.float64
        assert float(fun(ours[-1])) < float(fun(params))


def test_lbfgs_with_schedule_and_no_search_equals_optax():
    def schedule(count):
        return 0.1 / (1.0 + count)

    x = jnp.array([2.0, -1.0, 0.5])
    iterates = []
    for lib in (gradax, optax):
        solver = lib.lbfgs(learning_rate=schedule, linesearch=None, memory_size=2)

        def step(carry, _, solver=solver, lib=lib):
            params, state = carry
            updates, state = solver.update(jax.grad(quadratic)(params), state, params)
            params = lib.apply_updates(params, updates)
            return (params, state), params

        run = jax.jit(
            lambda x, step=step, solver=solver: jax.lax.scan(
                step, (x, solver.init(x)), None, length=5
            )[1]
        )
        iterates.append(run(x))
    np.testing.assert_allclose(iterates[0], iterates[1], rtol=1e-6)


def test_scale_by_lbfgs_equals_optax_as_the_memory_wraps():
    keys = jax.random.split(jax.random.key(1), 2)
    params_seq = jax.random.normal(keys[0], (9, 5))
    grads_seq = params_seq * 2.0 + 0.3 * jax.random.normal(keys[1], (9, 5))

    def directions(tx):
        def body(state, pg):
            direction, state = tx.update(pg[1], state, pg[0])
            return state, direction

        return jax.lax.scan(body, tx.init(params_seq[0]), (params_seq, grads_seq))[1]

    ours = jax.jit(directions)(gradax.scale_by_lbfgs(memory_size=3))
    theirs = directions(optax.scale_by_lbfgs(memory_size=3))
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


def test_direction_is_the_bfgs_inverse_hessian_times_gradient():
    rng = np.random.default_rng(0)
    points = rng.normal(size=(5, 4))
    grads = points @ np.diag([1.0, 2.0, 3.0, 4.0]) + 0.1 * rng.normal(size=(5, 4))
    tx = gradax.scale_by_lbfgs(memory_size=3)
    state = tx.init(jnp.zeros(4))
    for p, g in zip(points, grads, strict=True):
        direction, state = tx.update(jnp.asarray(g), state, jnp.asarray(p))
    # The last 3 pairs, oldest first, and the textbook recursion.
    s = np.diff(points, axis=0)[-3:]
    y = np.diff(grads, axis=0)[-3:]
    gamma = s[-1] @ y[-1] / (y[-1] @ y[-1])
    inverse = gamma * np.eye(4)
    for sj, yj in zip(s, y, strict=True):
        rho = 1.0 / (yj @ sj)
        v = np.eye(4) - rho * np.outer(yj, sj)
        inverse = v.T @ inverse @ v + rho * np.outer(sj, sj)
    np.testing.assert_allclose(direction, inverse @ grads[-1], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("value_dtype", ["float32", "float64"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_five_steps_under_while_cond_scan_keep_dtypes_and_converge(dtype, value_dtype):
    with enable_x64(True):
        x0 = jnp.array([1.0, -1.0, 2.0], dtype)

        def fun(x):
            x = x.astype(value_dtype)
            return jnp.sum(jnp.array([1.0, 1.5, 2.0], value_dtype) * (x - 0.5) ** 2)

        solver = gradax.lbfgs()
        value_and_grad = gradax.value_and_grad_from_state(fun)
        state0 = solver.init(x0)

        def step(carry):
            x, state = carry
            value, grad = value_and_grad(x, state=state)
            updates, state = solver.update(
                grad, state, x, value=value, grad=grad, value_fn=fun
            )
            return gradax.apply_updates(x, updates), state

        def scanned_cond_step(carry):
            # One step inside lax.cond inside lax.scan inside the while_loop.
            k, inner = carry
            inner, _ = jax.lax.scan(
                lambda c, _: (jax.lax.cond(k >= 0, step, lambda c: c, c), None),
                inner,
                None,
                length=1,
            )
            return k + 1, inner

        _, (x, state) = jax.jit(
            lambda c: jax.lax.while_loop(lambda c: c[0] < 5, scanned_cond_step, c)
        )((0, (x0, state0)))
        assert x.dtype == x0.dtype
        avals = jax.tree.map(lambda a: (a.shape, a.dtype, a.weak_type), state0)
        assert jax.tree.map(lambda a: (a.shape, a.dtype, a.weak_type), state) == avals
        tolerance = 2e-2 if dtype in ("float16", "bfloat16") else 2e-3
        np.testing.assert_allclose(np.asarray(x, np.float64), 0.5, atol=tolerance)


def test_complex_params_match_optax_and_the_real_problem():
    matrix = jnp.array([[1, -2], [3, 4], [-4 + 2j, 5 - 3j], [-2 - 2j, 6]])

    def f_complex(z):
        return jnp.sum(jnp.abs(matrix @ z) ** 1.5)

    def f_real(x):
        return f_complex(x[0] + 1j * x[1])

    z0 = jnp.array([1 - 1j, 0 + 1j], jnp.complex64)

    def solve(lib, fun, x):
        solver = lib.lbfgs()
        value_and_grad = jax.value_and_grad(fun)

        def step(carry):
            x, state, _ = carry
            value, grad = value_and_grad(x)
            grad = lib.tree.conj(grad)
            updates, state = solver.update(
                grad, state, x, value=value, grad=grad, value_fn=fun
            )
            return lib.apply_updates(x, updates), state, lib.tree.norm(grad)

        return jax.jit(
            lambda x: jax.lax.fori_loop(
                0, 30, lambda _, c: step(c), (x, solver.init(x), jnp.asarray(1.0))
            )[0]
        )(x)

    ours = solve(gradax, f_complex, z0)
    np.testing.assert_allclose(ours, solve(optax, f_complex, z0), rtol=1e-5, atol=1e-6)
    real = solve(gradax, f_real, jnp.stack([z0.real, z0.imag]))
    np.testing.assert_allclose(ours, real[0] + 1j * real[1], atol=1e-4)
    assert float(f_complex(ours)) < 1e-4


def test_lbfgs_is_a_jit_argument_without_recompiling():
    traces = []

    @jax.jit
    def step(solver, x):
        traces.append(1)
        grad = jax.grad(quadratic)(x)
        return solver.update(grad, solver.init(x), x)[0]

    x = jnp.array([1.0, 2.0])
    first = step(gradax.lbfgs(learning_rate=0.1, linesearch=None), x)
    second = step(gradax.lbfgs(learning_rate=0.2, linesearch=None), x)
    assert len(traces) == 1
    np.testing.assert_allclose(second, 2.0 * first, rtol=1e-6)


def test_abstract_init_matches_init():
    params = {"a": jnp.ones((3, 2), jnp.bfloat16), "b": jnp.zeros(())}
    solver = gradax.lbfgs(memory_size=4)
    abstract = jax.eval_shape(
        solver.init,
        jax.tree.map(lambda p: jax.ShapeDtypeStruct(p.shape, p.dtype), params),
    )
    concrete = solver.init(params)
    assert jax.tree.map(lambda a: (a.shape, a.dtype), abstract) == jax.tree.map(
        lambda a: (a.shape, a.dtype), concrete
    )


def test_construction_and_validation():
    with pytest.raises(ValueError, match="memory_size"):
        gradax.lbfgs(memory_size=0)
    with pytest.raises(ValueError, match="memory_size"):
        gradax.scale_by_lbfgs(memory_size=-2)
    assert gradax.lbfgs() == gradax.lbfgs()
    assert "memory_size=10" in repr(gradax.lbfgs())
    assert gradax.lbfgs().linesearch == gradax.scale_by_zoom_linesearch(
        max_linesearch_steps=20, initial_guess_strategy="one"
    )
