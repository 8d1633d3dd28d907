"""skip_loss_spikes with injected spikes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradax


def _run(tx, losses, params):
    """Updates and states for a sequence of losses, in one compiled scan."""
    grads = jax.tree.map(jnp.ones_like, params)

    def body(state, loss):
        updates, new_state = tx.update(grads, state, params, value=loss)
        return new_state, (updates, new_state)

    return jax.jit(lambda s: jax.lax.scan(body, s, jnp.asarray(losses)))(
        tx.init(params)
    )


def test_injected_spikes_are_skipped_and_leave_inner_state_untouched():
    rng = np.random.default_rng(0)
    losses = (2.0 + 0.05 * rng.normal(size=30)).astype(np.float32)
    spikes = [12, 20, 21]
    losses[spikes] = 50.0
    params = {"w": jnp.ones((2, 3))}
    tx = gradax.skip_loss_spikes(
        gradax.adam(0.1), threshold=6.0, warmup_steps=5, max_consecutive_skips=3
    )
    final, (updates, states) = _run(tx, losses, params)
    skipped = np.asarray(states.last_skipped)
    assert list(np.flatnonzero(skipped)) == spikes
    assert int(final.total_skips) == 3
    inner = jax.tree.leaves(states.inner_state)
    for step in spikes:
        assert bool(jnp.all(updates["w"][step] == 0))
        # Bit for bit: the inner (adam) state after a skip is the one before.
        for leaf in inner:
            np.testing.assert_array_equal(leaf[step - 1], leaf[step])
    accepted = np.delete(np.arange(30), spikes)
    assert bool(jnp.all(updates["w"][accepted] != 0))
    # The statistics hold the accepted losses only (weights 1/n for n <= 100).
    np.testing.assert_allclose(final.mean, losses[accepted].mean(), rtol=1e-5)
    np.testing.assert_allclose(final.variance, losses[accepted].var(), rtol=1e-3)


def test_cap_accepts_a_real_shift_and_warmup_never_skips():
    losses = np.array([1.0, 1.01, 0.99, 1.0] + [10.0] * 6, np.float32)
    tx = gradax.skip_loss_spikes(
        gradax.sgd(0.1), warmup_steps=4, max_consecutive_skips=2
    )
    final, (_, states) = _run(tx, losses, jnp.ones(2))
    # Two skips, the third is accepted, then the new level's variance lets
    # it through once the mean has moved.
    skipped = list(np.asarray(states.last_skipped))
    assert skipped[:7] == [False] * 4 + [True, True, False]
    assert int(final.total_skips) == sum(skipped)
    assert int(final.consecutive_skips) == 0 or skipped[-1]
    # During warmup even a huge loss is taken.
    tx = gradax.skip_loss_spikes(gradax.sgd(0.1), warmup_steps=4)
    _, (_, states) = _run(tx, np.array([1.0, 100.0, 1.0], np.float32), jnp.ones(2))
    assert not bool(jnp.any(states.last_skipped))


def test_non_finite_loss_is_skipped_and_kept_out_of_the_statistics():
    tx = gradax.skip_loss_spikes(gradax.sgd(0.1), warmup_steps=0)
    losses = np.array([1.0, 1.2, np.nan, np.inf, 1.1], np.float32)
    final, (updates, states) = _run(tx, losses, jnp.ones(2))
    skipped = [False, False, True, True, False]
    assert list(np.asarray(states.last_skipped)) == skipped
    assert float(final.mean) == pytest.approx(1.1)
    assert bool(jnp.all(jnp.isfinite(updates)))


def test_state_types_are_stable_and_value_is_required():
    params = {"w": jnp.ones(3, jnp.bfloat16)}
    tx = gradax.skip_loss_spikes(gradax.sgd(0.1))
    state = tx.init(params)
    grads = jax.tree.map(jnp.ones_like, params)

    def step(s):
        return tx.update(grads, s, params, value=jnp.asarray(1.0, jnp.float16))[1]

    # cond, while_loop and scan reject a step whose state types change.
    jax.jit(lambda s: jax.lax.cond(True, step, lambda s: s, s))(state)
    jax.lax.while_loop(lambda c: c[0] < 2, lambda c: (c[0] + 1, step(c[1])), (0, state))
    jax.lax.scan(lambda s, _: (step(s), None), state, None, length=2)
    with pytest.raises(TypeError, match="value"):
        tx.update(grads, state, params)
    with pytest.raises(ValueError, match="threshold"):
        gradax.skip_loss_spikes(gradax.sgd(0.1), threshold=-1.0)
    with pytest.raises(ValueError, match="max_consecutive_skips"):
        gradax.skip_loss_spikes(gradax.sgd(0.1), max_consecutive_skips=1.5)
