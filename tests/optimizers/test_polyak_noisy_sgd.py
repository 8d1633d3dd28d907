"""polyak_sgd / scale_by_polyak (every update needs ``value=``) and noisy_sgd.

The conformance registry calls ``update`` without ``value``, so the checks it
would make for polyak (equal to optax, schedules, inject_hyperparams, no
recompile, state stable under control flow for every float dtype) are here.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from conformance_base import make_params, quadratic_grads, trajectory
from jax_versions import enable_x64

import gradax


def _leaves_close(a, b, rtol=1e-6, atol=1e-7):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(x, y, rtol=rtol, atol=atol)


def _constant(value):
    def schedule(count):
        return jnp.asarray(value, jnp.float32) + 0.0 * count

    return schedule


# ---------------------------------------------------------------------------
# polyak_sgd and scale_by_polyak: every update needs value=.


def _loss(params):
    return sum(jnp.sum((x - 0.5) ** 2) for x in jax.tree.leaves(params)) + 0.25


def _polyak_trajectory(tx, params, steps):
    def body(carry, _):
        p, s = carry
        value, grads = jax.value_and_grad(_loss)(p)
        u, s = tx.update(grads, s, p, value=value)
        return (gradax.apply_updates(p, u), s), u

    (params, _), updates = jax.lax.scan(body, (params, tx.init(params)), None, steps)
    return params, updates


POLYAK = [
    (gradax.polyak_sgd, optax.polyak_sgd, dict(max_learning_rate=0.3)),
    (gradax.polyak_sgd, optax.polyak_sgd, dict(scaling=0.5, f_min=0.5, eps=1e-3)),
    (gradax.polyak_sgd, optax.polyak_sgd, dict(f_min=0.4, variant="sps+")),
    (gradax.scale_by_polyak, optax.scale_by_polyak, dict(max_learning_rate=0.2)),
]


@pytest.mark.parametrize("ours, theirs, kwargs", POLYAK)
def test_polyak_equals_optax(ours, theirs, kwargs):
    params = make_params()
    mine = jax.jit(lambda p: _polyak_trajectory(ours(**kwargs), p, 15))(params)
    ref = jax.jit(lambda p: _polyak_trajectory(theirs(**kwargs), p, 15))(params)
    _leaves_close(mine, ref, rtol=1e-5, atol=1e-6)


def test_polyak_converges():
    params = make_params()
    tx = gradax.polyak_sgd(f_min=0.25)  # the loss's minimum
    final, _ = jax.jit(lambda p: _polyak_trajectory(tx, p, 100))(params)
    assert _loss(final) - 0.25 < 1e-3 * (_loss(params) - 0.25)


def test_polyak_needs_value():
    tx = gradax.polyak_sgd()
    state = tx.init(jnp.ones(2))
    with pytest.raises(TypeError, match="value"):
        tx.update(jnp.ones(2), state)


def test_polyak_zero_gradient_and_negative_gap():
    tx = gradax.scale_by_polyak(f_min=1.0, variant="sps+")
    state = tx.init(jnp.ones(2))
    updates, _ = tx.update(jnp.zeros(2), state, value=3.0)
    np.testing.assert_array_equal(updates, np.zeros(2))
    updates, _ = tx.update(jnp.ones(2), state, value=0.5)  # value below f_min
    np.testing.assert_array_equal(updates, np.zeros(2))
    updates, _ = tx.update(jnp.ones(2), state, value=2.0)  # step 1/2
    np.testing.assert_allclose(updates, [0.5, 0.5])
    plain = gradax.scale_by_polyak(f_min=1.0, max_learning_rate=10.0)
    updates, _ = plain.update(jnp.ones(2), state, value=0.5)  # negative step
    np.testing.assert_allclose(updates, [-0.25, -0.25])


def test_polyak_constant_schedule_equals_scalar():
    params = make_params()
    plain = _polyak_trajectory(gradax.polyak_sgd(scaling=0.5), params, 5)
    scheduled = _polyak_trajectory(gradax.polyak_sgd(scaling=_constant(0.5)), params, 5)
    _leaves_close(plain, scheduled)


def test_polyak_inject_hyperparams_equals_plain():
    params = make_params()
    plain = _polyak_trajectory(gradax.polyak_sgd(max_learning_rate=0.3), params, 5)
    injected = _polyak_trajectory(
        gradax.inject_hyperparams(gradax.polyak_sgd)(max_learning_rate=0.3), params, 5
    )
    _leaves_close(plain, injected, rtol=2e-5, atol=1e-6)


def test_polyak_no_recompile():
    tx = gradax.polyak_sgd()
    params = make_params()
    traces = []

    @jax.jit
    def step(state, grads, params, value):
        traces.append(None)
        return tx.update(grads, state, params, value=value)

    state = tx.init(params)
    for i in range(3):
        _, state = step(state, quadratic_grads(params, float(i)), params, float(i))
    assert len(traces) == 1


def _avals(tree):
    return jax.tree.map(lambda x: (x.shape, x.dtype, jax.typeof(x).weak_type), tree)


POLYAK_BUILDERS = {
    "polyak_sgd": lambda: gradax.polyak_sgd(max_learning_rate=0.5),
    "polyak_sgd_scheduled": lambda: gradax.polyak_sgd(scaling=_constant(0.5)),
    "scale_by_polyak": lambda: gradax.scale_by_polyak(variant="sps+"),
}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("name", list(POLYAK_BUILDERS))
def test_polyak_state_stable_under_control_flow(name, dtype):
    with enable_x64(dtype == "float64"):
        params = make_params(jnp.dtype(dtype))
        value = jnp.asarray(1.0, jnp.float32)  # another precision than params
        tx = POLYAK_BUILDERS[name]()
        grads = quadratic_grads(params, 1.0)
        state = tx.init(params)

        def step(s):
            return tx.update(grads, s, params, value=value)[1]

        updates, new_state = tx.update(grads, state, params, value=value)
        assert _avals(new_state) == _avals(state)
        assert jax.tree.map(lambda u: u.dtype, updates) == jax.tree.map(
            lambda g: g.dtype, grads
        )
        jax.lax.cond(True, step, lambda s: s, state)
        jax.lax.while_loop(
            lambda c: c[0] < 2, lambda c: (c[0] + 1, step(c[1])), (0, state)
        )
        jax.lax.scan(lambda s, _: (step(s), None), state, None, length=2)


def test_polyak_abstract_init_and_pytree():
    tx = gradax.polyak_sgd(max_learning_rate=0.5)
    params = make_params()
    abstract = jax.tree.map(lambda p: jax.ShapeDtypeStruct(p.shape, p.dtype), params)
    jax.eval_shape(tx.init, abstract)
    assert jax.tree.unflatten(*reversed(jax.tree.flatten(tx))) == tx
    with jax.transfer_guard("disallow"):
        gradax.polyak_sgd(scaling=0.1, f_min=0.2)


# ---------------------------------------------------------------------------
# noisy_sgd: the key is in the state.


def _noisy_updates(tx, steps=3):
    params = make_params()
    return trajectory(tx, params, steps)[1]


def test_noisy_sgd_is_deterministic_for_a_seed():
    first = _noisy_updates(gradax.noisy_sgd(0.1, eta=0.5, seed=7))
    again = _noisy_updates(gradax.noisy_sgd(0.1, eta=0.5, seed=7))
    _leaves_close(first, again, rtol=0, atol=0)
    other = _noisy_updates(gradax.noisy_sgd(0.1, eta=0.5, seed=8))
    assert not np.allclose(first["m"], other["m"])


def test_noisy_sgd_key_equals_seed_and_optax():
    with_seed = _noisy_updates(gradax.noisy_sgd(0.1, eta=0.5, seed=7))
    with_int_key = _noisy_updates(gradax.noisy_sgd(0.1, eta=0.5, key=7))
    with_key = _noisy_updates(gradax.noisy_sgd(0.1, 0.5, 0.55, jax.random.key(7)))
    theirs = _noisy_updates(optax.noisy_sgd(0.1, eta=0.5, key=jax.random.key(7)))
    _leaves_close(with_seed, with_int_key, rtol=0, atol=0)
    _leaves_close(with_seed, with_key, rtol=0, atol=0)
    _leaves_close(with_seed, theirs, rtol=1e-6, atol=1e-7)


def test_noisy_sgd_without_noise_is_sgd():
    ours = _noisy_updates(gradax.noisy_sgd(0.1, eta=0.0))
    _leaves_close(ours, _noisy_updates(gradax.sgd(0.1)), rtol=0, atol=0)


def test_noisy_sgd_state_carries_the_key():
    tx = gradax.noisy_sgd(0.1, seed=1)
    state = tx.init(jnp.zeros(2))
    noise_state = state[0]
    assert jax.dtypes.issubdtype(noise_state.rng_key.dtype, jax.dtypes.prng_key)
    _, new_state = tx.update(jnp.zeros(2), state)
    assert not np.array_equal(
        jax.random.key_data(new_state[0].rng_key),
        jax.random.key_data(noise_state.rng_key),
    )
