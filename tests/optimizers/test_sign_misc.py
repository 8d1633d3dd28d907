"""Checks the registry cannot make for the sign / misc optimizers.

Schedules where optax fails or differs, validation errors, edge cases (zero
gradients, scalars, complex numbers, any rank), and update rules written out
in NumPy. polyak_sgd and noisy_sgd are in test_polyak_noisy_sgd.py.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from conformance_base import make_params, trajectory

import gradax


def _leaves_close(a, b, rtol=1e-6, atol=1e-7):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(x, y, rtol=rtol, atol=atol)


def _nonscalar_params():
    """make_params without the rank-0 leaf (optax's sm3 fails on scalars)."""
    params = make_params()
    del params["s"]
    return params


def _varying(count):
    return 0.05 / (1.0 + 0.3 * count)


def _constant(value):
    def schedule(count):
        return jnp.asarray(value, jnp.float32) + 0.0 * count

    return schedule


# ---------------------------------------------------------------------------
# Schedules.


def test_fromage_schedule_equals_optax():
    # optax #1323: fromage once crashed on a schedule; 0.2.8 handles it.
    params = make_params()
    ours = jax.jit(lambda p: trajectory(gradax.fromage(_varying), p, 10))(params)
    theirs = jax.jit(lambda p: trajectory(optax.fromage(_varying), p, 10))(params)
    _leaves_close(ours, theirs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("lr", [0.05, 0.01])
def test_fromage_constant_schedule_equals_scalar(lr):
    params = make_params()
    plain = jax.jit(lambda p: trajectory(gradax.fromage(lr), p, 10))(params)
    scheduled = jax.jit(lambda p: trajectory(gradax.fromage(_constant(lr)), p, 10))(
        params
    )
    # The float32 schedule value gives factors within an ulp of the
    # float64-computed ones (no cancellation in 1/sqrt(1+lr^2) - 1).
    _leaves_close(plain, scheduled, rtol=1e-6, atol=2e-7)


def test_rprop_schedule_sets_the_initial_step_size():
    # optax's rprop fails on a schedule; gradax reads it once, in init.
    params = _nonscalar_params()
    scheduled = gradax.rprop(lambda count: 0.05 + 0.01 * count)
    plain = gradax.rprop(0.05)
    _leaves_close(trajectory(scheduled, params, 8), trajectory(plain, params, 8))
    state = scheduled.init(params)
    np.testing.assert_allclose(state[0].step_sizes["m"], 0.05)


def test_rprop_constant_schedule_matches_optax_with_the_number():
    params = _nonscalar_params()
    tx = optax.rprop(0.05)

    def fixed_optax(updates, state, params=None):
        # optax returns the previous step (optax PR #1725); take the current.
        _, state = tx.update(updates, state, params)
        return jax.tree.map(jnp.negative, state[0].prev_updates), state

    theirs = trajectory(optax.GradientTransformation(tx.init, fixed_optax), params, 8)
    ours = trajectory(gradax.rprop(_constant(0.05)), params, 8)
    _leaves_close(ours, theirs)


def test_sm3_schedule_matches_optax_scaled_by_the_schedule():
    params = _nonscalar_params()
    ours = trajectory(gradax.sm3(_varying, momentum=0.8), params, 8)
    theirs = trajectory(
        optax.chain(optax.scale_by_sm3(0.8), optax.scale_by_learning_rate(_varying)),
        params,
        8,
    )
    _leaves_close(ours, theirs, rtol=1e-5, atol=1e-6)
    constant = trajectory(gradax.sm3(_constant(0.05)), params, 8)
    _leaves_close(constant, trajectory(optax.sm3(0.05), params, 8))


def test_optimistic_adam_v2_schedule_equals_optax():
    params = make_params()
    ours = trajectory(gradax.optimistic_adam_v2(_varying, alpha=0.5), params, 8)
    theirs = trajectory(optax.optimistic_adam_v2(_varying, alpha=0.5), params, 8)
    _leaves_close(ours, theirs, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------
# Validation at construction.


@pytest.mark.parametrize(
    "factory, kwargs, name",
    [
        (gradax.adan, dict(learning_rate=0.1, b1=1.0), "b1"),
        (gradax.adan, dict(learning_rate=0.1, b3=-0.1), "b3"),
        (gradax.scale_by_adan, dict(eps_root=-1.0), "eps_root"),
        (gradax.fromage, dict(learning_rate=0.1, min_norm=-1.0), "min_norm"),
        (gradax.noisy_sgd, dict(learning_rate=0.1, eta=-0.1), "eta"),
        (gradax.noisy_sgd, dict(learning_rate=0.1, gamma=-1.0), "gamma"),
        (gradax.optimistic_gradient_descent, dict(learning_rate=0.1, beta=-1), "beta"),
        (gradax.optimistic_adam_v2, dict(learning_rate=0.1, b2=1.5), "b2"),
        (gradax.scale_by_optimistic_gradient, dict(alpha=float("nan")), "alpha"),
        (gradax.polyak_sgd, dict(max_learning_rate=-1.0), "max_learning_rate"),
        (gradax.scale_by_polyak, dict(eps=-1.0), "eps"),
        (gradax.rprop, dict(learning_rate=0.1, eta_minus=0.0), "eta_minus"),
        (gradax.rprop, dict(learning_rate=0.1, eta_plus=0.9), "eta_plus"),
        (gradax.scale_by_rprop, dict(learning_rate=-0.1), "learning_rate"),
        (gradax.rprop, dict(learning_rate=0.1, max_step_size=0.0), "max_step_size"),
        (gradax.signum, dict(learning_rate=0.1, beta=1.5), "beta"),
        (gradax.sm3, dict(learning_rate=0.1, momentum=1.0), "momentum"),
        (gradax.scale_by_sm3, dict(b2=1.1), "b2"),
        (gradax.scale_by_distance_over_gradients, dict(reps_rel=0.0), "reps_rel"),
        (gradax.normalize_by_update_norm, dict(eps=-1e-3), "eps"),
    ],
)
def test_invalid_hyperparameter_is_named(factory, kwargs, name):
    with pytest.raises(ValueError, match=name):
        factory(**kwargs)


def test_other_construction_errors():
    with pytest.raises(ValueError, match="min_step_size must be <= max_step_size"):
        gradax.rprop(0.1, min_step_size=2.0, max_step_size=1.0)
    with pytest.raises(ValueError, match="variant"):
        gradax.polyak_sgd(variant="sps++")
    with pytest.raises(ValueError, match="variant"):
        gradax.scale_by_polyak(variant="other")
    with pytest.raises(ValueError, match="key or seed"):
        gradax.noisy_sgd(0.1, key=1, seed=2)
    with pytest.raises(ValueError, match="seed"):
        gradax.noisy_sgd(0.1, seed=1.5)
    with pytest.raises(TypeError):
        gradax.optimistic_adam_v2(0.1, 1.0)  # alpha is keyword-only, as in optax


# ---------------------------------------------------------------------------
# Sign methods and rprop: zero gradients and sign changes.


def test_sign_of_zero_is_zero():
    g = jnp.array([0.0, -0.0, 2.0, -3.0])
    for tx in (gradax.sign_sgd(0.1), gradax.signum(0.1)):
        updates, _ = tx.update(g, tx.init(g))
        np.testing.assert_array_equal(updates, np.float32([0.0, 0.0, -0.1, 0.1]))
    tx = gradax.scale_by_sign()
    updates, _ = tx.update(jnp.zeros(3), tx.init(None))
    np.testing.assert_array_equal(updates, np.zeros(3))


def test_signum_keeps_the_sign_of_its_average():
    tx = gradax.signum(1.0, beta=0.9)
    state = tx.init(jnp.zeros(2))
    _, state = tx.update(jnp.array([1.0, 1.0]), state)
    # The average is still positive after a small opposite gradient.
    updates, _ = tx.update(jnp.array([-0.5, -20.0]), state)
    np.testing.assert_array_equal(updates, [-1.0, 1.0])


def _rprop_numpy(grads, lr, eta_minus, eta_plus, low, high):
    """iRprop- written out element by element."""
    size = np.full(grads[0].shape, lr, np.float64)
    last = np.zeros_like(size)
    out = []
    for g in grads:
        step = np.zeros_like(size)
        for i in np.ndindex(g.shape):
            a = g[i] * last[i]
            if a > 0:
                size[i] = min(max(size[i] * eta_plus, low), high)
            elif a < 0:
                size[i] = min(max(size[i] * eta_minus, low), high)
            step[i] = 0.0 if a < 0 else size[i] * np.sign(g[i])
        last = step
        out.append(-step)
    return out


def test_rprop_matches_numpy_with_zeros_and_sign_flips():
    rng = np.random.default_rng(0)
    grads = [rng.choice([-1.0, 0.0, 0.5, 2.0], size=(3, 4)) for _ in range(12)]
    grads[3] = np.zeros((3, 4))
    kwargs = dict(eta_minus=0.4, eta_plus=1.3, min_step_size=0.02, max_step_size=0.3)
    expected = _rprop_numpy(grads, 0.1, 0.4, 1.3, 0.02, 0.3)
    tx = gradax.rprop(0.1, **kwargs)
    state = tx.init(jnp.zeros((3, 4)))
    step = jax.jit(tx.update)
    for g, want in zip(grads, expected, strict=True):
        updates, state = step(jnp.asarray(g, jnp.float32), state)
        np.testing.assert_allclose(updates, want, rtol=1e-6)


def test_rprop_zero_gradient_keeps_step_sizes():
    tx = gradax.scale_by_rprop(0.1)
    state = tx.init(jnp.zeros(3))
    _, state = tx.update(jnp.array([1.0, -1.0, 1.0]), state)
    updates, state = tx.update(jnp.zeros(3), state)
    np.testing.assert_array_equal(updates, np.zeros(3))
    np.testing.assert_allclose(state.step_sizes, [0.1, 0.1, 0.1])
    # After a zero gradient the next step starts afresh at the same size.
    updates, state = tx.update(jnp.array([1.0, 1.0, -1.0]), state)
    np.testing.assert_allclose(updates, [0.1, 0.1, -0.1])


def test_rprop_rejects_complex_params():
    with pytest.raises(ValueError, match="complex"):
        gradax.rprop(0.1).init({"a": jnp.ones(2, jnp.complex64)})


# ---------------------------------------------------------------------------
# SM3 on every rank, scalars and complex numbers.


@pytest.mark.parametrize("shape", [(5,), (4, 3), (2, 3, 4), (2, 1, 3, 2)])
def test_sm3_any_rank_equals_optax(shape):
    params = {"x": jax.random.normal(jax.random.key(2), shape)}
    for ours, theirs in [
        (gradax.sm3(0.1), optax.sm3(0.1)),
        (gradax.scale_by_sm3(0.5, 0.9), optax.scale_by_sm3(0.5, 0.9)),
    ]:
        _leaves_close(
            trajectory(ours, params, 6), trajectory(theirs, params, 6), rtol=1e-5
        )


def test_sm3_accumulator_shapes():
    params = {"s": jnp.zeros(()), "v": jnp.zeros(5), "t": jnp.zeros((2, 3, 4))}
    state = gradax.scale_by_sm3().init(params)
    assert [a.shape for a in state.mu["s"]] == [()]
    assert [a.shape for a in state.mu["v"]] == [(5,)]
    assert [a.shape for a in state.mu["t"]] == [(2,), (3,), (4,)]


def test_sm3_scalar_behaves_like_a_one_element_vector():
    scalar = {"a": jnp.asarray(0.7)}
    vector = {"a": jnp.asarray([0.7])}
    ours = trajectory(gradax.sm3(0.1), scalar, 6)
    as_vector = trajectory(gradax.sm3(0.1), vector, 6)
    _leaves_close(
        jax.tree.map(jnp.ravel, ours), jax.tree.map(jnp.ravel, as_vector), rtol=0
    )
    assert ours[0]["a"].shape == ()


def test_sm3_complex_with_zero_imaginary_part_equals_real():
    real = {"m": jax.random.normal(jax.random.key(3), (3, 4))}
    cplx = jax.tree.map(lambda x: x.astype(jnp.complex64), real)
    tx = gradax.sm3(0.1)
    state = tx.init(cplx)
    assert state[0].mu["m"][0].dtype == jnp.float32
    _leaves_close(
        trajectory(tx, real, 5),
        jax.tree.map(jnp.real, trajectory(tx, cplx, 5)),
        rtol=1e-6,
    )


def test_sm3_numpy_rule_on_a_matrix():
    rng = np.random.default_rng(1)
    grads = [rng.normal(size=(3, 2)) for _ in range(4)]
    rows, cols, nu = np.zeros(3), np.zeros(2), np.zeros((3, 2))
    tx = gradax.scale_by_sm3(b1=0.5)
    state = tx.init(jnp.zeros((3, 2)))
    for g in grads:
        accum = g**2 + np.minimum(rows[:, None], cols[None, :])
        nu = 0.5 * g / np.sqrt(accum + 1e-8) + 0.5 * nu
        rows, cols = accum.max(axis=1), accum.max(axis=0)
        updates, state = tx.update(jnp.asarray(g, jnp.float32), state)
        np.testing.assert_allclose(updates, nu, rtol=1e-5)
        np.testing.assert_allclose(state.mu[0], rows, rtol=1e-5)
        np.testing.assert_allclose(state.mu[1], cols, rtol=1e-5)


# ---------------------------------------------------------------------------
# DoG, normalize_by_update_norm, optimistic, fromage.


def test_distance_over_gradients_scalar_keeps_shape_and_needs_params():
    params = {"s": jnp.asarray(1.5), "v": jnp.ones(3)}
    tx = gradax.scale_by_distance_over_gradients()
    state = tx.init(params)
    updates, _ = tx.update(params, state, params)
    assert updates["s"].shape == ()
    with pytest.raises(ValueError, match="params"):
        tx.update(params, state)


def test_distance_over_gradients_rule():
    p0 = jnp.array([3.0, 4.0])
    tx = gradax.scale_by_distance_over_gradients(reps_rel=0.1, eps=0.0)
    state = tx.init(p0)
    u1, state = tx.update(jnp.array([0.0, 2.0]), state, p0)
    np.testing.assert_allclose(u1, [0.0, 0.6], rtol=1e-6)  # r=0.6, G=4
    p1 = jnp.array([3.0, 6.0])  # moved by 2 > 0.6
    u2, state = tx.update(jnp.array([1.0, 0.0]), state, p1)
    np.testing.assert_allclose(u2, [2.0 / np.sqrt(5.0), 0.0], rtol=1e-6)


def test_distance_over_gradients_complex():
    params = {"c": jnp.array([1.0 + 1.0j, 2.0 - 1.0j])}
    tx = gradax.scale_by_distance_over_gradients()
    state = tx.init(params)
    assert state.init_params["c"].dtype == jnp.complex64
    assert state.max_dist["c"].dtype == jnp.float32
    updates, _ = tx.update(params, state, params)
    assert updates["c"].dtype == jnp.complex64


def test_normalize_by_update_norm_rule():
    g = {"a": jnp.array([3.0]), "b": jnp.array([[4.0, 0.0]])}
    tx = gradax.normalize_by_update_norm(scale_factor=2.0, eps=1.0)
    updates, _ = tx.update(g, tx.init(g))
    np.testing.assert_allclose(updates["a"], [1.0])  # 2 * 3 / (5 + 1)
    np.testing.assert_allclose(updates["b"], [[4.0 / 3.0, 0.0]])


def test_optimistic_gradient_rule():
    tx = gradax.scale_by_optimistic_gradient(alpha=0.5, beta=2.0)
    state = tx.init(jnp.zeros(2))
    g1, g2 = jnp.array([1.0, -2.0]), jnp.array([3.0, 1.0])
    u1, state = tx.update(g1, state)
    np.testing.assert_allclose(u1, 0.5 * g1)
    u2, state = tx.update(g2, state)
    np.testing.assert_allclose(u2, 2.5 * g2 - 2.0 * g1)


def test_optimistic_gradient_descent_solves_a_bilinear_game():
    # min_x max_y x*y: plain simultaneous gradient descent-ascent spirals out,
    # the optimistic step converges to the saddle point (0, 0).
    def flip(grads):
        return {"x": grads["x"], "y": -grads["y"]}

    def run(tx):
        params = {"x": jnp.asarray(1.0), "y": jnp.asarray(1.0)}
        state = tx.init(params)

        def body(carry, _):
            params, state = carry
            grads = jax.grad(lambda p: p["x"] * p["y"])(params)
            updates, state = tx.update(flip(grads), state)
            return (gradax.apply_updates(params, updates), state), None

        (params, _), _ = jax.lax.scan(body, (params, state), None, 300)
        return float(jnp.hypot(params["x"], params["y"]))

    assert run(gradax.optimistic_gradient_descent(0.2)) < 0.01
    assert run(gradax.sgd(0.2)) > 10.0


def test_fromage_keeps_norm_for_orthogonal_gradients():
    # Fromage scales the gradient to the parameter's norm and divides by
    # sqrt(1 + lr^2): for an orthogonal gradient the norm is unchanged.
    params = {"w": jnp.array([[3.0, 0.0], [0.0, 4.0]])}
    grads = {"w": jnp.array([[0.0, 1.0], [-1.0, 0.0]])}
    tx = gradax.fromage(0.2)
    updates, _ = tx.update(grads, tx.init(params), params)
    new = gradax.apply_updates(params, updates)
    np.testing.assert_allclose(jnp.linalg.norm(new["w"]), 5.0, rtol=1e-6)


def test_fromage_needs_params():
    tx = gradax.fromage(0.1)
    with pytest.raises(ValueError, match="params"):
        tx.update(jnp.ones(2), tx.init(jnp.ones(2)))
