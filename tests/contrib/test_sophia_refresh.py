"""When sophia refreshes its Hessian estimate (issue 36).

optax's contrib sophia refreshes after steps 1, k + 1, ...; the authors'
train_sophiag.py (Liuhong99/Sophia a7e1572) after steps k, 2k, ....
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradax


class _CountingEstimator(gradax.GradientTransformation):
    """Returns the step number it was called at, as the 'Hessian'."""

    def init_state(self, params):
        return jnp.zeros([], jnp.int32)

    def update_state(self, updates, state, params=None, **extra_args):
        calls = state + 1
        return jnp.full_like(params, 1.0), calls


def _refresh_steps(timing, k=3, steps=7):
    tx = gradax.scale_by_sophia(
        update_interval=k,
        hessian_diagonal_fn=_CountingEstimator(),
        **({} if timing is None else {"hessian_refresh": timing}),
    )
    params = jnp.ones(2)
    state = tx.init(params)
    refreshed, calls = [], 0
    for step in range(1, steps + 1):
        _, state = tx.update(params, state, params)
        if int(state.hessian_fn_state) > calls:
            refreshed.append(step)
            calls = int(state.hessian_fn_state)
    return refreshed


def test_default_is_optax_timing():
    assert _refresh_steps(None) == [1, 4, 7]
    assert _refresh_steps("interval_start") == [1, 4, 7]


def test_interval_end_is_the_authors_timing():
    assert _refresh_steps("interval_end") == [3, 6]


def test_optax_agrees_with_the_default():
    optax_contrib = pytest.importorskip("optax.contrib")
    params = jnp.array([1.0, -2.0, 0.5])

    def loss(p):
        return jnp.sum(jnp.array([3.0, 0.5, 10.0]) * p**2)

    ours = gradax.sophia(0.1, update_interval=2)
    theirs = optax_contrib.sophia(0.1, update_interval=2)
    a, b = ours.init(params), theirs.init(params)
    pa = pb = params
    for _ in range(5):
        ua, a = ours.update(jax.grad(loss)(pa), a, pa, obj_fn=loss)
        ub, b = theirs.update(jax.grad(loss)(pb), b, pb, obj_fn=loss)
        pa, pb = pa + ua, pb + ub
    np.testing.assert_allclose(pa, pb, rtol=1e-6)


def test_bad_timing_names_the_argument():
    with pytest.raises(ValueError, match="hessian_refresh"):
        gradax.sophia(0.1, hessian_refresh="end")
