"""QK-Clip (MuonClip): per-head rescaling of query and key weights."""

from __future__ import annotations

import importlib.util
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradax

H, DH, D, T, B = 4, 6, 16, 5, 3


def bits(x):
    x = np.asarray(x)
    return x.view(np.dtype(f"u{x.dtype.itemsize}"))


def weights(seed=0, scale=3.0, shape=(D, H * DH)):
    kq, kk = jax.random.split(jax.random.key(seed))
    return scale * jax.random.normal(kq, shape), scale * jax.random.normal(kk, shape)


def max_logits(w_q, w_k, x):
    """S_h of plain multi-head attention with fused (d, H * dh) weights."""
    q = (x @ w_q).reshape(B, T, H, -1)
    k = (x @ w_k).reshape(B, T, H, -1)
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(q.shape[-1])
    return logits.max(axis=(0, 2, 3))


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_offending_heads_scaled_and_others_bit_identical(dtype):
    w_q, w_k = (w.astype(dtype) for w in weights())
    s = jnp.array([150.0, 80.0, 100.0, jnp.nan])  # at tau or NaN: untouched
    q, k = jax.jit(gradax.qk_clip)(w_q, w_k, s, 100.0)
    for new, old in ((q, w_q), (k, w_k)):
        assert new.dtype == dtype
        new, old = new.reshape(D, H, DH), old.reshape(D, H, DH)
        for h in (1, 2, 3):
            np.testing.assert_array_equal(bits(new[:, h]), bits(old[:, h]))
        expected = old[:, 0].astype(jnp.float32) * np.sqrt(100.0 / 150.0)
        np.testing.assert_array_equal(new[:, 0], expected.astype(dtype))


def test_recomputed_max_logit_equals_tau():
    w_q, w_k = weights(scale=2.0)
    x = jax.random.normal(jax.random.key(7), (B, T, D))
    s = max_logits(w_q, w_k, x)
    tau = float(jnp.sort(s)[1])  # the two largest heads are over the cap
    assert int(jnp.sum(s > tau)) == 2
    after = max_logits(*gradax.qk_clip(w_q, w_k, s, tau), x)
    np.testing.assert_allclose(after, jnp.minimum(s, tau), rtol=1e-5)
    np.testing.assert_array_equal(after[s <= tau], s[s <= tau])


def test_mla_mode():
    nope, rope, dv = 4, 2, 3
    keys = jax.random.split(jax.random.key(3), 4)
    w_q = 2.0 * jax.random.normal(keys[0], (D, H * (nope + rope)))
    w_kv = 2.0 * jax.random.normal(keys[1], (D, H * (nope + dv)))  # [k_nope | v]
    w_kr = 2.0 * jax.random.normal(keys[2], (D, rope))  # shared rotary key
    x = jax.random.normal(keys[3], (B, T, D))

    def logits_max(w_q, w_kv):
        q = (x @ w_q).reshape(B, T, H, nope + rope)
        kv = (x @ w_kv).reshape(B, T, H, nope + dv)
        k_rope = x @ w_kr
        scores = jnp.einsum("bqhd,bkhd->bhqk", q[..., :nope], kv[..., :nope])
        scores += jnp.einsum("bqhd,bkd->bhqk", q[..., nope:], k_rope)
        return (scores / jnp.sqrt(nope + rope)).max(axis=(0, 2, 3))

    s = logits_max(w_q, w_kv)
    tau = float(jnp.sort(s)[1])
    q, kv = gradax.qk_clip(w_q, w_kv, s, tau, rope_dim=rope, k_nope_dim=nope)
    np.testing.assert_allclose(logits_max(q, kv), jnp.minimum(s, tau), rtol=1e-5)
    gamma = np.where(s > tau, tau / s, 1.0)
    ratio_q = np.asarray(q / w_q).reshape(D, H, nope + rope)
    np.testing.assert_allclose(
        ratio_q[..., :nope],
        np.broadcast_to(np.sqrt(gamma)[:, None], (D, H, nope)),
        rtol=1e-6,
    )
    np.testing.assert_allclose(
        ratio_q[..., nope:], np.broadcast_to(gamma[:, None], (D, H, rope)), rtol=1e-6
    )
    kv, w_kv = np.asarray(kv).reshape(D, H, -1), np.asarray(w_kv).reshape(D, H, -1)
    np.testing.assert_array_equal(kv[..., nope:], w_kv[..., nope:])  # values kept
    np.testing.assert_allclose(
        kv[..., :nope] / w_kv[..., :nope],
        np.broadcast_to(np.sqrt(gamma)[:, None], (D, H, nope)),
        rtol=1e-6,
    )


