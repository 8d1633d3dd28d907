"""Adaptive optimizers: what the conformance registry cannot check.

- Adafactor's factored path on matrices of at least 128 x 128, against optax;
- every optimizer with a learning-rate schedule against optax;
- signatures, state fields and validation errors.

Cautious updates and cautious weight decay are tested in test_cautious.py.
"""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax_versions import enable_x64

import gradax

OPTIMIZERS = [
    "adabelief",
    "adadelta",
    "adafactor",
    "adagrad",
    "adamax",
    "adamaxw",
    "amsgrad",
    "nadam",
    "nadamw",
    "radam",
    "rmsprop",
    "yogi",
    "novograd",
    "lamb",
    "lars",
    "lion",
]
BLOCKS = [
    "scale_by_adamax",
    "scale_by_amsgrad",
    "scale_by_belief",
    "scale_by_adadelta",
    "scale_by_rms",
    "scale_by_rss",
    "scale_by_stddev",
    "scale_by_radam",
    "scale_by_yogi",
    "scale_by_novograd",
    "scale_by_lion",
    "scale_by_trust_ratio",
    "scale_by_param_block_norm",
    "scale_by_param_block_rms",
    "scale_by_factored_rms",
]
GRADAX_ONLY_ARGS = {"cautious", "cautious_weight_decay", "mask_scale", "nu_dtype"}
# Defaults that leave optax's numbers: off, or (mask_scale) read only with
# cautious=True.
INERT_DEFAULTS = {"mask_scale": ("mean", "numel")}


def _tree(key, scale=1.0):
    a, b = jax.random.split(key)
    return {
        "a": scale * jax.random.normal(a, (7,)),
        "b": scale * jax.random.normal(b, (3, 4)),
    }


def _grads(steps, seed=0):
    keys = jax.random.split(jax.random.key(seed), steps)
    return [_tree(k) for k in keys]


# ---------------------------------------------------------------------------
# Against optax.


def _trajectory(tx, params, steps, grads_fn):
    def body(carry, step):
        p, s = carry
        u, s = tx.update(grads_fn(p, step), s, p)
        return (gradax.apply_updates(p, u), s), u

    (params, _), updates = jax.lax.scan(
        body, (params, tx.init(params)), jnp.arange(steps, dtype=jnp.float32)
    )
    return params, updates


def _quadratic(p, step):
    return jax.tree.map(lambda x: (x - 0.5) * (1.0 + 0.1 * jnp.sin(step + x)), p)


def _schedule(count):
    return 0.05 * (0.5 + 0.5 * jnp.cos(0.2 * count))


# Small learning-rate-free extra arguments some optimizers need here.
SCHEDULE_EXTRA = {"adadelta": dict(eps=1e-3), "lars": dict(trust_coefficient=0.1)}


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_learning_rate_schedule_equals_optax(name):
    extra = SCHEDULE_EXTRA.get(name, {})
    ours = getattr(gradax, name)(_schedule, **extra)
    theirs = getattr(optax, name)(_schedule, **extra)
    params = _tree(jax.random.key(4))
    a = jax.jit(lambda p: _trajectory(ours, p, 15, _quadratic))(params)
    b = jax.jit(lambda p: _trajectory(theirs, p, 15, _quadratic))(params)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-7)
    # The schedule really varies: a constant rate gives other numbers.
    constant = getattr(gradax, name)(0.05, **extra)
    c = jax.jit(lambda p: _trajectory(constant, p, 15, _quadratic))(params)
    assert not np.allclose(jax.tree.leaves(a)[0], jax.tree.leaves(c)[0])


@pytest.mark.parametrize(
    "name, kwargs",
    [
        ("lion", dict(learning_rate=0.01)),
        ("amsgrad", dict(learning_rate=0.05)),
        ("scale_by_novograd", dict()),
        ("scale_by_lion", dict(mode="refined")),
    ],
)
def test_bfloat16_momentum_equals_optax(name, kwargs):
    ours = getattr(gradax, name)(mu_dtype=jnp.bfloat16, **kwargs)
    theirs = getattr(optax, name)(mu_dtype=jnp.bfloat16, **kwargs)
    params = _tree(jax.random.key(10))
    a = jax.jit(lambda p: _trajectory(ours, p, 10, _quadratic))(params)
    b = jax.jit(lambda p: _trajectory(theirs, p, 10, _quadratic))(params)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
    state = ours.init(params)
    _, new_state = jax.lax.cond(
        True, lambda s: ours.update(params, s, params), lambda s: (params, s), state
    )
    assert gradax.tree.get(new_state, "mu")["b"].dtype == jnp.bfloat16


def test_nadam_is_adam_with_nesterov():
    params = _tree(jax.random.key(5))
    a = _trajectory(gradax.nadam(0.05), params, 5, _quadratic)
    b = _trajectory(gradax.adam(0.05, nesterov=True), params, 5, _quadratic)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)
    assert (
        gradax.nadamw(0.1).nesterov and not gradax.nadam(0.1, nesterov=False).nesterov
    )


