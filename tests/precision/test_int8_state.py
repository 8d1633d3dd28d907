"""8-bit blockwise optimizer state: the code map, the error bound, the guarantees."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest
from jax_versions import axis_type_params, explicit_axes, set_mesh

import gradax
from gradax.precision.int8 import moment_zeros

P = jax.sharding.PartitionSpec


def _decade_bound(a: np.ndarray, signed: bool) -> np.ndarray:
    """Half the spacing of the map around ``|a|``, from the map's definition.

    Decade ``E`` (``10**-(E+1) < |a| <= 10**-E``) holds ``2**F`` evenly spaced
    values with ``F = 6 - E`` (signed) or ``7 - E`` (unsigned) fraction bits,
    step ``0.9 * 10**-E / 2**F``; its bottom neighbour ``10**-(E+1)`` is a value
    too. Below the smallest value ``c`` a nonzero ``a`` is stored as ``c``.
    """
    bits, lowest = (7, 6) if signed else (8, 7)
    m = np.abs(a).astype(np.float64)
    exponent = np.clip(np.floor(-np.log10(np.maximum(m, 1e-30))), 0, lowest)
    step = 0.9 * 10.0**-exponent / 2.0 ** (bits - 1 - exponent)
    smallest = 10.0**-lowest
    return np.where(m < smallest, smallest, step / 2)


def test_code_maps_follow_their_definition():
    signed = gradax.dynamic_code_map(signed=True)
    unsigned = gradax.dynamic_code_map(signed=False)
    assert len(signed) == 255 and len(unsigned) == 256  # signed: +0 == -0
    np.testing.assert_array_equal(signed, -signed[::-1])  # symmetric, ±1 exact
    assert unsigned[0] == 0 and unsigned[-1] == 1 and unsigned[1] == np.float32(1e-7)
    # Densest near zero: 64 values in (0.1, 1], 32 in (0.01, 0.1], ...
    for exponent, count in enumerate([64, 32, 16, 8, 4, 2, 1]):
        inside = (signed > 10.0 ** -(exponent + 1)) & (signed <= 10.0**-exponent)
        assert inside.sum() == count, exponent
    assert np.all(np.diff(signed) > 0) and np.all(np.diff(unsigned) > 0)
    # Each decade ends at its float32 power of ten, so a block's largest
    # magnitude (1.0) and the decade boundaries survive a round trip.
    for exponent in range(8):
        assert np.float32(10.0**-exponent) in unsigned, exponent
        assert exponent == 7 or np.float32(10.0**-exponent) in signed, exponent


@pytest.mark.parametrize("signed", [True, False])
def test_codes_decode_to_the_map_bit_for_bit(signed):
    # load computes each value from its code; it must give the listed map
    # exactly, under jit as well (no fused multiply-add or reciprocal).
    table = gradax.dynamic_code_map(signed)
    codes = (np.arange(len(table)) - 128).astype(np.int8)
    q = gradax.QuantizedArray(
        jnp.asarray(codes), jnp.ones(1, jnp.float32), len(table), signed
    )
    for loaded in (q.load(), jax.jit(lambda q: q.load())(q)):
        np.testing.assert_array_equal(
            np.asarray(loaded).view(np.int32), table.view(np.int32)
        )
    # And encoding the map's own values gives back their codes.
    again = gradax.QuantizedArray.store(table, len(table), signed)
    np.testing.assert_array_equal(again.codes, codes)


@pytest.mark.parametrize("signed", [True, False])
def test_per_block_error_bound_and_nearest_code(signed):
    rng = np.random.default_rng(0)
    # Blocks whose entries span 12 decades, so every decade of the map is hit.
    x = rng.standard_normal((6, 512)) * 10.0 ** rng.uniform(-10, 0, (6, 512))
    x = np.abs(x) if not signed else x
    x[0, :300] = 0.0  # a block that is mostly zeros
    x = x.astype(np.float32)
    q = gradax.QuantizedArray.store(x, 128, signed)
    assert q.scales.shape == (6, 4)
    loaded = np.asarray(q.load(), np.float64)
    scale = np.repeat(np.asarray(q.scales, np.float64), 128, axis=-1)
    np.testing.assert_array_equal(scale.max(axis=-1), np.abs(x).max(axis=-1))
    a = np.divide(x, scale, out=np.zeros_like(scale), where=scale > 0)
    # float32 arithmetic (x / s, then table * s) adds at most a few ulps of s.
    slack = 4 * np.finfo(np.float32).eps * scale
    error = np.abs(loaded - x)
    assert np.all(error <= _decade_bound(a, signed) * scale + slack)
    # Nearest value of the map, except that nonzero values never become zero.
    table = gradax.dynamic_code_map(signed).astype(np.float64)
    nearest = np.abs(a[..., None] - table).min(axis=-1) * scale
    tiny = np.abs(a) < 10.0 ** -(6 if signed else 7)
    assert np.all((error <= nearest + slack) | tiny)
    assert np.all((loaded != 0) == (x != 0))
    # Storing the loaded values again gives the same codes (update stability).
    again = gradax.QuantizedArray.store(q.load(), 128, signed)
    np.testing.assert_array_equal(again.codes, q.codes)
    np.testing.assert_array_equal(again.scales, q.scales)


def test_layouts_small_and_complex_leaves():
    spec = gradax.int8_blockwise(block_size=8)
    params = {
        "row": jnp.ones((3, 20)),  # blocked along the last axis, short last block
        "flat": jnp.ones((6, 3)),  # last axis shorter than a block: flattened
        "small": jnp.ones(7, jnp.bfloat16),  # smaller than a block: float32
        "complex": jnp.ones(16, jnp.complex64),
    }
    mu = gradax.tree.zeros_like(params, spec)
    assert mu["row"].codes.shape == (3, 20) and mu["row"].scales.shape == (3, 3)
    assert mu["flat"].codes.shape == (6, 3) and mu["flat"].scales.shape == (3,)
    assert mu["small"].dtype == jnp.float32
    assert mu["complex"].dtype == jnp.complex64
    # A second moment (>= 0) uses the unsigned map; gradax.tree.zeros_like
    # keeps optax's signature, so optimizers ask through moment_zeros.
    nu = moment_zeros(params, spec, nonnegative=True)
    assert mu["row"].signed and not nu["row"].signed


def test_bad_block_size_is_refused():
    with pytest.raises(ValueError, match="block_size must be a positive integer"):
        gradax.int8_blockwise(block_size=0)
    with pytest.raises(ValueError, match="block_size"):
        gradax.int8_blockwise(block_size=2.5)


def _problem():
    rng = np.random.default_rng(1)
    params = {
        "w": jnp.asarray(rng.standard_normal((16, 256)), jnp.float32) / 8,
        "b": jnp.zeros(8),
    }
    x = jnp.asarray(rng.standard_normal((32, 16)), jnp.float32)

    def loss(p):
        return jnp.mean(jnp.tanh(x @ p["w"])[:, :8] ** 2) + jnp.sum(p["b"] ** 2)

    return params, loss


def _run(tx, params, loss, steps, state=None):
    @jax.jit
    def step(p, s):
        u, s = tx.update(jax.grad(loss)(p), s, p)
        return gradax.apply_updates(p, u), s

    state = tx.init(params) if state is None else state
    for _ in range(steps):
        params, state = step(params, state)
    return params, state


@pytest.mark.parametrize("code", ["dynamic", "float"])
def test_state_keeps_its_types_and_tracks_float32_adam(code):
    params, loss = _problem()
    spec = gradax.int8_blockwise(64, code=code)
    tx = gradax.adamw(1e-2, mu_dtype=spec, nu_dtype=spec)
    p8, state = _run(tx, params, loss, 20)
    first = tx.init(params)
    assert jax.tree.structure(state) == jax.tree.structure(first)
    kinds = jax.tree.map(lambda x: (x.shape, x.dtype), (state, first))
    assert kinds[0] == kinds[1]
    p32, _ = _run(gradax.adamw(1e-2), params, loss, 20)
    # Both descend, and the 8-bit run stays near the float32 one (a moment's
    # error is at most 0.7% of its block's scale with the dynamic map, 6% of
    # its value with the float code).
    assert loss(p8) < 0.5 * loss(params)
    np.testing.assert_allclose(loss(p8), loss(p32), rtol=0.05)


@pytest.mark.parametrize("code", ["dynamic", "float"])
def test_orbax_round_trip_is_bit_for_bit(tmp_path, code):
    params, loss = _problem()
    spec = gradax.int8_blockwise(64, code=code)
    tx = gradax.chain(gradax.clip_by_global_norm(1.0), gradax.adam(1e-2, mu_dtype=spec))
    params, state = _run(tx, params, loss, 3)
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(tmp_path / "ckpt", {"params": params, "state": state})
    checkpointer.wait_until_finished()
    abstract = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
        {"params": params, "state": state},
    )
    restored = checkpointer.restore(tmp_path / "ckpt", abstract)
    assert jax.tree.structure(restored) == jax.tree.structure(abstract)
    for a, b in zip(jax.tree.leaves(restored), jax.tree.leaves(abstract), strict=True):
        assert a.dtype == b.dtype
    for a, b in zip(
        jax.tree.leaves(restored), jax.tree.leaves((params, state)), strict=True
    ):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    straight = _run(tx, params, loss, 3, state)
    resumed = _run(tx, restored["params"], loss, 3, restored["state"])
    for a, b in zip(jax.tree.leaves(straight), jax.tree.leaves(resumed), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("code", ["dynamic", "float"])
@pytest.mark.parametrize("axis_type", axis_type_params("Auto", "Explicit"))
def test_blocks_stay_within_shards(axis_type, code):
    """Sharded == unsharded bit for bit, with no communication in the update.

    ``w``'s last axis is split 8 ways into shards of 64 = one block each;
    ``f``'s rows are split 8 ways and it is blocked over its flattened rows
    (64 elements a shard, one block). Under Explicit axes a leaf blocked over
    its flattened elements is gathered (documented in docs/memory.md), so
    there only ``w`` is checked for communication-free blocks.
    """
    kind = getattr(jax.sharding.AxisType, axis_type)
    mesh = jax.make_mesh((8,), ("d",), axis_types=(kind,))
    keys = jax.random.split(jax.random.key(0), 2)
    params = {"w": jax.random.normal(keys[0], (4, 512))}
    if axis_type == "Auto":
        params["f"] = jax.random.normal(keys[1], (64, 8))
    grads = jax.tree.map(lambda p: 0.3 * p + 0.01, params)
    spec = gradax.int8_blockwise(64, code=code)
    tx = gradax.adam(1e-2, mu_dtype=spec, nu_dtype=spec)
    step = jax.jit(lambda g, s, p: tx.update(g, s, p))
    single = step(grads, tx.init(params), params)
    shardings = {
        "w": jax.NamedSharding(mesh, P(None, "d")),
        "f": jax.NamedSharding(mesh, P("d", None)),
    }
    shardings = {k: shardings[k] for k in params}
    with set_mesh(mesh):
        sp, sg = jax.device_put(params, shardings), jax.device_put(grads, shardings)
        state = jax.jit(tx.init)(sp)
        sharded = step(sg, state, sp)
        compiled = step.lower(sg, state, sp).compile().as_text()
    codes = sharded[1][0].mu["w"].codes
    assert codes.sharding.is_equivalent_to(shardings["w"], 2)
    for op in ("all-reduce", "all-gather", "collective-permute", "all-to-all"):
        assert op not in compiled, op
    for a, b in zip(jax.tree.leaves(single), jax.tree.leaves(sharded), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@explicit_axes
@pytest.mark.parametrize("code", ["dynamic", "float"])
def test_parameter_shaped_and_blocks_view_paths_agree(code):
    # Without Explicit axes, codes are encoded and decoded in the leaf's own
    # shape; under them, in the (..., blocks, block_size) view. Both must
    # give the same bits, for short last blocks and flattened leaves too.
    rng = np.random.default_rng(3)
    leaves = {
        "padded_rows": (5, 300),  # 300 = 2 blocks of 128 and a short one
        "flattened": (40, 7),  # last axis shorter than a block
        "whole_blocks": (3, 256),
    }
    mesh = jax.make_mesh((1,), ("d",), axis_types=(jax.sharding.AxisType.Explicit,))
    for name, shape in leaves.items():
        x = rng.standard_normal(shape) * 10.0 ** rng.uniform(-8, 0, shape)
        x = jnp.asarray(x, jnp.float32)
        for signed in (True, False):
            value = x if signed else jnp.abs(x)

            def round_trip(v, signed=signed):
                q = gradax.QuantizedArray.store(v, 128, signed, code)
                return q.codes, q.scales, q.load()

            plain = jax.jit(round_trip)(value)
            with set_mesh(mesh):
                explicit = jax.jit(round_trip)(jax.device_put(value, P("d")))
            for a, b in zip(plain, explicit, strict=True):
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b), name)


@pytest.mark.parametrize("code", ["dynamic", "float"])
def test_zero_point_second_moment_is_never_zero(code):
    # One large and many tiny second moments in a block: stored as zero, the
    # tiny ones would make Adam's step m / eps.
    v = jnp.concatenate([jnp.ones(1), jnp.full(255, 1e-12)])
    q = gradax.QuantizedArray.store(v, 256, signed=False, code=code)
    assert float(q.load()[1:].min()) > 0


@pytest.mark.parametrize("name", ["normuon", "adamuon", "dion", "dion2"])
def test_muon_variants_take_8bit_momentum(name):
    # Their momentum is quantized; the leaves a spec cannot hold (Dion's
    # basis Q, NorMuon's per-neuron moment, AdaMuon's second moment) stay
    # float32.
    params, loss = _problem()
    spec = gradax.int8_blockwise(64)
    tx = getattr(gradax, name)(0.02, mu_dtype=spec)
    state = tx.init(params)
    quantized = [
        x
        for x in jax.tree.leaves(
            state, is_leaf=lambda x: isinstance(x, gradax.QuantizedArray)
        )
        if isinstance(x, gradax.QuantizedArray)
    ]
    assert any(q.shape == params["w"].shape for q in quantized)
    p8, final = _run(tx, params, loss, 10, state)
    assert jax.tree.structure(final) == jax.tree.structure(state)
    assert loss(p8) < loss(params)
