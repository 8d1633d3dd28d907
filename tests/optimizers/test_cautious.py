"""Cautious updates and cautious weight decay, against NumPy renderings.

Liang et al., Cautious Optimizers, 2024 (arXiv:2411.16085): keep the entries
of the update that agree in sign with the gradient, rescaled by the fraction
kept. Chen et al., Cautious Weight Decay, 2025 (arXiv:2510.12402): decay only
where the update and the parameter agree in sign. ``cautious=False`` gives
exactly optax's numbers.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax_versions import enable_x64
from test_adaptive import _grads, _quadratic, _trajectory, _tree

import gradax
from gradax.transforms.cautious import caution

CAUTIOUS = [
    "adam",
    "adamw",
    "nadam",
    "nadamw",
    "adamax",
    "adamaxw",
    "amsgrad",
    "radam",
    "adabelief",
    "yogi",
    "lion",
]
WITH_DECAY = ["adamw", "nadamw", "adamaxw", "lion"]

# ---------------------------------------------------------------------------
# Caution, rendered in NumPy.


def np_caution(u, g, mask_scale="mean"):
    """Liang et al. (2024): keep u where u*g > 0, rescaled.

    C-Optim (github.com/kyleliang919/C-Optim, commit 2c0517c): c_adamw.py
    divides by max(mean(kept), 1e-3) ("mean"), c_lion.py multiplies by
    numel / (sum(kept) + 1) ("numel").
    """
    u, g = np.asarray(u), np.asarray(g)
    keep = (np.real(np.conj(u) * g) > 0).astype(np.real(u).dtype)
    if mask_scale == "numel":
        return u * keep * (keep.size / (keep.sum() + 1))
    return u * keep / max(keep.mean(), 1e-3)


# Each optimizer's default rescaling: Lion's is c_lion.py's.
MASK_SCALE = {"lion": "numel"}


def np_cautious_decay(u, p, wd):
    """Chen et al. (2025): u + wd * 1[u*p >= 0] * p."""
    u, p = np.asarray(u), np.asarray(p)
    return u + wd * (np.real(np.conj(u) * p) >= 0) * p


def test_caution_keeps_aligned_entries_and_rescales():
    u = jnp.array([1.0, -2.0, 3.0, 4.0, 0.0])
    g = jnp.array([2.0, 1.0, 1.0, -1.0, 1.0])
    # Two of five entries agree in sign (the zero update does not).
    expected = np.array([1.0, 0.0, 3.0, 0.0, 0.0]) / 0.4
    np.testing.assert_allclose(caution(u, g), expected, rtol=1e-6)
    np.testing.assert_allclose(caution(u, g), np_caution(u, g), rtol=1e-6)


def test_caution_with_nothing_aligned_is_zero_not_nan():
    u = jnp.array([1.0, -1.0])
    out = caution({"x": u, "none": None}, {"x": -u, "none": None})
    np.testing.assert_array_equal(out["x"], np.zeros(2))
    assert out["none"] is None


def test_caution_floor_bounds_the_rescaling():
    u = jnp.ones(5000)
    g = jnp.zeros(5000).at[0].set(1.0)  # 1 of 5000 kept: mean 2e-4 < 1e-3
    np.testing.assert_allclose(caution(u, g)[0], 1000.0, rtol=1e-6)


def test_caution_complex_uses_real_part_of_inner_product():
    u = jnp.array([1 + 1j, 1 + 1j, 2j])
    g = jnp.array([1 - 0.5j, -1 + 0.5j, 1j])
    out = caution(u, g)
    np.testing.assert_allclose(out, np_caution(u, g), rtol=1e-6)
    np.testing.assert_allclose(out, np.array([1 + 1j, 0, 2j]) * 1.5, rtol=1e-6)


def _steps(tx, grads, params):
    state = tx.init(params)
    out = []
    for g in grads:
        u, state = tx.update(g, state, params)
        out.append(u)
    return out, state


@pytest.mark.parametrize("name", CAUTIOUS)
def test_cautious_optimizer_masks_its_direction(name):
    """u_cautious = -lr * caution(d, g), with d = -u_plain / lr, step by step."""
    lr = 0.1
    extra = dict(weight_decay=0.0) if name in WITH_DECAY else {}
    factory = getattr(gradax, name)
    grads = _grads(8)
    params = _tree(jax.random.key(9))
    plain, plain_state = _steps(factory(lr, **extra), grads, params)
    careful, careful_state = _steps(factory(lr, cautious=True, **extra), grads, params)
    dropped = 0
    for g, u_plain, u_careful in zip(grads, plain, careful, strict=True):
        for key in g:
            direction = np.asarray(u_plain[key]) / -lr
            scale = MASK_SCALE.get(name, "mean")
            expected = -lr * np_caution(direction, g[key], scale)
            np.testing.assert_allclose(u_careful[key], expected, rtol=2e-6, atol=1e-7)
            dropped += int(np.sum(np.asarray(u_careful[key]) == 0))
    assert dropped > 0, "the test never exercised the mask"
    # Caution changes the step, not the moments.
    for a, b in zip(
        jax.tree.leaves(plain_state), jax.tree.leaves(careful_state), strict=True
    ):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("cautious", [False, True])
@pytest.mark.parametrize("name", WITH_DECAY)
def test_cautious_weight_decay_matches_numpy(name, cautious):
    lr, wd = 0.1, 0.3
    factory = getattr(gradax, name)
    grads = _grads(6, seed=1)
    params = _tree(jax.random.key(2))
    base, _ = _steps(factory(lr, weight_decay=0.0, cautious=cautious), grads, params)
    decayed, _ = _steps(
        factory(lr, weight_decay=wd, cautious=cautious, cautious_weight_decay=True),
        grads,
        params,
    )
    skipped = 0
    for u_base, u_dec in zip(base, decayed, strict=True):
        for key in params:
            direction = np.asarray(u_base[key]) / -lr
            expected = -lr * np_cautious_decay(direction, params[key], wd)
            np.testing.assert_allclose(u_dec[key], expected, rtol=2e-6, atol=1e-7)
            skipped += int(np.sum(np.asarray(direction * params[key]) < 0))
    assert skipped > 0, "the test never exercised the decay mask"


def test_cautious_weight_decay_respects_mask():
    params = {"w": jnp.array([1.0, -1.0]), "b": jnp.array([1.0, -1.0])}
    tx = gradax.add_cautious_decayed_weights(0.5, {"w": True, "b": False})
    u = {"w": jnp.array([1.0, 1.0]), "b": jnp.array([1.0, 1.0])}
    out, _ = tx.update(u, tx.init(params), params)
    np.testing.assert_allclose(out["w"], [1.5, 1.0])
    np.testing.assert_allclose(out["b"], [1.0, 1.0])


def test_cautious_adamw_trajectory_matches_numpy():
    """C-AdamW with cautious weight decay, written out in NumPy (float64)."""
    lr, b1, b2, eps, wd, steps = 0.05, 0.9, 0.999, 1e-8, 0.1, 25
    rng = np.random.default_rng(0)
    curvature = rng.uniform(0.5, 2.0, 12)
    target = rng.normal(size=12)
    noise = rng.normal(scale=0.5, size=(steps, 12))

    def grad(p, t):
        return curvature * (p - target) + noise[t]

    p = rng.normal(size=12)
    m, v = np.zeros(12), np.zeros(12)
    start = p.copy()
    dropped = 0
    for t in range(steps):
        g = grad(p, t)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g**2
        u = (m / (1 - b1 ** (t + 1))) / (np.sqrt(v / (1 - b2 ** (t + 1))) + eps)
        u = np_caution(u, g)
        dropped += int(np.sum(u == 0))
        p = p - lr * np_cautious_decay(u, p, wd)
    assert dropped > 0

    with enable_x64(True):
        tx = gradax.adamw(
            lr, b1, b2, eps, weight_decay=wd, cautious=True, cautious_weight_decay=True
        )
        q = jnp.asarray(start)
        state = tx.init(q)
        for t in range(steps):
            u, state = tx.update(jnp.asarray(grad(np.asarray(q), t)), state, q)
            q = gradax.apply_updates(q, u)
        np.testing.assert_allclose(q, p, rtol=1e-10, atol=1e-12)


def test_cautious_lion_trajectory_matches_numpy():
    """C-Lion (c_lion.py's rescaling) with cautious weight decay, in NumPy."""
    lr, b1, b2, wd, steps = 0.01, 0.9, 0.99, 0.5, 25
    rng = np.random.default_rng(1)
    target = rng.normal(size=10)
    noise = rng.normal(scale=0.5, size=(steps, 10))

    def grad(p, t):
        return (p - target) + noise[t]

    p = rng.normal(size=10)
    start, m = p.copy(), np.zeros(10)
    for t in range(steps):
        g = grad(p, t)
        u = np_caution(np.sign((1 - b1) * g + b1 * m), g, "numel")
        m = b2 * m + (1 - b2) * g
        p = p - lr * np_cautious_decay(u, p, wd)

    with enable_x64(True):
        tx = gradax.lion(
            lr, b1, b2, weight_decay=wd, cautious=True, cautious_weight_decay=True
        )
        q = jnp.asarray(start)
        state = tx.init(q)
        for t in range(steps):
            u, state = tx.update(jnp.asarray(grad(np.asarray(q), t)), state, q)
            q = gradax.apply_updates(q, u)
        np.testing.assert_allclose(q, p, rtol=1e-10, atol=1e-12)


# Two steps on five entries: at the second, sign(c_2) agrees with g_2 at
# k = 3 of n = 5 entries (c_2 = 0.9 * 0.01 * g_1 + 0.1 * g_2 for Lion).
_G1 = np.ones(5, dtype=np.float32)
_G2 = np.array([1.0, -0.01, -0.01, 1.0, -1.0], dtype=np.float32)
_KEPT = np.array([1.0, 0.0, 0.0, 1.0, -1.0])


def _second_step(tx):
    p = jnp.zeros(5)
    state = tx.init(p)
    _, state = tx.update(jnp.asarray(_G1), state, p)
    return np.asarray(tx.update(jnp.asarray(_G2), state, p)[0])


def test_cautious_lion_step_is_c_lion_formula():
    """c_lion.py (C-Optim, commit 2c0517c): mask * numel / (mask.sum() + 1).

    The step is -lr * sign(c) * mask * 5 / (3 + 1); the mean rule (before
    mask_scale) gave 5 / 3, (k + 1) / k = 4/3 times larger.
    """
    tx = gradax.lion(1.0, weight_decay=0.0, cautious=True)
    np.testing.assert_allclose(_second_step(tx), -_KEPT * 5 / 4, rtol=1e-6)
    mean = gradax.lion(1.0, weight_decay=0.0, cautious=True, mask_scale="mean")
    np.testing.assert_allclose(_second_step(mean), -_KEPT * 5 / 3, rtol=1e-6)


def test_cautious_adamw_step_is_c_adamw_formula():
    """c_adamw.py (C-Optim, commit 2c0517c): mask / max(mask.mean(), 1e-3)."""
    b1, b2, eps = 0.9, 0.999, 1e-8
    m = b1 * (1 - b1) * _G1 + (1 - b1) * _G2
    v = b2 * (1 - b2) * _G1**2 + (1 - b2) * _G2**2
    direction = (m / (1 - b1**2)) / (np.sqrt(v / (1 - b2**2)) + eps)
    keep = np.abs(_KEPT)
    expected = -direction * keep / (3 / 5)
    tx = gradax.adamw(1.0, b1, b2, eps, weight_decay=0.0, cautious=True)
    # float32 bias correction 1 - b2**2 = 2e-3 carries a relative error of
    # about 2**-24 / 2e-3 ~ 3e-5 into the step.
    np.testing.assert_allclose(_second_step(tx), expected, rtol=1e-4)
    np.testing.assert_allclose(_second_step(tx), -direction * keep * 5 / 3, rtol=1e-4)
    # The numel rule would give 5 / 4: the two rules are told apart.
    assert not np.allclose(_second_step(tx)[0], -direction[0] * 5 / 4, rtol=1e-2)


def test_caution_mask_scale_rejects_unknown_names():
    with pytest.raises(ValueError, match="mask_scale"):
        gradax.lion(0.1, mask_scale="sum")
    with pytest.raises(ValueError, match="mask_scale"):
        caution(jnp.ones(2), jnp.ones(2), mask_scale="sum")


@pytest.mark.parametrize("name", CAUTIOUS)
def test_cautious_false_is_exactly_optax(name):
    extra = {"cautious_weight_decay": False} if name in WITH_DECAY else {}
    ours = getattr(gradax, name)(0.05, cautious=False, **extra)
    theirs = getattr(optax, name)(0.05)
    params = _tree(jax.random.key(3))
    a = jax.jit(lambda p: _trajectory(ours, p, 15, _quadratic))(params)
    b = jax.jit(lambda p: _trajectory(theirs, p, 15, _quadratic))(params)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)


def test_hyperparameters_change_without_recompiling():
    traces = []

    @jax.jit
    def step(tx, state, grads, params):
        traces.append(None)
        return tx.update(grads, state, params)

    params = _tree(jax.random.key(8))
    for lr, wd in [(0.1, 0.0), (0.01, 0.3)]:
        tx = gradax.lion(lr, weight_decay=wd, cautious=True, cautious_weight_decay=True)
        step(tx, tx.init(params), params, params)
    assert len(traces) == 1