# ---------------------------------------------------------------------------
# Adafactor's factored path (min_dim_size_to_factor defaults to 128).


def _big_params():
    keys = jax.random.split(jax.random.key(6), 4)
    return {
        "matrix": jax.random.normal(keys[0], (160, 130)),
        "wide": jax.random.normal(keys[1], (128, 300)),
        # The two largest axes are 0 and 2, not the last two.
        "tensor": jax.random.normal(keys[2], (130, 3, 140)),
        "small": jax.random.normal(keys[3], (127, 200)),  # not factored
    }


ADAFACTOR_KWARGS = [
    dict(learning_rate=0.01),
    dict(learning_rate=0.01, momentum=0.9, weight_decay_rate=0.01),
    dict(learning_rate=None, decay_rate=0.6, decay_offset=2, clipping_threshold=None),
    dict(learning_rate=0.01, factored=False),
]


@pytest.mark.parametrize("kwargs", ADAFACTOR_KWARGS, ids=str)
def test_adafactor_factored_equals_optax(kwargs):
    params = _big_params()
    ours = gradax.adafactor(**kwargs)
    theirs = optax.adafactor(**kwargs)
    a = jax.jit(lambda p: _trajectory(ours, p, 6, _quadratic))(params)
    b = jax.jit(lambda p: _trajectory(theirs, p, 6, _quadratic))(params)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)


def test_factored_state_shapes():
    params = _big_params()
    state = gradax.scale_by_factored_rms().init(params)
    reference = optax.scale_by_factored_rms().init(params)
    assert jax.tree.map(jnp.shape, state) == jax.tree.map(jnp.shape, tuple(reference))
    # v_row averages over the largest axis, v_col over the second largest.
    assert state.v_row["matrix"].shape == (130,)
    assert state.v_col["matrix"].shape == (160,)
    assert state.v["matrix"].shape == (1,)
    assert state.v_row["tensor"].shape == (130, 3)
    assert state.v_col["tensor"].shape == (3, 140)
    assert state.v["small"].shape == (127, 200)


def test_factored_rms_update_equals_numpy():
    """One step of the factored estimate, written out for a 128 x 256 matrix."""
    g = np.asarray(jax.random.normal(jax.random.key(7), (128, 256)), np.float64)
    with enable_x64(True):
        tx = gradax.scale_by_factored_rms()
        p = jnp.zeros((128, 256))
        u, state = tx.update(jnp.asarray(g), tx.init(p), p)
    beta = 0.0  # the decay at the first step: 1 - (0 + 1) ** -0.8
    g2 = g**2 + 1e-30
    row = (1 - beta) * g2.mean(axis=1)
    col = (1 - beta) * g2.mean(axis=0)
    v_hat = np.outer(row, col) / row.mean()
    np.testing.assert_allclose(u, g / np.sqrt(v_hat), rtol=1e-6)
    np.testing.assert_allclose(state.v_row, row, rtol=1e-6)


# ---------------------------------------------------------------------------
# Signatures, states and validation.


@pytest.mark.parametrize("name", OPTIMIZERS + BLOCKS + ["adam", "adamw"])
def test_signature_matches_optax(name):
    ours = inspect.signature(getattr(gradax, name)).parameters
    theirs = inspect.signature(getattr(optax, name)).parameters
    assert list(ours)[: len(theirs)] == list(theirs)
    for q in theirs.values():
        p = ours[q.name]
        assert p.kind == q.kind, q.name
        if inspect.isfunction(q.default):  # a default function: same values
            for step in range(4):
                assert p.default(step, 0.8) == q.default(step, 0.8), q.name
        else:
            assert p.default is q.default or p.default == q.default, q.name
    for extra in list(ours)[len(theirs) :]:
        assert extra in GRADAX_ONLY_ARGS, extra
        assert ours[extra].kind is inspect.Parameter.KEYWORD_ONLY, extra
        assert ours[extra].default in INERT_DEFAULTS.get(extra, (None, False)), extra


@pytest.mark.parametrize(
    "name",
    [
        "ScaleByAdaDeltaState",
        "ScaleByAmsgradState",
        "ScaleByBeliefState",
        "ScaleByLionState",
        "ScaleByNovogradState",
        "ScaleByRmsState",
        "ScaleByRssState",
        "ScaleByRStdDevState",
        "FactoredState",
    ],
)
def test_state_fields_as_optax(name):
    assert getattr(gradax, name)._fields == getattr(optax, name)._fields


