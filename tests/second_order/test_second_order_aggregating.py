"""gradax.second_order and gradax.experimental.aggregating against optax."""

from __future__ import annotations

import functools
import inspect
import types
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradax
from gradax import second_order as gso
from gradax.experimental import aggregating as gagg

OAGG = optax.experimental.aggregating
EPS32 = float(jnp.finfo(jnp.float32).eps)

# Each test program is compiled once and run once: without LLVM's optimization
# of the generated code it compiles in about half the time. Both libraries are
# compiled alike, so comparisons are like with like.
jit_once = functools.partial(
    jax.jit, compiler_options={"xla_backend_optimization_level": 0}
)


def _public(module):
    return sorted(
        n
        for n in dir(module)
        if not n.startswith("_")
        and not isinstance(getattr(module, n), types.ModuleType)
        and getattr(getattr(module, n), "__module__", "").startswith(
            module.__name__.split(".")[0]
        )
    )


def _parameters(fn):
    return [
        (p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()
    ]


def test_names_match_optax():
    assert _public(gso) == sorted(
        n for n in dir(optax.second_order) if not n.startswith("_")
    )
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
    for name in ("hvp", "hessian_diag", "fisher_diag"):
        assert _parameters(getattr(gso, name)) == _parameters(
            getattr(optax.second_order, name)
        )
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


# ---------------------------------------------------------------------------
# Second order.


def _mlp_loss(params, inputs, targets):
    hidden = jnp.tanh(inputs @ params["w1"] + params["b1"])
    return jnp.mean((hidden @ params["w2"] - targets) ** 2)


@functools.partial(jit_once, static_argnums=0)
def _second_order_outputs(lib, params, inputs, targets, v):
    return (
        lib.hvp(_mlp_loss, v, params, inputs, targets),
        lib.hessian_diag(_mlp_loss, params, inputs, targets),
        lib.fisher_diag(_mlp_loss, params, inputs, targets),
    )


def test_second_order_values_and_warnings_match_optax():
    rng = np.random.default_rng(0)
    params = {
        "w1": jnp.asarray(rng.normal(size=(3, 4)), jnp.float32),
        "b1": jnp.asarray(rng.normal(size=4), jnp.float32),
        "w2": jnp.asarray(rng.normal(size=(4, 2)), jnp.float32),
    }
    inputs = jnp.asarray(rng.normal(size=(5, 3)), jnp.float32)
    targets = jnp.asarray(rng.normal(size=(5, 2)), jnp.float32)
    v = jnp.asarray(rng.normal(size=3 * 4 + 4 + 4 * 2), jnp.float32)
    args = (params, inputs, targets, v)

    with warnings.catch_warnings(record=True) as ours_caught:
        warnings.simplefilter("always")
        ours = _second_order_outputs(gso, *args)
    with warnings.catch_warnings(record=True) as theirs_caught:
        warnings.simplefilter("always")
        theirs = _second_order_outputs(optax.second_order, *args)

    # The same arithmetic (autodiff of the same loss): equal up to rounding of
    # sums of ~20 products of size ~1, a few ulps each.
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True):
        np.testing.assert_allclose(a, b, rtol=16 * EPS32, atol=16 * EPS32)

    # One DeprecationWarning per call, pointing at the caller (this file).
    assert [w.category for w in ours_caught] == [DeprecationWarning] * 3
    names = ("hvp", "hessian_diag", "fisher_diag")
    for w, name in zip(ours_caught, names, strict=True):
        assert name in str(w.message)
        assert w.filename == __file__
    assert {w.category for w in theirs_caught} == {DeprecationWarning}


def test_second_order_warns_under_pytest_warns():
    with pytest.warns(DeprecationWarning, match="fisher_diag"):
        gso.fisher_diag(
            _mlp_loss,
            {"w1": jnp.ones((1, 1)), "b1": jnp.ones(1), "w2": jnp.ones((1, 1))},
            jnp.ones((2, 1)),
            jnp.ones((2, 1)),
        )


# ---------------------------------------------------------------------------
# Aggregating: optax's own training comparison, gradax against optax.


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


def test_top_level_modules():
    assert gradax.second_order is gso
    assert gradax.experimental.aggregating is gagg
