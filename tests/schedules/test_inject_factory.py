"""inject_hyperparams calls its factory as optax does: with values, in init and update.

levanter's optimizer factories compute with their hyperparameters
(``scale(-learning_rate)``, ``learning_rate / max_lr``); a factory handed the
schedule object instead of its value fails on that arithmetic.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradax
from gradax import HyperparameterError
from gradax.declare import HyperparameterWarning


def _levanter_like(lib):
    """A factory in levanter's manner: arithmetic on the injected values."""

    def factory(learning_rate, weight_decay, max_lr):
        return lib.chain(
            lib.scale_by_adam(b1=0.9, b2=0.95),
            lib.add_decayed_weights(weight_decay * learning_rate / max_lr),
            lib.scale(-learning_rate),
        )

    return factory


def _schedule(lib):
    warmup = lib.linear_schedule(0.0, 1e-2, 2)
    decay = lib.cosine_decay_schedule(1e-2, 4)
    return lib.join_schedules([warmup, decay], [2])


PARAMS = {"w": jnp.linspace(-1.0, 1.0, 6).reshape(2, 3), "b": jnp.ones(3)}


def _trajectory(lib):
    tx = lib.inject_hyperparams(_levanter_like(lib))(
        learning_rate=_schedule(lib), weight_decay=0.1, max_lr=1e-2
    )

    @jax.jit
    def run(params):
        state = tx.init(params)
        seen = []
        for k in range(5):
            grads = jax.tree.map(lambda p, k=k: jnp.cos(p + k), params)
            updates, state = tx.update(grads, state, params)
            params = lib.apply_updates(params, updates)
            seen.append((params, state.hyperparams["learning_rate"]))
        return seen

    return run(PARAMS)


def test_factory_arithmetic_on_schedules_matches_optax():
    # float32, the same operations: agreement to a few ulps of values of
    # order 1 after five steps (atol 1e-6).
    for (want, want_lr), (got, got_lr) in zip(
        _trajectory(optax), _trajectory(gradax), strict=True
    ):
        np.testing.assert_allclose(got_lr, want_lr, rtol=1e-6)
        for a, b in zip(jax.tree.leaves(want), jax.tree.leaves(got), strict=True):
            np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-6)


def test_factory_gets_arrays_inside_init_and_update():
    seen = []

    def factory(learning_rate):
        seen.append(isinstance(learning_rate, jax.Array))
        return gradax.sgd(learning_rate)

    tx = gradax.inject_hyperparams(factory)(learning_rate=lambda count: 0.1)
    seen.clear()  # what construction's abstract build saw is not the point
    state = tx.init(jnp.ones(2))
    tx.update(jnp.ones(2), state)
    assert seen and all(seen)  # arrays or tracers of them, never the schedule


def test_bad_numbers_still_fail_at_construction():
    with pytest.raises(HyperparameterError, match="b1"):
        gradax.inject_hyperparams(gradax.adam)(
            learning_rate=optax.constant_schedule(0.1), b1=2.0
        )


def test_warnings_of_the_construction_build_point_at_the_user():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gradax.inject_hyperparams(gradax.adam)(learning_rate=-0.1)
    ours = [w for w in caught if issubclass(w.category, HyperparameterWarning)]
    assert len(ours) == 1 and ours[0].filename == __file__


def test_a_factory_that_branches_on_a_value_is_left_to_init():
    # optax builds it only with values; the abstract check cannot decide the
    # branch, so it waits for init, as optax does.
    def factory(learning_rate):
        if learning_rate > 0.5:
            return gradax.sgd(learning_rate)
        return gradax.adam(learning_rate)

    tx = gradax.inject_hyperparams(factory)(learning_rate=lambda count: 0.1)
    state = tx.init(jnp.ones(2))
    assert type(state.inner_state[0]).__name__ == "ScaleByAdamState"