@pytest.mark.parametrize(
    "build, argument",
    [
        (lambda: gradax.adabelief(0.1, b1=1.0), "b1"),
        (lambda: gradax.adabelief(0.1, eps_root=-1e-16), "eps_root"),
        (lambda: gradax.adadelta(rho=-0.1), "rho"),
        (lambda: gradax.adafactor(min_dim_size_to_factor=0), "min_dim_size_to_factor"),
        (lambda: gradax.adafactor(momentum=1.5), "momentum"),
        (lambda: gradax.adafactor(clipping_threshold=-1.0), "clipping_threshold"),
        (lambda: gradax.adagrad(0.1, initial_accumulator_value=-1.0), "initial"),
        (lambda: gradax.adamax(0.1, b2=1.0), "b2"),
        (lambda: gradax.adamaxw(0.1, weight_decay=-1.0), "weight_decay"),
        (lambda: gradax.amsgrad(0.1, eps=-1.0), "eps"),
        (lambda: gradax.nadam(0.1, b1=-0.1), "b1"),
        (lambda: gradax.nadamw(0.1, weight_decay=-0.1), "weight_decay"),
        (lambda: gradax.radam(0.1, b2=1.0), "b2"),
        (lambda: gradax.rmsprop(0.1, decay=1.5), "decay"),
        (lambda: gradax.rmsprop(0.1, decay=1.0, bias_correction=True), "decay"),
        (lambda: gradax.rmsprop(0.1, momentum=1.0), "momentum"),
        (lambda: gradax.yogi(0.1, eps=-1.0), "eps"),
        (lambda: gradax.novograd(0.1, b2=1.0), "b2"),
        (lambda: gradax.lamb(0.1, weight_decay=-1.0), "weight_decay"),
        (lambda: gradax.lars(0.1, momentum=1.0), "momentum"),
        (lambda: gradax.lars(0.1, trust_coefficient=-1.0), "trust_coefficient"),
        (lambda: gradax.lion(0.1, b1=1.5), "b1"),
        (lambda: gradax.scale_by_lion(mode="soft"), "mode"),
        (lambda: gradax.scale_by_lion(smooth_beta=-1.0), "smooth_beta"),
        (lambda: gradax.scale_by_yogi(initial_accumulator_value=-1.0), "initial"),
        (lambda: gradax.scale_by_trust_ratio(min_norm=-1.0), "min_norm"),
        (lambda: gradax.scale_by_param_block_norm(min_scale=-1.0), "min_scale"),
        (lambda: gradax.scale_by_param_block_rms(min_scale=-1.0), "min_scale"),
        (lambda: gradax.scale_by_factored_rms(epsilon=-1.0), "epsilon"),
        (lambda: gradax.scale_by_stddev(initial_scale=-1.0), "initial_scale"),
        (lambda: gradax.scale_by_novograd(weight_decay=-1.0), "weight_decay"),
        (lambda: gradax.add_cautious_decayed_weights(-0.1), "weight_decay"),
    ],
)
def test_invalid_hyperparameter_names_argument(build, argument):
    with pytest.raises(ValueError, match=argument) as info:
        build()
    assert "got" in str(info.value)


@pytest.mark.parametrize(
    "tx",
    [
        gradax.scale_by_trust_ratio(),
        gradax.scale_by_param_block_norm(),
        gradax.scale_by_param_block_rms(),
        gradax.scale_by_factored_rms(),
        gradax.scale_by_novograd(),
        gradax.add_cautious_decayed_weights(0.1),
    ],
    ids=lambda tx: type(tx).__name__,
)
def test_needs_params(tx):
    params = jnp.ones(3)
    with pytest.raises(ValueError, match="params"):
        tx.update(params, tx.init(params))


@pytest.mark.parametrize("eps_in_sqrt", [True, False])
def test_stddev_clamps_a_negative_variance(eps_in_sqrt):
    # After one bias-corrected step from initial_scale=0 the variance
    # n - m^2 is exactly 0 in exact arithmetic, and rounding leaves some
    # entries slightly negative; optax takes the root of that (NaN). Here a
    # state with n < m^2 makes the case without relying on rounding.
    kwargs = dict(decay=0.5, eps=1e-8, eps_in_sqrt=eps_in_sqrt)
    ours = gradax.scale_by_stddev(**kwargs)
    theirs = optax.scale_by_stddev(**kwargs)
    g = jnp.array([1.0, 2.0])
    # After the update: m = [1, 1], n = [0.6, 4.1]: variance [-0.4, 3.1].
    mu, nu = jnp.array([1.0, 0.0]), jnp.array([0.2, 4.2])
    expected, _ = theirs.update(g, optax.ScaleByRStdDevState(mu=mu, nu=nu))
    state = ours.init(g)._replace(mu=mu, nu=nu)  # a ScaleByRStdDevState
    updates, _ = ours.update(g, state)
    assert np.isnan(expected[0]) and np.isfinite(expected[1])
    zero_variance = 1 / (np.sqrt(1e-8) if eps_in_sqrt else 1e-8)
    np.testing.assert_allclose(updates[0], 1.0 * zero_variance, rtol=1e-6)
    np.testing.assert_allclose(updates[1], expected[1], rtol=1e-6)
    # And the first bias-corrected step from zero is finite everywhere.
    x = jnp.asarray(np.random.default_rng(0).standard_normal(1000), jnp.float32)
    tx = gradax.scale_by_stddev(initial_scale=0.0, bias_correction=True, **kwargs)
    first, _ = tx.update(x, tx.init(x))
    assert bool(jnp.isfinite(first).all())
