"""gradax.stochastic_rounding: unbiased, reproducible, under jit, scan, sharding."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax_versions import axis_type_params, set_mesh

import gradax

N = 100_000  # independent draws: one per element of a large parameter


def _round_once(dtype, x: float, seed: int = 0):
    """Round the float32 value ``x`` from the 16-bit parameter nearest below.

    ``sgd(1)`` turns the gradient ``-(x - p)`` into the step ``x - p``.
    """
    p = jnp.full((N,), x, jnp.float32).astype(dtype)
    p = jnp.where(p.astype(jnp.float32) > x, jnp.nextafter(p, -jnp.inf), p)
    tx = gradax.stochastic_rounding(gradax.sgd(1.0), seed=seed)
    step = jnp.full((N,), x, jnp.float32) - p.astype(jnp.float32)
    updates, state = tx.update(-step, tx.init(p), p)
    return p, gradax.apply_updates(p, updates), state


VALUES = [1.0 + 2.0**-12, 1.0 + 3 * 2.0**-12, -3.3e-3, 5.0e-7, 7.77e4, 1.1e-30]
# float16 has no 7.77e4 (its largest is 65504) and no 1.1e-30.
CASES = [(jnp.bfloat16, x) for x in VALUES] + [(jnp.float16, x) for x in VALUES[:4]]


@pytest.mark.parametrize("dtype, x", CASES)
def test_unbiased(dtype, x):
    """Each draw rounds to one of the two neighbours lo <= x <= hi; its error
    e is hi - x with probability q = (x - lo) / d (d = hi - lo) and lo - x
    otherwise, so E[e] = 0 and Var[e] = q (1 - q) d**2 <= d**2 / 4. The mean
    of N independent draws then has standard deviation at most
    d / (2 sqrt(N)); we allow 5 of them (a false alarm has probability below
    1e-6; the draws are fixed by the seed, so the test is deterministic).
    float16's probability is drawn as a float32 uniform, a bias below
    2**-23 d, far inside the bound; 5e-7 is a float16 subnormal."""
    lo, new, _ = _round_once(dtype, x)
    hi = jnp.nextafter(lo, jnp.inf)
    d = float(hi[0].astype(jnp.float32) - lo[0].astype(jnp.float32))
    assert bool(jnp.all((new == lo) | (new == hi)))
    x32 = float(np.float32(x))
    q = (x32 - float(lo[0])) / d
    assert 0.0 < q < 1.0  # x lies strictly between: both outcomes are possible
    errors = new.astype(jnp.float32) - x32
    mean = float(jnp.mean(errors))
    assert abs(mean) <= 5 * d / (2 * np.sqrt(N)), (mean, d)
    # Both neighbours were drawn about as often as q says (same bound on the
    # fraction: std sqrt(q (1 - q) / N) <= 1 / (2 sqrt(N))).
    frac_up = float(jnp.mean(new == hi))
    assert abs(frac_up - q) <= 5 / (2 * np.sqrt(N))


def test_round_to_nearest_stalls_where_stochastic_rounding_moves():
    """1000 steps of -1e-4 from 1 in bfloat16 (spacing 2**-8 below 1, so a
    step is 2.6% of it): round-to-nearest never moves; stochastic rounding
    ends near 1 - 0.1. Its error is a sum of 1000 independent zero-mean
    rounding errors of at most d = 2**-8, std <= d sqrt(1000) / 2 = 0.062
    per element; over 64 elements the mean's std is 0.0077, allowed 5x."""
    params = jnp.ones(64, jnp.bfloat16)
    grads = jnp.full(64, 1e-4, jnp.bfloat16)
    plain = gradax.sgd(1.0)
    tx = gradax.stochastic_rounding(gradax.sgd(1.0), seed=3)

    @jax.jit
    def run(p):
        def body(c, _):
            p, q, s = c
            u, _ = plain.update(grads, plain.init(p), p)
            v, s = tx.update(grads, s, q)
            return (gradax.apply_updates(p, u), gradax.apply_updates(q, v), s), None

        return jax.lax.scan(body, (p, p, tx.init(p)), None, 1000)[0]

    nearest, rounded, _ = run(params)
    assert bool(jnp.all(nearest == 1))
    target = 1.0 - 1000 * float(jnp.asarray(1e-4, jnp.bfloat16))
    assert abs(float(jnp.mean(rounded.astype(jnp.float32))) - target) < 5 * 0.0077


