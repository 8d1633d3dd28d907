"""gradax.master_weights: a bfloat16 run whose rebuilt master is a float32 run."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax_versions import axis_type_params, set_mesh

import gradax


def _bits(x) -> np.ndarray:
    x = np.asarray(x)
    return x.view(np.uint32 if x.dtype.itemsize == 4 else np.uint16)


def _master0():
    key = jax.random.key(0)
    # Arbitrary float32 values (not bfloat16 ones), a few of them tiny, so
    # coordinates cross zero and exponents change during the run.
    return {
        "w": jax.random.normal(key, (16, 8)) * 0.1,
        "b": jnp.linspace(-1e-3, 1e-3, 8),
    }


def _loss(p):
    return jnp.sum(jnp.sin(3.0 * p["w"])) + jnp.sum((p["b"] - 0.3) ** 2 * p["w"][0])


INNER = {
    "adamw": lambda: gradax.adamw(1e-2, weight_decay=0.1),
    "muon": lambda: gradax.muon(0.02, weight_decay=0.1),
}


@pytest.mark.parametrize("name", sorted(INNER))
def test_master_follows_float32_run_bit_for_bit(name):
    """50 steps: the rebuilt masters equal a float32 run's params bit for bit
    at every step, and the bfloat16 params are their (truncated) high halves.
    The gradients are taken at the master, so both runs see the same ones.

    Both runs are eager, operation by operation, so they execute the same
    float32 operations in the same order. Compiled, each program is fused on
    its own and XLA decides per fusion whether to contract a multiply and an
    add into one rounding: under the test suite's compile options
    (conftest.py) the jitted master program and the jitted plain one were
    seen 1-2 ulps apart after some steps, under XLA's default options equal.
    That is a property of compiling two programs, not of the master."""
    inner = INNER[name]()
    tx = gradax.master_weights(inner)
    master0 = _master0()
    params, state = tx.init_with_master(master0)
    grad = jax.jit(jax.grad(_loss))  # one program, shared by both runs

    p32, s32 = master0, inner.init(master0)
    for _ in range(50):
        master = tx.master_params(params, state)
        for k in master0:
            np.testing.assert_array_equal(_bits(master[k]), _bits(p32[k]), err_msg=k)
            high = (_bits(p32[k]) >> 16).astype(np.uint16)
            np.testing.assert_array_equal(_bits(params[k]), high, err_msg=k)
        u32, s32 = inner.update(grad(p32), s32, p32)
        p32 = gradax.apply_updates(p32, u32)
        updates, state = tx.update(grad(master), state, params)
        params = gradax.apply_updates(params, updates)
    final = tx.master_params(params, state)
    for k in master0:
        assert params[k].dtype == jnp.bfloat16
        np.testing.assert_array_equal(_bits(final[k]), _bits(p32[k]), err_msg=k)
    # The run moved: not a comparison of two unchanged trees.
    assert float(jnp.max(jnp.abs(p32["w"] - master0["w"]))) > 1e-2


def _bf16_grid(rng, n, low_exp, high_exp):
    """Random bfloat16 values of both signs, exponents in [low_exp, high_exp]."""
    mantissa = rng.integers(128, 256, n) / 128.0
    exponent = rng.integers(low_exp, high_exp + 1, n)
    sign = rng.choice([-1.0, 1.0], n)
    return jnp.asarray(sign * mantissa * 2.0**exponent, jnp.bfloat16)


def _applied(old, new):
    """What apply_updates makes of old with the wrapper's update toward new."""
    from gradax.precision._common import step_to

    return gradax.apply_updates(old, step_to(new, old))


def test_apply_updates_reaches_the_new_high_half_exactly():
    """The update u = p' - p (float32) gives exactly p' from p under
    apply_updates whenever p' = 0 or |p'| >= 2**-15 |p| (the derivation is in
    master_weights' docstring): sign changes, zero, tiny and huge values,
    exponents moving by up to 15 binades down and any number up."""
    rng = np.random.default_rng(0)
    n = 200_000
    old = _bf16_grid(rng, n, -120, 120)
    shift = rng.integers(-15, 60, n)  # binades from old to new
    new = _bf16_grid(rng, n, 0, 0).astype(jnp.float32) * jnp.abs(
        old.astype(jnp.float32)
    )
    new = (new * jnp.asarray(2.0**shift, jnp.float32)).astype(jnp.bfloat16)
    # Exponents past float32's range overflow to inf or flush to zero:
    # keep finite, normal targets, plus exact zeros and equal pairs.
    keep = jnp.isfinite(new) & (jnp.abs(new.astype(jnp.float32)) >= 2.0**-120)
    new = jnp.where(keep, new, jnp.zeros_like(new))
    new = new.at[:100].set(old[:100])
    # Every pair meets the condition (new is 0 or at most 2**15 times smaller,
    # the mantissa ratio being at least 1/2 -- so new >= 2**-16 |old| here;
    # the condition in the docstring is conservative by the mantissa factor).
    got = _applied(old, new)
    np.testing.assert_array_equal(_bits(got), _bits(new))
    assert int(jnp.sum(jnp.sign(new) == -jnp.sign(old))) > 10_000  # sign changes
    assert int(jnp.sum(new == 0)) > 100


