"""Prodigy and D-Adaptation before any progress: zero gradients, a warmup
from a learning rate of 0.

Their step size is a ratio whose denominator, the l1 norm of a weighted
gradient sum, is 0 until a gradient arrives with a positive learning rate.
The authors' code returns before the estimate and the step then
(konstmish/prodigy "if d_denom == 0: return loss", facebookresearch/
dadaptation "if sk_l1 == 0: return loss"), and leaves the moments alone at a
learning rate of 0 ("if group_lr > 0.0"); optax divides, and its estimate is
NaN for good. Checked against both authors' torch code in float64 (to 1e-13,
the note of stop 61); here the rule itself.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradax

BUILDERS = {
    # The authors' default (no bias correction): skipped steps change nothing.
    "prodigy": lambda lr: gradax.prodigy(lr, weight_decay=0.1, bias_correction=False),
    "dadapt_adamw": lambda lr: gradax.dadapt_adamw(lr, weight_decay=0.1),
}
X0 = {"w": jnp.array([[1.0, -2.0, 0.5], [0.3, 0.0, -1.0]]), "b": jnp.array([0.2, -0.4])}


def _grad(params, t):
    return jax.tree.map(lambda x: x - 0.5 + 0.01 * t, params)


def _run(tx, grads_at, steps):
    update = jax.jit(tx.update)
    params, state = X0, tx.init(X0)
    history = []
    for t in range(steps):
        updates, state = update(grads_at(params, t), state, params)
        params = gradax.apply_updates(params, updates)
        history.append((updates, state, params))
    return history


def _without_count(state):
    return state._replace(count=None)


@pytest.mark.parametrize("name", list(BUILDERS))
def test_zero_gradients_leave_everything_but_the_count(name):
    tx = BUILDERS[name](1.0)
    initial = _without_count(tx.init(X0))
    zeros = lambda params, t: jax.tree.map(jnp.zeros_like, params)  # noqa: E731
    for updates, state, _ in _run(tx, zeros, 3):
        assert all(np.all(np.asarray(u) == 0) for u in jax.tree.leaves(updates))
        same = jax.tree.map(
            lambda a, b: bool(np.array_equal(a, b)), _without_count(state), initial
        )
        assert all(jax.tree.leaves(same)), same


def test_prodigy_after_zero_gradients_steps_as_from_the_start():
    """The authors' rule: steps with no progress are not steps at all."""
    tx = BUILDERS["prodigy"](1.0)
    late = _run(
        tx,
        lambda p, t: _grad(p, t - 2) if t >= 2 else jax.tree.map(jnp.zeros_like, p),
        7,
    )
    fresh = _run(tx, _grad, 5)
    for (_, _, a), (_, _, b) in zip(late[2:], fresh, strict=True):
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
            np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", list(BUILDERS))
def test_a_warmup_from_zero_trains(name):
    """A linear warmup from 0 (the first step's rate is 0): finite, and the
    params move once the rate is positive."""
    tx = BUILDERS[name](gradax.linear_schedule(0.0, 1.0, 3))
    history = _run(tx, _grad, 8)
    first_updates, first_state, _ = history[0]
    assert all(np.all(np.asarray(u) == 0) for u in jax.tree.leaves(first_updates))
    _, last_state, last_params = history[-1]
    assert all(np.all(np.isfinite(x)) for x in jax.tree.leaves(last_state))
    moved = max(
        float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
        for a, b in zip(jax.tree.leaves(last_params), jax.tree.leaves(X0), strict=True)
    )
    assert moved > 0, moved
    assert float(last_state.estim_lr) > float(first_state.estim_lr)