def test_deterministic_for_a_seed_and_resumable_from_the_state():
    _, a, sa = _round_once(jnp.bfloat16, 1.0 + 2.0**-9, seed=7)
    _, b, sb = _round_once(jnp.bfloat16, 1.0 + 2.0**-9, seed=7)
    _, c, _ = _round_once(jnp.bfloat16, 1.0 + 2.0**-9, seed=8)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert np.array_equal(
        jax.random.key_data(sa.rng_key), jax.random.key_data(sb.rng_key)
    )
    # A key given directly equals the seed it came from.
    tx = gradax.stochastic_rounding(gradax.sgd(1.0), key=jax.random.key(7))
    key = tx.init(jnp.ones(2, jnp.bfloat16)).rng_key
    assert np.array_equal(
        jax.random.key_data(key), jax.random.key_data(jax.random.key(7))
    )
    with pytest.raises(ValueError, match="key or seed"):
        gradax.stochastic_rounding(gradax.sgd(1.0), seed=1, key=jax.random.key(1))
    with pytest.raises(ValueError, match="seed"):
        gradax.stochastic_rounding(gradax.sgd(1.0), seed=0.5)


def _trajectory(tx, params, grads, steps):
    state = tx.init(params)
    out = []
    for _ in range(steps):
        u, state = tx.update(grads, state, params)
        params = gradax.apply_updates(params, u)
        out.append(params)
    return out, state


def test_jit_scan_and_eager_agree():
    params = {
        "w": jnp.linspace(-1, 1, 24, dtype=jnp.bfloat16).reshape(4, 6),
        "f": jnp.linspace(0, 1, 6, dtype=jnp.float16),
        "x": jnp.ones(3),
    }
    grads = jax.tree.map(lambda p: (0.01 * p + 1e-3).astype(p.dtype), params)
    tx = gradax.stochastic_rounding(gradax.adamw(1e-3, weight_decay=0.1), seed=1)
    eager, _ = _trajectory(tx, params, grads, 4)

    @jax.jit
    def scanned(p):
        def body(c, _):
            p, s = c
            u, s = tx.update(grads, s, p)
            p = gradax.apply_updates(p, u)
            return (p, s), p

        return jax.lax.scan(body, (p, tx.init(p)), None, 4)[1]

    history = scanned(params)
    for i in range(4):
        for k in params:
            np.testing.assert_array_equal(
                np.asarray(history[k][i]).view(np.uint16 if k != "x" else np.uint32),
                np.asarray(eager[i][k]).view(np.uint16 if k != "x" else np.uint32),
                err_msg=f"{k} step {i}",
            )
    assert eager[-1]["w"].dtype == jnp.bfloat16
    assert eager[-1]["f"].dtype == jnp.float16


def test_state_types_stable_under_cond_while_and_scan():
    params = {"m": jnp.ones((4, 3), jnp.bfloat16), "v": jnp.ones(5, jnp.float16)}
    q8 = gradax.int8_blockwise(block_size=4)
    tx = gradax.stochastic_rounding(gradax.adamw(0.1, mu_dtype=q8, nu_dtype=q8))
    grads = jax.tree.map(lambda p: 0.1 * p, params)

    def step(s):
        return tx.update(grads, s, params)[1]

    def every_use(s):
        s = jax.lax.cond(True, step, lambda s: s, s)
        s = jax.lax.while_loop(
            lambda c: c[0] < 2, lambda c: (c[0] + 1, step(c[1])), (0, s)
        )[1]
        return jax.lax.scan(lambda s, _: (step(s), None), s, None, length=2)[0]

    avals = lambda t: jax.tree.map(lambda x: (x.shape, x.dtype), t)  # noqa: E731
    state = jax.eval_shape(tx.init, params)
    assert avals(jax.eval_shape(every_use, state)) == avals(state)
    jax.jit(every_use)(tx.init(params))