def test_a_collapse_by_more_than_2_to_the_16_is_the_documented_limit():
    """The one case documented as inexact exists: from p = 1, no float32
    update reaches p' = 1.5 * 2**-30 (p + u lies on a grid of 2**-24)."""
    old = jnp.asarray([1.0], jnp.bfloat16)
    new = jnp.asarray([1.5 * 2.0**-30], jnp.bfloat16)
    got = _applied(old, new)
    assert float(got[0]) != float(new[0])
    # Off by less than the grid spacing 2**-23 |p| claimed in the docstring.
    assert abs(float(got[0]) - float(new[0])) < 2.0**-23


def test_mixed_tree_float32_leaves_pass_through():
    params = {"h": jnp.ones((3,), jnp.bfloat16), "f": jnp.arange(3.0)}
    inner = gradax.adam(0.1)
    tx = gradax.master_weights(inner)
    state = tx.init(params)
    assert isinstance(state.low_bits["f"], gradax.MaskedNode)
    assert state.low_bits["h"].dtype == jnp.uint16
    # The inner state is made for float32 (the master), not bfloat16.
    assert state.inner_state[0].mu["h"].dtype == jnp.float32
    grads = {"h": jnp.full((3,), 0.5, jnp.bfloat16), "f": jnp.ones(3)}
    updates, state = tx.update(grads, state, params)
    assert updates["h"].dtype == jnp.float32
    wide = {"h": params["h"].astype(jnp.float32), "f": params["f"]}
    expected, _ = inner.update(
        jax.tree.map(lambda g: g.astype(jnp.float32), grads), inner.init(wide), wide
    )
    np.testing.assert_array_equal(updates["f"], expected["f"])


def test_float16_and_missing_params_are_refused():
    tx = gradax.master_weights(gradax.sgd(0.1))
    with pytest.raises(ValueError, match=r"float16 at \['x'\]"):
        tx.init({"x": jnp.ones(2, jnp.float16), "y": jnp.ones(2, jnp.bfloat16)})
    params = jnp.ones(2, jnp.bfloat16)
    with pytest.raises(ValueError, match="needs the parameters"):
        tx.update(params, tx.init(params))


def test_state_types_stable_under_cond_while_and_scan():
    params = {"m": jnp.ones((4, 3), jnp.bfloat16), "v": jnp.ones(5)}
    q8 = gradax.int8_blockwise(block_size=4)
    tx = gradax.master_weights(gradax.adamw(0.1, mu_dtype=q8, nu_dtype=q8))
    grads = jax.tree.map(lambda p: 0.1 * p, params)

    def step(s):
        return tx.update(grads, s, params)[1]

    def every_use(s):
        s = jax.lax.cond(True, step, lambda s: s, s)
        s = jax.lax.while_loop(
            lambda c: c[0] < 2, lambda c: (c[0] + 1, step(c[1])), (0, s)
        )[1]
        return jax.lax.scan(lambda s, _: (step(s), None), s, None, length=2)[0]

    state = jax.eval_shape(tx.init, params)
    new_state = jax.eval_shape(every_use, state)
    avals = lambda t: jax.tree.map(lambda x: (x.shape, x.dtype), t)  # noqa: E731
    assert avals(new_state) == avals(state)
    # And it runs: 8-bit inner state, low bits that change.
    state = tx.init(params)
    assert int(jnp.max(jax.jit(every_use)(state).low_bits["m"])) > 0


