"""gradax.experimental.aggregating against optax: optax's own training comparison."""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from compile_once import jit_once

import gradax
from gradax.experimental import aggregating as gagg

OAGG = optax.experimental.aggregating
EPS32 = float(jnp.finfo(jnp.float32).eps)


def _parameters(fn):
    return [
        (p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()
    ]


def test_names_match_optax():
    assert [n for n in dir(gradax.experimental) if not n.startswith("_")] == [
        n for n in dir(optax.experimental) if not n.startswith("_")
    ]
    # optax's aggregating module also shows what it imports (jax, math, Any,
    # NamedTuple, ...): compare the classes and functions it defines, and its
    # three type aliases (which have no module of their own).
    theirs = [
        n
        for n, v in vars(OAGG).items()
        if not n.startswith("_") and getattr(v, "__module__", None) == OAGG.__name__
    ]
    theirs += ["AggregatedUpdates", "MaybeAxis", "PerElementUpdates"]
    assert sorted(theirs) == sorted(n for n in dir(gagg) if not n.startswith("_"))


def test_signatures_match_optax():
    for name in (
        "process",
        "average_per_element_updates",
        "accumulate_avg_updates",
        "average_incrementally_updates",
        "get_batch_size_from_per_elt_updates",
        "get_per_element_mean_and_sum_sq_diff_grads",
        "track_per_element_mean_and_variance_with_ema",
        "get_unbiased_mean_and_variance_ema",
        "add_mean_variance_to_opt",
    ):
        assert _parameters(getattr(gagg, name)) == _parameters(getattr(OAGG, name))


def test_top_level_module():
    assert gradax.experimental.aggregating is gagg


def _data():
    keys = jax.random.split(jax.random.key(0), 3)
    inputs = jax.random.normal(keys[0], (4, 4, 3))  # 4 steps of 4 examples
    targets = jax.random.normal(keys[1], (4, 4, 2))
    params = jax.random.normal(keys[2], (3, 2))
    return inputs, targets, params


def _example_loss(w, x, y):
    return jnp.sum((x @ w - y) ** 2)


def _train(lib, tx, per_example, pass_params=False):
    """Four steps; returns the params and every readable mean/variance EMA."""
    inputs, targets, params = _data()

    @jit_once
    def step(params, state, x, y):
        if per_example:
            grads = jax.vmap(jax.grad(_example_loss), (None, 0, 0))(params, x, y)
        else:
            grads = jax.grad(
                lambda w: jnp.mean(jax.vmap(_example_loss, (None, 0, 0))(w, x, y))
            )(params)
        updates, state = tx.update(grads, state, params if pass_params else None)
        return params + updates, state

    state = tx.init(params)
    emas = []
    for x, y in zip(inputs, targets, strict=True):
        params, state = step(params, state, x, y)
        try:
            emas.append(lib.get_unbiased_mean_and_variance_ema(state))
        except ValueError:
            pass
    return params, emas


def _assert_close(a, b):
    # Same arithmetic in the same order except XLA's fusion choices; params
    # of size ~1 after 4 steps of ~10-sized gradients: allow 64 ulps of 10.
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(
            x, y, rtol=64 * EPS32, atol=640 * EPS32, equal_nan=True
        )


@pytest.mark.parametrize(
    ("per_elt_axis", "accumulation_steps"), [(0, 1), (0, 2), (None, 2)]
)
def test_process_matches_optax(per_elt_axis, accumulation_steps):
    def build(lib, base, sgd):
        return lib.process(
            base.identity(),
            lib.average_incrementally_updates(per_elt_axis, accumulation_steps),
            sgd(0.1),
        )

    ours = build(gagg, gradax, gradax.sgd)
    theirs = build(OAGG, optax, optax.sgd)
    assert isinstance(ours, gagg.Aggregator) == isinstance(theirs, OAGG.Aggregator)
    per_example = per_elt_axis is not None
    _assert_close(_train(gagg, ours, per_example), _train(OAGG, theirs, per_example))
    # An optax optimizer inside gradax's process gives the same numbers.
    mixed = gagg.process(
        gradax.identity(),
        gagg.average_incrementally_updates(per_elt_axis, accumulation_steps),
        optax.sgd(0.1),
    )
    mixed_params, _ = _train(gagg, mixed, per_example)
    _assert_close(mixed_params, _train(OAGG, theirs, per_example)[0])


@pytest.mark.parametrize(("ema_decay", "accumulation_steps"), [(0.0, 1), (0.9, 2)])
def test_mean_variance_tracking_matches_optax(ema_decay, accumulation_steps):
    ours = gagg.add_mean_variance_to_opt(
        gradax.sgd(0.1), ema_decay, accumulation_steps=accumulation_steps
    )
    theirs = OAGG.add_mean_variance_to_opt(
        optax.sgd(0.1), ema_decay, accumulation_steps=accumulation_steps
    )
    assert isinstance(ours, gagg.Aggregator)
    got, want = _train(gagg, ours, True, True), _train(OAGG, theirs, True, True)
    assert len(got[1]) == len(want[1]) == 4
    _assert_close(got, want)


def test_mean_and_variance_are_the_batch_statistics():
    """With ema_decay=0 the tracked values are the batch mean and variance."""
    per_example = jnp.array([[1.0, 2.0], [3.0, 6.0], [2.0, -1.0]])
    tx = gagg.add_mean_variance_to_opt(gradax.sgd(0.1), 0.0)
    _, state = tx.update(per_example, tx.init(jnp.zeros(2)))
    mean, var = gagg.get_unbiased_mean_and_variance_ema(state)
    np.testing.assert_allclose(mean, per_example.mean(0), rtol=4 * EPS32)
    np.testing.assert_allclose(var, per_example.var(0, ddof=1), rtol=4 * EPS32)


def test_aggregator_from_functions_and_errors():
    mean = gagg.Aggregator(
        init=lambda params: (),
        update=lambda g, state, params=None: (jnp.mean(g, 0), state),
    )
    assert isinstance(mean, gagg.Aggregator)
    tx = gagg.process(gradax.identity(), mean, gradax.sgd(1.0))
    assert isinstance(tx, gagg.Aggregator)
    updates, _ = tx.update(jnp.array([[1.0], [3.0]]), tx.init(jnp.zeros(1)), foo=1)
    np.testing.assert_allclose(updates, [-2.0])
    # A plain (non-aggregating) middle stage gives a plain transformation.
    plain = gagg.process(
        gradax.identity(), gagg.accumulate_avg_updates(2), gradax.sgd(1.0)
    )
    assert not isinstance(plain, gagg.Aggregator)

    with pytest.raises(ValueError, match="accumulation_steps"):
        gagg.accumulate_avg_updates(0)
    with pytest.raises(ValueError, match="same batch size"):
        gagg.get_batch_size_from_per_elt_updates(
            {"a": jnp.zeros((2, 1)), "b": jnp.zeros((3, 1))}, 0
        )
    assert gagg.get_batch_size_from_per_elt_updates(jnp.zeros((2, 3, 4)), [0, 1]) == 6
    with pytest.raises(ValueError, match="PerElementMeanAndVarianceEMAState"):
        gagg.get_unbiased_mean_and_variance_ema(gradax.sgd(0.1).init(jnp.zeros(1)))