def test_a_skipped_step_leaves_the_key_and_everything_else():
    """stochastic_rounding(apply_if_finite(...)): on a NaN step the inner
    updates are zeros, nothing rounds and the key stays; the next finite
    step equals a run that never saw the NaN, bit for bit (with
    keep_key_on_zero_steps=True)."""
    inner = gradax.apply_if_finite(gradax.adamw(1e-2), max_consecutive_errors=3)
    tx = gradax.stochastic_rounding(inner, seed=2, keep_key_on_zero_steps=True)
    params = jnp.linspace(-1, 1, 32, dtype=jnp.bfloat16)
    good = 0.1 * params.astype(jnp.float32)
    bad = good.at[3].set(jnp.nan)
    step = jax.jit(lambda g, s, p: tx.update(g, s, p))

    def run(p, s, seq):
        for g in seq:
            u, s = step(g, s, p)
            p = gradax.apply_updates(p, u)
        return p, s

    p1, s1 = run(params, tx.init(params), [good])
    p2, s2 = run(p1, s1, [bad])
    np.testing.assert_array_equal(
        np.asarray(p1).view(np.uint16), np.asarray(p2).view(np.uint16)
    )
    np.testing.assert_array_equal(
        jax.random.key_data(s1.rng_key), jax.random.key_data(s2.rng_key)
    )
    for a, b in zip(
        jax.tree.leaves(s1.inner_state.inner_state),
        jax.tree.leaves(s2.inner_state.inner_state),
        strict=True,
    ):
        np.testing.assert_array_equal(a, b)
    p3, _ = run(p2, s2, [-good])
    ref, _ = run(p1, s1, [-good])
    np.testing.assert_array_equal(
        np.asarray(p3).view(np.uint16), np.asarray(ref).view(np.uint16)
    )
    assert not np.array_equal(np.asarray(p3), np.asarray(p1))  # the steps moved


@pytest.mark.parametrize("axis_type", axis_type_params("Auto", "Explicit"))
def test_sharded_equals_unsharded(axis_type):
    """Random bits do not depend on the sharding (a hash of each element's
    index in the whole array), so a sharded run rounds exactly as one
    device does."""
    assert len(jax.devices()) >= 8
    params = {
        "m": jax.random.normal(jax.random.key(1), (8, 6)).astype(jnp.bfloat16),
        "v": jnp.linspace(-1, 1, 8, dtype=jnp.bfloat16),
    }
    grads = jax.tree.map(lambda p: 0.01 * p.astype(jnp.float32), params)
    tx = gradax.stochastic_rounding(gradax.adamw(1e-3, weight_decay=0.1), seed=5)

    @jax.jit
    def two_steps(g, p):
        s = tx.init(p)
        for _ in range(2):
            u, s = tx.update(g, s, p)
            p = gradax.apply_updates(p, u)
        return p

    single = two_steps(grads, params)
    spec = jax.sharding.PartitionSpec
    kind = getattr(jax.sharding.AxisType, axis_type)
    mesh = jax.make_mesh((4, 2), ("a", "b"), axis_types=(kind, kind))
    shardings = {
        "m": jax.NamedSharding(mesh, spec("a", "b")),
        "v": jax.NamedSharding(mesh, spec("a")),
    }
    with set_mesh(mesh):
        sharded = two_steps(
            jax.device_put(grads, shardings), jax.device_put(params, shardings)
        )
    assert sharded["m"].sharding.is_equivalent_to(shardings["m"], 2)
    for k in params:
        np.testing.assert_array_equal(
            np.asarray(single[k]).view(np.uint16),
            np.asarray(sharded[k]).view(np.uint16),
            err_msg=axis_type,
        )


# The random bits: a keyed hash of the element index (gradax/precision/_hash.py).
# Each test below compares a count of M independent fair or Bernoulli(f)
# events with its mean; the count's fraction has standard deviation
# sqrt(f (1 - f) / M) <= 1 / (2 sqrt(M)), and 5 of them are allowed (a false
# alarm below 1e-6 a comparison; the bits are fixed by the keys, so each
# test is deterministic).


def _up(f: float, shape, key) -> jax.Array:
    """Whether ``1 + f * 2**-7`` (bfloat16 spacing 2**-7 at 1) rounded up."""
    from gradax.precision.rounding import round_bfloat16

    x = jnp.full(shape, 1.0 + f * 2.0**-7, jnp.float32)
    return round_bfloat16(x, key) > 1


