"""Split orthogonalization: per head and fused QKV blocks (gradax.MuonSplit)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax_versions import set_mesh

import gradax
from gradax.orthogonal.coefficients import resolve_coefficients

D, H, DH = 16, 4, 8
# Heads of very different sizes: orthogonalizing the whole kernel would let
# the large heads crush the small ones' singular values.
HEAD_SCALES = jnp.asarray([1.0, 10.0, 0.1, 3.0])


def weights():
    keys = jax.random.split(jax.random.key(0), 3)
    heads = jax.random.normal(keys[0], (D, H, DH)) * HEAD_SCALES[:, None]
    return {
        # (d, H * dh) attention kernel: heads along the output axis.
        "attn": heads.reshape(D, H * DH),
        # (H * dh, d) output projection: heads along the reduction axis.
        "proj": jax.random.normal(keys[1], (H * DH, D)),
        # Two stacked layers of a fused [q | k | v] kernel, dq = 16, dk = dv = 8.
        "qkv": jax.random.normal(keys[2], (2, D, 32)),
    }


SPLITS = {
    "attn": gradax.MuonSplit(num_heads=H),
    "proj": gradax.MuonSplit(num_heads=H, split_axis=0),
    "qkv": gradax.MuonSplit(1, 2, split_sizes=(16, 8, 8)),
}


def band(preset):
    """Where the preset's iteration sends singular values in [0.01, 1] (all of
    them here: each block is normalized by its own Frobenius norm)."""
    table, _ = resolve_coefficients(preset, None)
    s = np.linspace(0.01, 1.0, 100_001)
    for a, b, c in np.asarray(table, np.float64):
        s = a * s + b * s**3 + c * s**5
    # float32 iterations land within a few ulps of the exact scalar map.
    return s.min() - 1e-4, s.max() + 1e-4


PRESETS = ("keller", "you5")


def blocks_of(name, x):
    """The blocks of a leaf of :func:`weights`, one at a time (a flat list)."""
    if name == "attn":
        return [x[:, h * DH : (h + 1) * DH] for h in range(H)]
    if name == "proj":
        return [x[h * DH : (h + 1) * DH, :] for h in range(H)]
    return [
        x[layer, :, a:b] for layer in range(2) for a, b in ((0, 16), (16, 24), (24, 32))
    ]


def orthogonal_direction(preset, dims, params, **options):
    # beta = 0 without Nesterov or bias correction: the direction is NS(G).
    tx = gradax.scale_by_muon(
        preset,
        beta=0.0,
        eps=1e-7,
        nesterov=False,
        bias_correction=False,
        weight_dimension_numbers=dims,
        **options,
    )
    updates, _ = tx.update(params, tx.init(params), params)
    return updates


@pytest.mark.parametrize("preset", PRESETS)
def test_each_block_is_orthogonalized_on_its_own(preset):
    params = weights()
    split, whole = jax.jit(
        lambda p: (
            orthogonal_direction(preset, SPLITS, p),
            orthogonal_direction(preset, gradax.MuonDimensionNumbers(-2, -1), p),
        )
    )(params)
    low, high = band(preset)
    for name, x in params.items():
        for block, o in zip(
            blocks_of(name, x), blocks_of(name, split[name]), strict=True
        ):
            one = gradax.orthogonalize(block, coefficients=preset, eps=1e-7)
            np.testing.assert_allclose(o, one, atol=1e-5, err_msg=name)
            sigma = np.linalg.svd(np.asarray(o), compute_uv=False)
            assert low <= sigma.min() and sigma.max() <= high, (name, sigma)
    # Orthogonalized whole, the head scaled by 0.1 stays far below the band.
    small_head = blocks_of("attn", whole["attn"])[2]
    assert np.linalg.svd(np.asarray(small_head), compute_uv=False).max() < low


def _dot_count(fn, *args):
    return str(jax.make_jaxpr(fn)(*args)).count("dot_general")


def test_one_batched_call_per_block_shape():
    params = weights()

    def per_leaf(name):
        return _dot_count(
            lambda x: orthogonal_direction("keller", SPLITS[name], x), params[name]
        )

    def single(shape):
        return _dot_count(gradax.orthogonalize, jnp.zeros(shape))

    # H equal heads: one iteration on a (H, ...) stack, as many matmuls as one.
    assert per_leaf("attn") == single((D, DH))
    assert per_leaf("proj") == single((DH, D))
    # Unequal [q | k | v]: one call for q, one for k and v together.
    assert per_leaf("qkv") == single((D, 16)) + single((D, 8))


def test_distributed_equals_local():
    params = weights()
    local = jax.jit(
        lambda p: orthogonal_direction("keller", SPLITS, p, distributed=False)
    )(params)
    mesh = jax.make_mesh((8,), ("d",))
    with set_mesh(mesh):
        spread = jax.jit(
            lambda p: orthogonal_direction("keller", SPLITS, p, distributed=True)
        )(params)
    for name in params:
        np.testing.assert_allclose(spread[name], local[name], atol=1e-5, err_msg=name)


def test_shape_factor_per_block():
    # [q | k | v] with blocks (16, 16), (16, 8), (16, 8): sqrt(fan_out/fan_in).
    tx = gradax.scale_by_shape(SPLITS["qkv"], shape_scaling="spectral")
    ones = jnp.ones((2, D, 32))
    scaled, _ = tx.update(ones, tx.init(ones))
    expected = np.concatenate([np.ones(16), np.full(16, 0.5**0.5)])
    np.testing.assert_allclose(scaled, np.broadcast_to(expected, (2, D, 32)), rtol=1e-6)


def test_muon_with_split_routing_and_report(capsys):
    params = {**weights(), "bias": jnp.zeros(D)}
    dims = {**SPLITS, "bias": None}
    labels, _ = gradax.muon_labels(params, dims)
    report = capsys.readouterr().out
    assert labels == {"attn": "muon", "proj": "muon", "qkv": "muon", "bias": "adam"}
    assert "4 x (16, 8)" in report and "4 x (8, 16)" in report
    assert "2 x (16, 16) + 4 x (16, 8)" in report
    tx = gradax.muon(0.02, muon_weight_dimension_numbers=dims)
    updates, _ = jax.jit(tx.update)(params, tx.init(params), params)
    assert all(bool(jnp.all(jnp.isfinite(u))) for u in jax.tree.leaves(updates))


@pytest.mark.parametrize("make", [gradax.normuon, gradax.adamuon])
def test_normuon_and_adamuon_normalize_each_head(make):
    params = {"attn": weights()["attn"]}
    tx = make(1.0, muon_weight_dimension_numbers={"attn": SPLITS["attn"]})
    updates, _ = tx.update(params, tx.init(params), params)
    # Each head, not only the whole kernel, has the update RMS 0.2.
    for block in blocks_of("attn", updates["attn"]):
        np.testing.assert_allclose(jnp.sqrt(jnp.mean(block**2)), 0.2, rtol=1e-4)
    with pytest.raises(ValueError, match="need equal blocks"):
        qkv = {"qkv": weights()["qkv"]}
        make(1.0, muon_weight_dimension_numbers={"qkv": SPLITS["qkv"]}).init(qkv)


@pytest.mark.parametrize(
    ("dims", "message"),
    [
        (gradax.MuonSplit(num_heads=5), "num_heads=5 must divide"),
        (gradax.MuonSplit(split_sizes=(16, 8)), "must add up to"),
        (gradax.MuonSplit(num_heads=4, split_sizes=(16, 16)), "not both"),
        (gradax.MuonSplit(num_heads=0), "num_heads must be an integer >= 1"),
        (gradax.MuonSplit(1, 2, num_heads=2, split_axis=0), "reduction or output axis"),
    ],
)
def test_bad_splits_are_named(dims, message):
    params = (
        {"w": jnp.zeros((2, D, 32))}
        if dims.split_axis == 0
        else {"w": jnp.zeros((D, 32))}
    )
    with pytest.raises(ValueError, match=message):
        gradax.muon(0.02, muon_weight_dimension_numbers={"w": dims}).init(params)


def test_optimizers_without_blocks_refuse_a_split():
    params = {"w": jnp.zeros((D, 32))}
    tx = gradax.dion(0.02, muon_weight_dimension_numbers={"w": SPLITS["attn"]})
    with pytest.raises(ValueError, match="only muon, normuon and adamuon"):
        tx.init(params)
