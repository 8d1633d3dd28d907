"""Scion against its update rule written out in NumPy."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradax

KELLER = (3.4445, -4.7750, 2.0315)
EPS = 1e-8


def _newton_schulz(g, steps=5):
    a, b, c = KELLER
    tall = g.shape[0] > g.shape[1]
    x = g.T if tall else g
    x = x / (np.linalg.norm(x) + EPS)
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if tall else x


def _lmo(name, m):
    """Scion's oracles for (fan_in, fan_out) matrices, and RMS for the rest."""
    if name == "rms":
        return m / (np.sqrt(np.mean(m**2)) + EPS)
    fan_in, fan_out = m.shape
    if name == "spectral":
        return np.sqrt(fan_out / fan_in) * _newton_schulz(m)
    if name == "sign":
        return np.sign(m) / fan_in
    if name == "row":
        return m / (np.sqrt(np.sum(m**2, axis=1, keepdims=True) / fan_out) + EPS)
    norm = np.sqrt(np.sum(m**2, axis=0, keepdims=True))
    return m / (norm * np.sqrt(fan_in) + EPS)


PARAMS = {
    "embed": (6, 4),
    "w": (4, 5),
    "b": (5,),
    "lm_head": (5, 6),
}
LMOS = {"embed": "row", "w": "spectral", "b": "rms", "lm_head": "sign"}
RADII = {"row": 2.0, "spectral": 1.5, "rms": 1.5, "sign": 4.0, "column": 2.0}


@pytest.mark.parametrize("unconstrained", [False, True])
def test_matches_numpy_update_rule(unconstrained):
    rng = np.random.default_rng(0)
    params = {k: rng.normal(size=s).astype(np.float32) for k, s in PARAMS.items()}
    grads = [
        {k: rng.normal(size=s).astype(np.float32) for k, s in PARAMS.items()}
        for _ in range(3)
    ]
    lr, beta = 0.1, 0.8
    tx = gradax.scion(
        lr,
        beta,
        radius=1.5,
        embedding_radius=2.0,
        head_radius=4.0,
        unconstrained=unconstrained,
    )
    assert gradax.scion_lmos(params) == LMOS

    @jax.jit
    def run(params):
        state = tx.init(params)
        for g in grads:
            u, state = tx.update(g, state, params)
            params = gradax.apply_updates(params, u)
        return params

    ours = run(jax.tree.map(jnp.asarray, params))
    expected = {k: v.astype(np.float64) for k, v in params.items()}
    momentum = {k: np.zeros(s) for k, s in PARAMS.items()}
    for g in grads:
        for k in PARAMS:
            momentum[k] = beta * momentum[k] + (1 - beta) * g[k]
            name = LMOS[k]
            step = RADII[name] * _lmo(name, momentum[k])
            decay = 0.0 if unconstrained else lr
            expected[k] = (1 - decay) * expected[k] - lr * step
    for k in PARAMS:
        # float32 against float64: five Newton–Schulz steps on a 4 x 5
        # matrix lose a few ulps each (relative 1e-5 measured).
        np.testing.assert_allclose(ours[k], expected[k], rtol=1e-4, atol=1e-5)


def test_column_lmo_stacked_weights_and_overrides():
    rng = np.random.default_rng(1)
    m = rng.normal(size=(3, 4)).astype(np.float32)
    stack = rng.normal(size=(2, 4, 3)).astype(np.float32)
    tx = gradax.scale_by_scion(
        beta=0.0,
        lmo={"m": "column", "stack": "spectral"},
        weight_dimension_numbers="auto",
    )
    params = {"m": jnp.asarray(m), "stack": jnp.asarray(stack)}
    out, _ = tx.update(params, tx.init(params), params)
    np.testing.assert_allclose(out["m"], _lmo("column", m), rtol=1e-5)
    for i in range(2):  # each slice of a stack is its own matrix
        np.testing.assert_allclose(
            out["stack"][i], _lmo("spectral", stack[i]), rtol=1e-4, atol=1e-5
        )


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="learning_rate"):
        gradax.scion(1.5)  # Frank-Wolfe needs a step <= 1
    gradax.scion(1.5, unconstrained=True)
    with pytest.raises(ValueError, match="lmo"):
        gradax.scale_by_scion(lmo="frobenius")
    with pytest.raises(ValueError, match="radius"):
        gradax.scion(0.1, radius=-1.0)
    tx = gradax.scale_by_scion(lmo="spectral")
    with pytest.raises(ValueError, match="needs a matrix"):
        tx.update(jnp.ones(3), tx.init(jnp.ones(3)))
