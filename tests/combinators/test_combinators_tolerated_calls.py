"""Combinator arguments optax 0.2.8 accepts: gradax accepts them with
optax's updates, warning (naming the argument) where the value is usually a
mistake."""

from __future__ import annotations

import warnings

import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradax
from gradax.declare import HyperparameterWarning

NAN = jnp.array([jnp.nan, 1.0])
GRADS = [NAN, NAN, NAN, jnp.array([0.5, -1.0]), NAN, NAN, NAN, NAN]


def _updates(lib, max_consecutive_errors):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HyperparameterWarning)
        tx = lib.apply_if_finite(lib.sgd(1.0), max_consecutive_errors)
    params = jnp.ones(2)
    state = tx.init(params)
    out = []
    for g in GRADS:
        u, state = tx.update(g, state, params)
        out.append(np.asarray(u))
    return out, int(state.total_notfinite)


@pytest.mark.parametrize("max_consecutive_errors", [2.0, 2.5, -1, np.int64(1)])
def test_apply_if_finite_counts_as_optax(max_consecutive_errors):
    ours = _updates(gradax, max_consecutive_errors)
    theirs = _updates(optax, max_consecutive_errors)
    # Updates are either zeros, the gradient times -1, or NaN: exact.
    for got, want in zip(ours[0], theirs[0], strict=True):
        np.testing.assert_array_equal(got, want)
    assert ours[1] == theirs[1]


def test_apply_if_finite_negative_count_warns():
    with pytest.warns(HyperparameterWarning, match="max_consecutive_errors=-1"):
        gradax.apply_if_finite(gradax.sgd(1.0), -1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gradax.apply_if_finite(gradax.sgd(1.0), 2.0)


PERIODIC = {
    "MultiSteps": lambda lib, k: lib.MultiSteps(lib.adam(0.1), k),
    "MultiSteps.gradient_transformation": lambda lib, k: lib.MultiSteps(
        lib.adam(0.1), k
    ).gradient_transformation(),
    "apply_every": lambda lib, k: lib.chain(lib.apply_every(k), lib.sgd(0.1)),
}


@pytest.mark.parametrize("name", sorted(PERIODIC))
@pytest.mark.parametrize("k", [0, -1])
def test_period_below_one_never_updates_as_optax(name, k):
    with pytest.warns(HyperparameterWarning, match="never applies an update"):
        ours = PERIODIC[name](gradax, k)
    theirs = PERIODIC[name](optax, k)
    params = jnp.ones(2)
    s_ours, s_theirs = ours.init(params), theirs.init(params)
    for i in range(4):
        grads = jnp.array([1.0, -2.0]) * (i + 1)
        u_ours, s_ours = ours.update(grads, s_ours, params)
        u_theirs, s_theirs = theirs.update(grads, s_theirs, params)
        # Zeros in both (the sign of a zero may differ): exact.
        np.testing.assert_array_equal(u_ours, u_theirs)
