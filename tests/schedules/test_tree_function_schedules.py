"""A schedule that is a pytree of arrays (`jax.tree_util.Partial`, an equinox
module): its arrays are the optimizer's leaves, not hidden static data.

Held static, such an array was hashed by identity (each new value compiled
the step again), never reached by `jax.tree.map`, and stayed a tracer inside
an optimizer built under `jit` and returned from it.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.tree_util import Partial

import gradax
from gradax._core.hyper import TreeFunctionSchedule


def halving(count, peak):
    return peak * 0.5**count


class Halving(eqx.Module):
    peak: jax.Array

    def __call__(self, count):
        return self.peak * 0.5**count


class MaybeHalving(eqx.Module):
    peak: jax.Array
    halve: bool  # a flag read in Python: not traceable

    def __call__(self, count):
        return self.peak * 0.5**count if self.halve else self.peak


PARAMS = {"w": jnp.linspace(-1.0, 1.0, 6).reshape(2, 3), "b": jnp.ones(3)}
GRADS = jax.tree.map(lambda p: 0.3 * p + 0.1, PARAMS)


def _steps(tx, n=3):
    state, params, out = tx.init(PARAMS), PARAMS, []
    for _ in range(n):
        updates, state = tx.update(GRADS, state, params)
        params = optax.apply_updates(params, updates)
        out.append(params)
    return out


def _as_partial(peak):
    return Partial(halving, peak=peak)


SCHEDULES = {"partial": _as_partial, "equinox": Halving}


@pytest.mark.parametrize("kind", SCHEDULES)
def test_the_arrays_are_leaves(kind):
    tx = gradax.adamw(SCHEDULES[kind](jnp.asarray(0.1)))
    assert isinstance(tx.learning_rate, TreeFunctionSchedule)
    assert any(
        isinstance(leaf, jax.Array) and leaf.shape == () and leaf == jnp.float32(0.1)
        for leaf in jax.tree.leaves(tx)
    )
    doubled = jax.tree.map(lambda x: x * 2 if isinstance(x, jax.Array) else x, tx)
    assert float(doubled.learning_rate(0)) == pytest.approx(0.2)


@pytest.mark.parametrize("kind", SCHEDULES)
def test_built_under_jit_and_returned_holds_no_tracer(kind):
    make = SCHEDULES[kind]
    built = jax.jit(lambda peak: gradax.adamw(make(peak)))(jnp.asarray(0.1))
    # Returned from jit, every number of the optimizer is a float32 array.
    expected = jax.tree.map(jnp.asarray, gradax.adamw(make(jnp.asarray(0.1))))
    for got, want in zip(_steps(built), _steps(expected), strict=True):
        jax.tree.map(np.testing.assert_array_equal, got, want)


def test_a_new_array_does_not_compile_again():
    traces = []

    @jax.jit
    def step(tx, state):
        traces.append(None)
        return tx.update(GRADS, state, PARAMS)

    state = gradax.adamw(_as_partial(jnp.asarray(0.1))).init(PARAMS)
    first, _ = step(gradax.adamw(_as_partial(jnp.asarray(0.1))), state)
    second, _ = step(gradax.adamw(_as_partial(jnp.asarray(0.2))), state)
    assert len(traces) == 1
    np.testing.assert_allclose(second["w"], 2 * first["w"], rtol=1e-6)


def test_shared_by_two_groups_reads_one_value():
    # muon gives its learning rate to both groups: one field, two copies.
    tx = gradax.contrib.muon(_as_partial(jnp.asarray(0.02)))
    assert float(tx.learning_rate(1)) == pytest.approx(0.01)
    traced = jax.jit(lambda tx: tx.learning_rate(1))(tx)
    assert float(traced) == pytest.approx(0.01)
    _steps(tx, 1)


@pytest.mark.parametrize(
    "fn",
    [
        Partial(halving, peak=0.1),  # numbers only: nothing to trace
        Partial(lambda count, mode: 0.1 if mode == "flat" else 0.0, mode="flat"),
        MaybeHalving(jnp.asarray(0.1), True),
        lambda count: 0.1 * 0.5**count,
    ],
    ids=[
        "partial-of-numbers",
        "partial-of-a-string",
        "module-with-a-flag",
        "plain-function",
    ],
)
def test_other_functions_stay_static(fn):
    tx = gradax.adamw(fn)
    assert type(tx.learning_rate) is gradax.FunctionSchedule
    assert jax.tree.leaves(tx) == jax.tree.leaves(gradax.adamw(lambda count: 0.1))
    jax.jit(lambda tx: tx.update(GRADS, tx.init(PARAMS), PARAMS))(tx)


def test_inject_hyperparams_takes_one():
    tx = gradax.inject_hyperparams(gradax.adam)(
        learning_rate=_as_partial(jnp.asarray(0.1))
    )
    expected = optax.inject_hyperparams(optax.adam)(
        learning_rate=lambda c: halving(c, 0.1)
    )
    for got, want in zip(_steps(tx), _steps(expected), strict=True):
        jax.tree.map(np.testing.assert_array_equal, got, want)