def test_skipped_non_finite_step_leaves_no_trace():
    """master_weights(apply_if_finite(...)): a NaN step changes neither the
    params nor the low bits nor the inner optimizer's state, and the next
    finite step equals that of a run that never saw the NaN."""
    inner = gradax.apply_if_finite(gradax.adamw(1e-2), max_consecutive_errors=3)
    tx = gradax.master_weights(inner)
    params, state = tx.init_with_master(_master0())
    step = jax.jit(lambda g, s, p: tx.update(g, s, p))

    def run(p, s, grads_list):
        for g in grads_list:
            u, s = step(g, s, p)
            p = gradax.apply_updates(p, u)
        return p, s

    good = [
        jax.grad(_loss)(_master0()),
        jax.tree.map(lambda x: -x, jax.grad(_loss)(_master0())),
    ]
    bad = jax.tree.map(lambda x: x.at[0].set(jnp.nan), good[0])
    p1, s1 = run(params, state, [good[0]])
    p2, s2 = run(p1, s1, [bad])
    for a, b in zip(
        jax.tree.leaves((p1, s1.low_bits, s1.inner_state.inner_state)),
        jax.tree.leaves((p2, s2.low_bits, s2.inner_state.inner_state)),
        strict=True,
    ):
        np.testing.assert_array_equal(
            _bits(a) if a.dtype != jnp.int32 else a,
            _bits(b) if b.dtype != jnp.int32 else b,
        )
    p3, s3 = run(p2, s2, [good[1]])
    ref_p, ref_s = run(p1, s1, [good[1]])
    for a, b in zip(
        jax.tree.leaves((p3, s3.low_bits)),
        jax.tree.leaves((ref_p, ref_s.low_bits)),
        strict=True,
    ):
        np.testing.assert_array_equal(_bits(a), _bits(b))


@pytest.mark.parametrize("axis_type", axis_type_params("Auto", "Explicit"))
def test_sharded_equals_unsharded(axis_type):
    """On a (4, 2) mesh, Auto and Explicit axes: the numbers of one device
    (the step is elementwise after the inner update, which is adamw's).

    To the last bit where the compiler emits the same arithmetic for both
    programs; as docs/multi-host.md says, they may differ by its choice of
    fused multiply-adds: XLA:CPU contracts a multiply and an add into one
    FMA in some loops and not others (jaxlib 0.12.1 at its default
    optimization: one low half of 48 differed by 1, i.e. one float32 ulp
    of the master). So the masters rebuilt from the halves are compared to
    within 2 ulps, and the rest of the state to within 2 ulps too."""
    assert len(jax.devices()) >= 8
    master = {
        "m": jax.random.normal(jax.random.key(1), (8, 6)),
        "v": jnp.linspace(-1, 1, 8),
    }
    tx = gradax.master_weights(gradax.adamw(1e-2, weight_decay=0.1))
    params, state = tx.init_with_master(master)
    grads = jax.tree.map(lambda p: 0.3 * p, params)

    @jax.jit
    def two_steps(g, s, p):
        for _ in range(2):
            u, s = tx.update(g, s, p)
            p = gradax.apply_updates(p, u)
        return p, s

    single = two_steps(grads, state, params)
    spec = jax.sharding.PartitionSpec
    kind = getattr(jax.sharding.AxisType, axis_type)
    mesh = jax.make_mesh((4, 2), ("a", "b"), axis_types=(kind, kind))
    shardings = {
        "m": jax.NamedSharding(mesh, spec("a", "b")),
        "v": jax.NamedSharding(mesh, spec("a")),
    }
    with set_mesh(mesh):
        p = jax.device_put(params, shardings)
        g = jax.device_put(grads, shardings)
        s = tx.init(p)
        s = s._replace(low_bits=jax.device_put(state.low_bits, shardings))
        sharded = two_steps(g, s, p)
    assert sharded[0]["m"].sharding.is_equivalent_to(shardings["m"], 2)

    def rebuilt(run):
        """The float32 masters (the parameters' halves joined) and the rest."""
        params, state = run
        masters = jax.tree.map(
            lambda high, low: (
                (_bits(high).astype(np.uint32) << 16) | np.asarray(low)
            ).view(np.float32),
            params,
            state.low_bits,
        )
        return jax.tree.leaves((masters, state._replace(low_bits=None)))

    for a, b in zip(rebuilt(single), rebuilt(sharded), strict=True):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype, axis_type
        if np.issubdtype(a.dtype, np.floating):
            np.testing.assert_array_max_ulp(a, b, maxulp=2)
        else:
            np.testing.assert_array_equal(a, b, err_msg=axis_type)