@pytest.mark.parametrize("f", [2.0**-16, 1 / 16, 0.25, 0.5, 0.75, 1 - 2.0**-10])
def test_hash_rounds_up_at_the_rate_of_the_fraction(f):
    """The 16 noise bits are uniform enough: rounding up happens with the
    probability f at every threshold, including f = 2**-16 (one noise value
    in 65536 rounds up) and the top bits (f near 1)."""
    m = 2**18
    up = _up(f, (m,), jax.random.key(11))
    sigma = np.sqrt(f * (1 - f) / m)
    assert abs(float(jnp.mean(up)) - f) <= 5 * sigma + 2.0**-20, f


def test_hash_bits_differ_across_steps_and_leaves():
    """The wrapper's bits: each step's decisions for the same elements are
    independent of the previous step's (agreement f**2 + (1 - f)**2 = 1/2
    at f = 1/2), and two leaves of one step likewise."""
    n, steps = 4096, 33
    p = jnp.ones(n, jnp.bfloat16)
    g = jnp.full(n, -(2.0**-8), jnp.float32)  # half the spacing 2**-7 at 1
    tx = gradax.stochastic_rounding(gradax.sgd(1.0), seed=5)
    update = jax.jit(lambda s: tx.update({"a": g, "b": g}, s, {"a": p, "b": p}))
    state = tx.init({"a": p, "b": p})
    ups = []
    for _ in range(steps):
        u, state = update(state)
        ups.append(np.stack([np.asarray(u["a"]) > 0, np.asarray(u["b"]) > 0]))
    ups = np.array(ups)  # (steps, 2 leaves, n)
    m = ups[:, 0].size
    assert abs(ups[:, 0].mean() - 0.5) <= 5 / (2 * np.sqrt(m))
    pairs = (steps - 1) * n
    agree_steps = np.mean(ups[1:, 0] == ups[:-1, 0])
    assert abs(agree_steps - 0.5) <= 5 / (2 * np.sqrt(pairs))
    agree_leaves = np.mean(ups[:, 0] == ups[:, 1])
    assert abs(agree_leaves - 0.5) <= 5 / (2 * np.sqrt(m))


def test_hash_has_no_pattern_along_adjacent_indices():
    """Decisions at indices i and i + lag agree half the time for every lag
    up to 300 (a row of a (512, 300) leaf included, so neighbours along
    either axis), and each of the 16 noise bits is 1 half the time."""
    from gradax.precision._hash import hash_bits

    shape = (512, 300)
    up = np.asarray(_up(0.5, shape, jax.random.key(12))).reshape(-1)
    for lag in range(1, 301):
        agree = np.mean(up[lag:] == up[:-lag])
        assert abs(agree - 0.5) <= 5 / (2 * np.sqrt(up.size - lag)), lag
    bits = np.asarray(hash_bits(jax.random.key(13), shape)).reshape(-1) >> 16
    for b in range(16):
        ones = np.mean((bits >> b) & 1)
        assert abs(ones - 0.5) <= 5 / (2 * np.sqrt(bits.size)), b


def test_without_the_zero_step_check_the_key_moves_every_step():
    """The default, keep_key_on_zero_steps=False: steps that move round
    exactly as with the check (same key, same bits); a skipped step still
    rounds nothing but splits the key."""
    inner = gradax.apply_if_finite(gradax.adamw(1e-2), max_consecutive_errors=3)
    exact = gradax.stochastic_rounding(inner, seed=2, keep_key_on_zero_steps=True)
    fast = gradax.stochastic_rounding(inner, seed=2)
    params = jnp.linspace(-1, 1, 32, dtype=jnp.bfloat16)
    good = 0.1 * params.astype(jnp.float32)
    bad = good.at[3].set(jnp.nan)
    bits = lambda x: np.asarray(x).view(np.uint16)  # noqa: E731
    key = lambda s: np.asarray(jax.random.key_data(s.rng_key))  # noqa: E731
    out = {}
    for name, tx in (("exact", exact), ("fast", fast)):
        u, s = tx.update(good, tx.init(params), params)
        p = gradax.apply_updates(params, u)
        v, s2 = tx.update(bad, s, p)
        assert np.array_equal(bits(gradax.apply_updates(p, v)), bits(p))
        out[name] = (p, key(s), key(s2))
    np.testing.assert_array_equal(bits(out["exact"][0]), bits(out["fast"][0]))
    np.testing.assert_array_equal(out["exact"][1], out["fast"][1])
    np.testing.assert_array_equal(out["exact"][2], out["exact"][1])  # held
    assert not np.array_equal(out["fast"][2], out["fast"][1])  # split
