"""`int8_blockwise(code="float")`: the small-float code, its scales, its bound."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradax

# Mantissa bits and largest rank, from the code's definition in the docstring
# of gradax.int8_blockwise: 3 bits after the sign (7 in all), or 4 of 8.
SHAPES = {True: (3, 127), False: (4, 255)}


def _code_values(scale: float, signed: bool) -> np.ndarray:
    """Rank 0 .. top's values for one scale, from the definition (float64).

    Rank `top` is the scale; each rank below is one step of an m-bit
    mantissa down: `top - r = q 2**m + t` steps below is
    `scale 2**-q (1 - t / 2**(m+1))`.
    """
    m, top = SHAPES[signed]
    below = top - np.arange(top + 1)
    q, t = np.divmod(below, 2**m)
    values = scale * 2.0**-q * (1 - t / 2.0 ** (m + 1))
    values[0] = 0.0
    return values


def _codes_of_ranks(signed: bool) -> tuple[np.ndarray, np.ndarray]:
    """Every code and its rank: signed codes are ±rank, unsigned rank - 128."""
    _, top = SHAPES[signed]
    if signed:
        codes = np.arange(-top, top + 1)
        return codes.astype(np.int8), np.abs(codes)
    ranks = np.arange(top + 1)
    return (ranks - 128).astype(np.int8), ranks


@pytest.mark.parametrize("signed", [True, False])
@pytest.mark.parametrize("scale", [1.0, 2.0**-40, 2.0**20])
def test_codes_decode_to_their_definition(signed, scale):
    codes, ranks = _codes_of_ranks(signed)
    q = gradax.QuantizedArray(
        jnp.asarray(codes), jnp.full(1, scale, jnp.float32), len(codes), signed, "float"
    )
    sign = np.where(codes < 0, -1, 1) if signed else 1
    expected = _code_values(scale, signed)[ranks] * sign
    # Every value is a float32 exactly (m-bit mantissas, exponents in range).
    np.testing.assert_array_equal(np.asarray(q.load(), np.float64), expected)
    # Encoding the code's own values gives back their codes and the scale.
    again = gradax.QuantizedArray.store(q.load(), len(codes), signed, "float")
    np.testing.assert_array_equal(again.codes, codes)
    assert float(again.scales[0]) == scale


@pytest.mark.parametrize("signed", [True, False])
def test_nearest_code_error_bound_and_scales(signed):
    rng = np.random.default_rng(0)
    # Blocks spanning 12 decades, so every binade of the code and the range
    # below the smallest value are hit.
    x = rng.standard_normal((6, 512)) * 10.0 ** rng.uniform(-12, 2, (6, 512))
    x = np.abs(x) if not signed else x
    x[0, :300] = 0.0  # a block that is mostly zeros
    x[1, :128] = 0.0  # an all-zero block
    x = x.astype(np.float32)
    q = gradax.QuantizedArray.store(x, 128, signed, "float")
    scales = np.asarray(q.scales, np.float64)
    # The scale is the smallest power of two at or above the block's largest
    # magnitude rounded to m mantissa bits: so above the maximum by less
    # than a factor 2, below it by at most the rounding (a maximum just above
    # a power of two rounds down to it); 0 for an all-zero block.
    m, _ = SHAPES[signed]
    block_max = np.abs(x.astype(np.float64)).reshape(6, 4, 128).max(axis=-1)
    assert scales[1, 0] == 0.0 and block_max[1, 0] == 0.0
    live = block_max > 0
    assert np.all(np.log2(scales[live]) == np.round(np.log2(scales[live])))
    above = block_max <= scales * (1 + 2.0 ** -(m + 1))
    assert np.all(above & (scales < 2 * block_max) | ~live)
    loaded = np.asarray(q.load(), np.float64).reshape(6, 4, 128)
    xs = x.astype(np.float64).reshape(6, 4, 128)
    for i, j in zip(*np.nonzero(live), strict=True):
        values = _code_values(scales[i, j], signed)
        candidates = np.concatenate([-values[1:], values]) if signed else values
        distance = np.abs(xs[i, j, :, None] - candidates)
        nearest = candidates[distance.argmin(axis=-1)]
        smallest = values[1]
        tiny = (np.abs(xs[i, j]) < smallest / 2) & (xs[i, j] != 0)
        # Nearest value (ties are measure zero for these draws), except that
        # a nonzero value never becomes zero: below half the smallest value
        # it is stored as that value.
        np.testing.assert_array_equal(loaded[i, j][~tiny], nearest[~tiny])
        np.testing.assert_array_equal(
            np.abs(loaded[i, j][tiny]), np.full(tiny.sum(), smallest)
        )
        # Hence the bound: within a binade the spacing is 2**-m of its
        # bottom, so the error is at most 2**-(m+1) of the value.
        error = np.abs(loaded[i, j] - xs[i, j])
        inside = np.abs(xs[i, j]) >= smallest
        assert np.all(error[inside] <= 2.0 ** -(m + 1) * np.abs(xs[i, j][inside]))
    assert np.all((loaded != 0) == (xs != 0))
    # Storing the loaded values again keeps codes and scales.
    again = gradax.QuantizedArray.store(q.load(), 128, signed, "float")
    np.testing.assert_array_equal(again.codes, q.codes)
    np.testing.assert_array_equal(again.scales, q.scales)


@pytest.mark.parametrize("signed", [True, False])
def test_non_finite_values_get_valid_codes(signed):
    # 3e38 is finite but above 2**127, the largest scale.
    x = jnp.asarray([1.0, jnp.inf, jnp.nan, 3e38] + [0.5] * 12, jnp.float32)
    x = x if not signed else -x
    q = gradax.QuantizedArray.store(x, 16, signed, "float")
    _, top = SHAPES[signed]
    codes = np.asarray(q.codes, np.int32)
    ranks = np.abs(codes) if signed else codes + 128
    assert np.all((1 <= ranks) & (ranks <= top))
    assert np.all(ranks[1:4] == top)  # inf, NaN and 3e38: the top rank
    assert float(q.scales[0]) == 2.0**127  # capped, finite


def test_state_bytes_and_zeros():
    spec = gradax.int8_blockwise(code="float")
    params = {"w": jnp.zeros((64, 1024))}
    tx = gradax.adamw(1e-3, mu_dtype=spec, nu_dtype=spec)
    state = tx.init(params)
    mu, nu = state[0].mu["w"], state[0].nu["w"]
    assert (mu.code, nu.code) == ("float", "float")
    assert mu.codes.dtype == jnp.int8 and mu.scales.dtype == jnp.float32
    # Two moments of 1 byte an element and 4 bytes a block of 256 (the
    # count is a 4-byte scalar): 2 (1 + 4/256) = 2.03 bytes a parameter.
    moments = sum(x.nbytes for x in (mu.codes, mu.scales, nu.codes, nu.scales))
    assert moments / params["w"].size == 2 * (1 + 4 / 256)
    # init's codes are the code of zero.
    assert float(jnp.abs(mu.load()).max()) == 0 and float(nu.load().max()) == 0


def test_bad_code_is_refused():
    with pytest.raises(ValueError, match=r"code must be one of \('dynamic', 'float'\)"):
        gradax.int8_blockwise(code="fp8")
    with pytest.raises(ValueError, match="code must be one of"):
        gradax.int8_blockwise(code=None)  # type: ignore[arg-type]


def test_state_types_stable_under_scan_and_cond():
    spec = gradax.int8_blockwise(64, code="float")
    tx = gradax.adamw(1e-2, mu_dtype=spec, nu_dtype=spec)
    params = {"w": jnp.linspace(-1.0, 1.0, 512).reshape(4, 128)}
    state = tx.init(params)

    def body(state, _):
        updates, new = tx.update(params, state, params)
        # Either branch must give the same types for lax.cond to accept it.
        finite = jnp.isfinite(updates["w"]).all()
        return jax.lax.cond(finite, lambda: new, lambda: state), None

    final, _ = jax.jit(lambda s: jax.lax.scan(body, s, None, length=3))(state)
    assert jax.tree.structure(final) == jax.tree.structure(state)
    for a, b in zip(jax.tree.leaves(final), jax.tree.leaves(state), strict=True):
        assert (a.shape, a.dtype) == (b.shape, b.dtype)
    assert float(jnp.abs(final[0].mu["w"].load()).max()) > 0  # it did step


def _assert_stored_alike(q, alone):
    """The same storage of the same values, whatever XLA fused around it.

    Scales are block maxima (exact) or powers of two taken from them, and
    the float code's codes are integer operations on the bits: all exact.
    The dynamic map rounds `|x| / scale * slope + offset` to its nearest
    rank, and XLA may contract that product and sum into one rounding in
    one program and not in another: a value within an ulp or so of a tie
    (about 1e-6 of draws) may then land one code apart. So there, at most
    one code in a thousand may differ, by one.
    """
    assert (q.signed, q.code, q.block_size) == (
        alone.signed,
        alone.code,
        alone.block_size,
    )
    np.testing.assert_array_equal(q.scales, alone.scales)
    if q.code == "float":
        np.testing.assert_array_equal(q.codes, alone.codes)
        return
    apart = np.abs(np.asarray(q.codes, np.int32) - np.asarray(alone.codes, np.int32))
    assert apart.max() <= 1 and np.count_nonzero(apart) <= apart.size / 1000


def test_paired_store_gives_the_codes_of_separate_stores():
    # store_all pairs a signed and an unsigned leaf of one code, shape and
    # block size into one reduction; every other leaf is stored alone.
    # Either way each leaf's codes and scales are those store_like gives.
    keys = jax.random.split(jax.random.PRNGKey(3), 10)
    shapes = [(8, 256), (8, 256), (8, 256), (3, 200), (8, 256), (3, 200), (600,)]
    shapes += [(600,), (8, 256), (600,)]
    signs = [True, False, True, False, False, True, False, True, True, False]
    # The dynamic leaves: a pair of (600,) (indices 6 and 7; 9 is left over)
    # and one (8, 256) with no partner of its code.
    codes = ["float"] * 6 + ["dynamic"] * 4
    values = [
        jax.random.normal(k, s) * 10.0 ** jax.random.uniform(k, s, minval=-6, maxval=2)
        for k, s in zip(keys, shapes, strict=True)
    ]
    values = [
        v if signed else jnp.abs(v) for v, signed in zip(values, signs, strict=True)
    ]
    olds = [
        gradax.int8_blockwise(64, code=code).zeros_like(v, signed=signed)
        for v, signed, code in zip(values, signs, codes, strict=True)
    ]
    store_all = gradax.QuantizedArray.store_all
    paired = jax.jit(store_all)(values, olds)
    for x, old, q in zip(values, olds, paired, strict=True):
        _assert_stored_alike(q, old.store_like(x))
    with pytest.raises(TypeError, match=r"shape \(8, 255\)"):
        store_all([jnp.ones((8, 255))], olds[:1])


@pytest.mark.parametrize("code", ["float", "dynamic"])
def test_adamw_step_matches_the_unpaired_store(monkeypatch, code):
    # The 8-bit AdamW step stores mu and nu through the paired reduction;
    # its state and updates are those of storing each leaf alone.
    import gradax._core.state_guard as guard

    spec = gradax.int8_blockwise(code=code)
    # Decays of 1/2 and gradients of multiples of 1/64 (below 2 in size):
    # every product in the moments' update is exact, so the new moments are
    # the same whether or not XLA contracts a product and a sum (it fuses
    # the two programs differently), and so is what is stored.
    tx = gradax.adamw(1e-2, b1=0.5, b2=0.5, mu_dtype=spec, nu_dtype=spec)
    params = {
        "a": jnp.linspace(-1.0, 1.0, 4096).reshape(16, 256),
        "b": jnp.ones((300,)),
    }
    grads = jax.tree.map(lambda p: jnp.round(64 * jnp.cos(7 * p)) / 64 + 0.125, params)
    state = tx.init(params)

    def two_steps(state):
        u, state = tx.update(grads, state, params)
        return tx.update(grads, state, params)

    paired = jax.jit(two_steps)(state)

    def one_by_one(values, olds):
        return [old.store_like(x) for x, old in zip(values, olds, strict=True)]

    monkeypatch.setattr(guard, "store_all", one_by_one)
    # A new function: jit(two_steps) again would reuse the first trace.
    alone = jax.jit(lambda state: two_steps(state))(state)
    # The state is the same, code for code (see _assert_stored_alike).
    from gradax.precision.int8 import is_quantized

    leaves = [
        jax.tree.leaves(state, is_leaf=is_quantized) for state in (paired[1], alone[1])
    ]
    for a, b in zip(*leaves, strict=True):
        if is_quantized(a):
            _assert_stored_alike(a, b)
        else:
            np.testing.assert_array_equal(a, b)
    # The updates come from the same float32 moments, but XLA fuses the two
    # programs differently, and a product-sum may or may not be contracted
    # into one rounding: a few float32 ulps (2**-23 relative each) apart.
    for a, b in zip(jax.tree.leaves(paired[0]), jax.tree.leaves(alone[0]), strict=True):
        np.testing.assert_allclose(a, b, rtol=8 * 2.0**-23, atol=0)