def test_pytrees_and_split_layout_agree_with_fused():
    w_q, w_k = weights()
    bias_q, bias_k = jnp.arange(H * DH) / 10.0, jnp.ones(H * DH)
    s = jnp.array([300.0, 10.0, 120.0, 99.0])
    fused_q, fused_k = gradax.qk_clip(
        {"kernel": w_q, "bias": bias_q}, {"kernel": w_k, "bias": bias_k}, s
    )
    split_q, split_k = gradax.qk_clip(
        {"kernel": w_q.reshape(D, H, DH), "bias": bias_q.reshape(H, DH)},
        {"kernel": w_k.reshape(D, H, DH), "bias": bias_k.reshape(H, DH)},
        s,
        head_axis=-2,
    )
    for a, b in ((fused_q, split_q), (fused_k, split_k)):
        for name in ("kernel", "bias"):
            np.testing.assert_array_equal(a[name], b[name].reshape(a[name].shape))
    # float32 rounds tau / s, its root and the product: 1.25 ulps at most
    # from the exact bias / sqrt(3), more than the default rtol of 1e-7.
    eps = np.finfo(np.float32).eps
    expected = np.asarray(bias_q[:DH], np.float64) / np.sqrt(3.0)
    np.testing.assert_allclose(fused_q["bias"][:DH], expected, rtol=2 * eps)


def test_vmap_over_stacked_layers():
    layers = [weights(seed) for seed in range(3)]
    w_q = jnp.stack([q for q, _ in layers])
    w_k = jnp.stack([k for _, k in layers])
    s = jnp.array([[150.0, 80, 100, 50], [10, 20, 30, 400], [101, 1, 1, 1]])
    q, k = jax.vmap(gradax.qk_clip, in_axes=(0, 0, 0, None))(w_q, w_k, s, 100.0)
    for i, (lq, lk) in enumerate(layers):
        one_q, one_k = gradax.qk_clip(lq, lk, s[i], 100.0)
        np.testing.assert_array_equal(q[i], one_q)
        np.testing.assert_array_equal(k[i], one_k)


def test_errors_name_the_problem():
    w_q, w_k = weights()
    s = jnp.ones(H)
    with pytest.raises(ValueError, match="one key head per query head"):
        gradax.qk_clip(w_q, w_k[:, : 2 * DH], s)  # grouped-query keys
    with pytest.raises(ValueError, match="multiple"):
        gradax.qk_clip(w_q[:, :-1], w_k[:, :-1], s)
    with pytest.raises(ValueError, match="shape"):
        gradax.qk_clip(w_q, w_k, jnp.ones((2, H)))
    with pytest.raises(ValueError, match="MLA"):
        gradax.qk_clip(w_q.reshape(D, DH, H), w_k.reshape(D, DH, H), s, rope_dim=2)


@pytest.mark.parametrize("tau", [0.0, -1.0, float("nan")])
def test_tau_must_be_positive(tau):
    # tau = 0 would zero every clipped head's weights.
    w_q, w_k = weights()
    with pytest.raises(ValueError, match=r"tau must be in \(0, inf\]"):
        gradax.qk_clip(w_q, w_k, jnp.full(H, 400.0), tau=tau)


def test_infinite_or_traced_tau_is_accepted():
    w_q, w_k = weights()
    s = jnp.full(H, 400.0)
    q, k = gradax.qk_clip(w_q, w_k, s, tau=float("inf"))
    np.testing.assert_array_equal(q, w_q)
    np.testing.assert_array_equal(k, w_k)
    jitted = jax.jit(lambda tau: gradax.qk_clip(w_q, w_k, s, tau))
    np.testing.assert_array_equal(jitted(100.0)[0], gradax.qk_clip(w_q, w_k, s)[0])


def test_example_runs_and_caps_the_logits():
    path = pathlib.Path(__file__).parents[2] / "examples" / "muonclip.py"
    spec = importlib.util.spec_from_file_location("muonclip_example", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    # main returns each head's S_h per step; the last entry is recomputed
    # with the final weights, after the last clip.
    curves = module.main(steps=4)
    after = jnp.array([curve[-1] for curve in curves.values()])
    assert bool(jnp.all(jnp.isfinite(after)))
    assert float(after.max()) < 1.1 * module.TAU
