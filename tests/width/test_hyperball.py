"""MuonH and AdamH against the hyperball formula, written out in NumPy.

W_{t+1} = R Norm(W_t - lr R Norm(u_t)), Norm(X) = X / ||X||_F, R = ||W_0||_F
(Wen et al., arXiv:2606.16899); u_t is Adam's update, computed here from its
definition, or Muon's, taken from gradax.scale_by_muon (tested elsewhere).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

import gradax


def _norm(x):
    return x / np.linalg.norm(x)


def _params():
    k1, k2 = jax.random.split(jax.random.key(3))
    return {"w": jax.random.normal(k1, (6, 4)), "b": jax.random.normal(k2, (4,))}


def _grads(i):
    k1, k2 = jax.random.split(jax.random.key(10 + i))
    return {"w": jax.random.normal(k1, (6, 4)), "b": jax.random.normal(k2, (4,))}


def _run(tx, steps=4):
    params = _params()
    state = tx.init(params)
    for i in range(steps):
        updates, state = tx.update(_grads(i), state, params)
        params = gradax.apply_updates(params, updates)
    return params


@pytest.mark.parametrize("radius", [None, 3.0])
def test_adamh_matches_the_formula(radius):
    lr, b1, b2, eps = 0.1, 0.9, 0.999, 1e-8
    got = _run(gradax.adamh(lr, radius=radius))
    w = np.asarray(_params()["w"], np.float64)
    r = np.linalg.norm(w) if radius is None else radius
    m = v = np.zeros_like(w)
    for t in range(1, 5):
        g = np.asarray(_grads(t - 1)["w"], np.float64)
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        u = (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
        w = r * _norm(w - lr * r * _norm(u))
    np.testing.assert_allclose(got["w"], w, rtol=2e-5, atol=2e-6)
    assert np.linalg.norm(got["w"]) == pytest.approx(r, rel=1e-5)


def test_muonh_matches_the_formula_and_leaves_vectors_to_adamw():
    lr = 0.05
    got = _run(gradax.muonh(lr))
    direction = gradax.scale_by_muon()
    state = direction.init({"w": _params()["w"]})
    w = np.asarray(_params()["w"], np.float64)
    r = np.linalg.norm(w)
    for i in range(4):
        o, state = direction.update({"w": _grads(i)["w"]}, state)
        w = r * _norm(w - lr * r * _norm(np.asarray(o["w"], np.float64)))
    np.testing.assert_allclose(got["w"], w, rtol=2e-5, atol=2e-6)
    # The other group is gradax.muon's AdamW group.
    np.testing.assert_array_equal(got["b"], _run(gradax.muon(lr))["b"])


def test_update_without_params_is_refused():
    tx = gradax.muonh(0.1)
    params = _params()
    with pytest.raises(ValueError, match="needs params"):
        tx.update(_grads(0), tx.init(params))


def test_radius_must_be_positive():
    with pytest.raises(ValueError, match="radius"):
        gradax.adamh(0.1, radius=0.0)
