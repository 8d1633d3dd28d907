"""NorMuon, AdaMuon, Dion and Dion2: their update rules and defining properties."""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax_versions import enable_x64, explicit_axes, set_mesh

import gradax
from gradax.orthogonal.dion import dion_rank

KELLER = ((3.4445, -4.7750, 2.0315),)


def grads_of(shape, steps=2, seed=0):
    keys = jax.random.split(jax.random.key(seed), steps)
    return [np.asarray(jax.random.normal(k, shape)) for k in keys]


def ortho(x, coefficients=KELLER, steps=5):
    out = gradax.orthogonalize(
        jnp.asarray(x, jnp.float32), coefficients=coefficients, steps=steps, eps=1e-8
    )
    return np.asarray(out, np.float64)


def run(tx, grads, params=None):
    """Updates and final state of ``tx`` over a list of gradients (jitted)."""
    like = grads[0] if params is None else params
    state = tx.init(like)
    step = jax.jit(lambda g, s, p: tx.update(g, s, p))
    out = []
    for g in grads:
        u, state = step(g, state, params)
        out.append(u)
    return out, state


# --------------------------------------------------------------------- NorMuon


@pytest.mark.parametrize(
    "rms, rule", [(0.2, None), (None, None), (None, "spectral"), (None, "none")]
)
def test_normuon_matches_numpy(rms, rule):
    grads = grads_of((6, 4), steps=3)
    tx = gradax.scale_by_normuon(
        beta2=0.9, nesterov=False, consistent_rms=rms, shape_scaling=rule
    )
    factor = {None: np.sqrt(max(1.0, 4 / 6)), "spectral": np.sqrt(4 / 6), "none": 1}
    updates, state = run(tx, grads)
    assert state.nu.shape == (4,)  # one second moment per output neuron (fan_out)
    m, v = 0.0, 0.0
    for g, u in zip(grads, updates, strict=True):
        m = 0.95 * m + 0.05 * g
        o = ortho(m)
        v = 0.9 * v + 0.1 * np.mean(o**2, axis=0)  # mean over fan_in
        oh = o / (np.sqrt(v) + 1e-8)
        if rms is None:
            target = np.linalg.norm(o) * factor[rule]
        else:
            target = rms * np.sqrt(6 * 4)
        np.testing.assert_allclose(
            u, oh * target / np.linalg.norm(oh), rtol=2e-5, atol=1e-6
        )


def test_normuon_normalizes_each_output_neuron():
    (u,), _ = run(gradax.scale_by_normuon(), grads_of((12, 5), steps=1))
    # First step: v = (1 - beta2) mean(O^2), so every fan-out column of the
    # update has the same norm, and the update RMS is 0.2. Equal in exact
    # arithmetic; in float32 each column's v is a mean of 12 squares (up to
    # 6 ulps off), its root half that, and each entry of u a few more
    # roundings: 8 ulps bounds the difference between columns, which
    # depends on the machine (one differed by 2 ulps, 1.7e-7 relative).
    eps = np.finfo(np.float32).eps
    norms = np.linalg.norm(np.asarray(u, np.float64), axis=0)
    np.testing.assert_allclose(norms, norms[0], rtol=8 * eps)
    np.testing.assert_allclose(np.sqrt(np.mean(np.asarray(u) ** 2)), 0.2, rtol=1e-5)


@pytest.mark.parametrize("name", ["normuon", "adamuon", "dion", "dion2"])
def test_zero_gradients_give_zero_updates_without_nan(name):
    tx = getattr(gradax, name)(0.1, muon_weight_dimension_numbers="auto")
    params = {"w": jnp.ones((6, 4)), "t": jnp.ones((2, 3, 5)), "b": jnp.ones(4)}
    zeros = jax.tree.map(jnp.zeros_like, params)
    ones = jax.tree.map(jnp.ones_like, params)
    updates, state = run(tx, [zeros, ones, zeros, zeros], params)
    for u in updates:
        assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(u))
    assert all(float(jnp.abs(x).max()) == 0 for x in jax.tree.leaves(updates[0]))
    assert float(jnp.abs(updates[1]["w"]).max()) > 0
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(state))


def test_normuon_optimizer_routes_and_decays():
    params = {"w": jnp.asarray(grads_of((6, 4), 1, seed=3)[0]), "b": jnp.ones(4)}
    grads = [{"w": g, "b": g[0]} for g in grads_of((6, 4), steps=2)]
    lr, wd = 0.03, 0.1
    got, _ = run(gradax.normuon(lr, weight_decay=wd), grads, params)
    direction, _ = run(gradax.scale_by_normuon(), [g["w"] for g in grads])
    adamw = gradax.adamw(lr, eps=1e-8, weight_decay=0.0, nesterov=True)
    adam, _ = run(adamw, [g["b"] for g in grads], params["b"])
    for u, d, a in zip(got, direction, adam, strict=True):
        np.testing.assert_allclose(u["w"], -lr * (d + wd * params["w"]), rtol=1e-5)
        np.testing.assert_allclose(u["b"], a, rtol=1e-6)


# --------------------------------------------------------------------- AdaMuon


def test_adamuon_matches_numpy():
    grads = grads_of((5, 7), steps=3)
    updates, state = run(gradax.scale_by_adamuon(beta2=0.9), grads)
    assert state.nu.shape == (5, 7)
    m, v = 0.0, 0.0
    for g, u in zip(grads, updates, strict=True):
        m = 0.95 * m + 0.05 * g
        o = ortho(np.sign(0.95 * m + 0.05 * g))  # Nesterov, then the sign
        v = 0.9 * v + 0.1 * o**2
        oh = o / (np.sqrt(v) + 1e-8)
        expected = 0.2 * np.sqrt(5 * 7) * oh / np.linalg.norm(oh)
        np.testing.assert_allclose(u, expected, rtol=2e-5, atol=1e-7)


def test_adamuon_sign_makes_updates_scale_free():
    grads = grads_of((5, 7), steps=3)
    big = [1e3 * g for g in grads]
    params = jnp.zeros((5, 7))
    for a, b in zip(
        run(gradax.adamuon(0.1), grads, params)[0],
        run(gradax.adamuon(0.1), big, params)[0],
        strict=True,
    ):
        np.testing.assert_array_equal(a, b)
    plain = run(gradax.scale_by_adamuon(sign=False), grads)[0]
    signed = run(gradax.scale_by_adamuon(), grads)[0]
    assert not np.allclose(plain[-1], signed[-1])


# ------------------------------------------------------------------------ Dion


def test_dion_rank_rule():
    assert dion_rank(2, 8, 6) == 2
    assert dion_rank(100, 8, 6) == 6
    assert dion_rank(0.5, 8, 6) == 3
    assert dion_rank(1.0, 8, 6) == 6
    assert dion_rank(0.01, 8, 6) == 1


@pytest.mark.parametrize("rank, r", [(2, 2), (0.5, 3)])
def test_dion_update_has_rank_at_most_r(rank, r):
    params = {"w": jnp.zeros((8, 6)), "t": jnp.zeros((3, 8, 6))}
    grads = [
        {"w": g, "t": jnp.stack([g, g @ g.T @ g, -g])} for g in grads_of((8, 6), 4)
    ]
    tx = gradax.dion(0.1, rank=rank, muon_weight_dimension_numbers="auto")
    updates, _ = run(tx, grads, params)
    for u in updates:
        assert int(jnp.linalg.matrix_rank(u["w"])) == r
        assert all(int(k) <= r for k in jnp.linalg.matrix_rank(u["t"]))


def test_dion_error_feedback_identity():
    # (7, 5) in the x @ W layout is a wide X (5, 7): "as_is" runs on X itself.
    tx = gradax.scale_by_dion(rank=2, mu=0.9, orientation="as_is")
    g0, g1 = grads_of((7, 5), steps=2)
    _, state = tx.update(jnp.asarray(g0), tx.init(jnp.asarray(g0)))
    m_old, q_old = (
        np.asarray(state.momentum, np.float64),
        np.asarray(state.q, np.float64),
    )
    direction, new = tx.update(jnp.asarray(g1), state)
    # In the x @ W layout B = M + G is the paper's X transposed:
    # P = orth(X Q) = orth(B^T Q), R = X^T P = B P, and X - (1 - mu) P R^T
    # is B - (1 - mu) R P^T. Both are invariant to the basis QR picks.
    b = m_old + g1
    p, _ = np.linalg.qr(b.T @ q_old)
    r = b @ p
    np.testing.assert_allclose(new.momentum, b - 0.1 * r @ p.T, rtol=1e-5, atol=1e-5)
    q = r / np.linalg.norm(r, axis=0)
    np.testing.assert_allclose(direction, q @ p.T, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(new.q, axis=0), 1.0, rtol=1e-5)


@pytest.mark.parametrize("shape", [(7, 5), (5, 7)])
def test_dion_runs_on_the_long_side(shape):
    # microsoft/dion's rule: a wide X (fan_out < fan_in) is handled as X^T,
    # so Dion on B (fan_in, fan_out) = X^T with X and B exchanged. A tall
    # X is left as it is, so "long_side" and "as_is" agree there.
    g0, g1 = (jnp.asarray(g) for g in grads_of(shape, steps=2))
    tx = gradax.scale_by_dion(rank=2, mu=0.9)
    plain = gradax.scale_by_dion(rank=2, mu=0.9, orientation="as_is")
    _, state = tx.update(g0, tx.init(g0))
    wide = shape[0] > shape[1]
    assert state.q.shape == (min(shape) if wide else shape[0], 2)
    if not wide:
        _, plain_state = plain.update(g0, plain.init(g0))
        np.testing.assert_array_equal(state.q, plain_state.q)
        return
    m_old, q_old = (np.asarray(x, np.float64) for x in (state.momentum, state.q))
    direction, new = tx.update(g1, state)
    # On X^T = B: P = orth(B Q), R = B^T P, M' = B - (1 - mu) P R^T, and the
    # direction P Q^T is already in B's layout.
    b = m_old + np.asarray(g1, np.float64)
    p, _ = np.linalg.qr(b @ q_old)
    r = b.T @ p
    np.testing.assert_allclose(new.momentum, b - 0.1 * p @ r.T, rtol=1e-5, atol=1e-5)
    q = r / np.linalg.norm(r, axis=0)
    np.testing.assert_allclose(direction, p @ q.T, rtol=1e-4, atol=1e-5)


def test_dion_validation_names_the_argument():
    for bad in (0, 1.5, "2", True):
        with pytest.raises(ValueError, match="rank"):
            gradax.dion(0.1, rank=bad)
    with pytest.raises(ValueError, match="mu"):
        gradax.dion(0.1, mu=1.0)
    with pytest.raises(ValueError, match="seed must be an integer"):
        gradax.dion(0.1, seed=0.5)
    with pytest.raises(ValueError, match="shape_scaling"):
        gradax.dion(0.1, shape_scaling="max")
    with pytest.raises(ValueError, match="orientation"):
        gradax.dion(0.1, orientation="long")
    # Any integer seeds jax.random.key; an int rank or a fraction is a rank.
    assert gradax.dion(0.1, seed=-3, rank=np.int64(3)).rank == 3


# ----------------------------------------------------------------------- Dion2


@pytest.mark.parametrize(
    "shape, select, axis",
    [((8, 16), "auto", 1), ((16, 8), "auto", 0), ((16, 8), "rows", 1)],
)
def test_dion2_changes_only_the_selected_slices(shape, select, axis):
    params = jnp.asarray(grads_of(shape, 1, seed=5)[0])
    m0, g = grads_of(shape, steps=2)
    tx = gradax.dion2(0.1, select=select)
    state = tx.init(params)
    _, state = tx.update(jnp.asarray(m0), state, params)
    inner = state.inner_states["muon"].inner_state[0]
    m_old = np.asarray(inner.momentum)
    updates, state = tx.update(jnp.asarray(g), state, params)
    new_params = np.asarray(gradax.apply_updates(params, updates))
    b = m_old + g
    l1 = np.abs(b).sum(axis=axis)  # one L1 norm per selectable slice
    k = int(np.ceil(0.25 * l1.size))
    top = np.sort(np.argsort(-l1)[:k])
    changed = np.nonzero(np.any(new_params != np.asarray(params), axis=axis))[0]
    np.testing.assert_array_equal(changed, top)  # only those slices move
    take = (lambda x: x[top]) if axis == 1 else (lambda x: x[:, top])
    fan_in, fan_out = shape
    expected = -0.1 * np.sqrt(fan_out / fan_in) * ortho(take(b), "polar_express_fixed5")
    np.testing.assert_allclose(
        take(np.asarray(updates)), expected, rtol=1e-4, atol=1e-6
    )
    momentum = np.asarray(state.inner_states["muon"].inner_state[0].momentum)
    decayed = b.copy()
    if axis == 1:
        decayed[top] *= 0.95
    else:
        decayed[:, top] *= 0.95
    np.testing.assert_allclose(momentum, decayed, rtol=1e-6)


def test_dion2_validation_names_the_argument():
    with pytest.raises(ValueError, match="fraction"):
        gradax.dion2(0.1, fraction=0.0)
    with pytest.raises(ValueError, match="select"):
        gradax.dion2(0.1, select="diagonal")
    with pytest.raises(ValueError, match="ef_decay"):
        gradax.dion2(0.1, ef_decay=1.5)
    with pytest.raises(ValueError, match="ns_steps"):
        gradax.dion2(0.1, ns_steps=0)
    with pytest.raises(ValueError, match="ns_coeffs"):
        gradax.scale_by_dion2(ns_coeffs="polar")


def test_normalized_variants_validate_beta2():
    for name in ("normuon", "adamuon"):
        with pytest.raises(ValueError, match="beta2"):
            getattr(gradax, name)(0.1, beta2=1.0)
    for name in ("scale_by_normuon", "scale_by_adamuon"):
        with pytest.raises(ValueError, match="beta2"):
            getattr(gradax, name)(beta2=1.0)
        with pytest.raises(ValueError, match="consistent_rms"):
            getattr(gradax, name)(consistent_rms=-1.0)


def test_shape_scaling_needs_consistent_rms_none():
    for name in ("normuon", "adamuon"):
        with pytest.raises(ValueError, match="shape_scaling.*consistent_rms"):
            getattr(gradax, name)(0.1, shape_scaling="spectral")
        with pytest.raises(ValueError, match="shape_scaling"):
            getattr(gradax, name)(0.1, consistent_rms=None, shape_scaling="wide")
        assert getattr(gradax, name)(0.1, consistent_rms=None, shape_scaling="none")


def test_normalized_directions_take_consistent_rms_by_keyword_only():
    # As before the declarations were written: consistent_rms is keyword-only.
    for name in ("scale_by_normuon", "scale_by_adamuon"):
        parameter = inspect.signature(getattr(gradax, name)).parameters[
            "consistent_rms"
        ]
        assert parameter.kind is inspect.Parameter.KEYWORD_ONLY
        assert parameter.default == 0.2
        assert getattr(gradax, name)().consistent_rms == 0.2


# --------------------------------------------------- stacked layers and vmap


def _direction(name, **kwargs):
    return getattr(gradax, f"scale_by_{name}")(**kwargs)


# The batched and the single programs are different XLA programs, which may
# round differently. In float64 each rounding is 1.1e-16 relative, and five
# Newton–Schulz steps amplify a perturbation by at most the product of the
# polynomial's slopes on [0, 1] (|a| + 3|b| + 5|c| = 27.9 for KellerJordan's
# row: 27.9^5 = 1.7e7), so the two agree within 1.1e-16 * 1.7e7 * (a few
# operations) < 1e-8 (Dion's QR of these well-conditioned Gaussian 6x4
# matrices amplifies far less). In float32 the same bound is 2e1: a float32 comparison
# at any fixed tolerance depends on the machine (jax 0.5.3 missed 1e-5 by
# 1.4e-5 on dion2).
_INDEPENDENT_RTOL = 1e-8


@pytest.mark.parametrize("name", ["normuon", "adamuon", "dion", "dion2"])
def test_stacked_leaf_is_independent_matrices(name):
    with enable_x64(True):
        layers = [
            [g.astype(np.float64) for g in grads_of((6, 4), steps=2, seed=s)]
            for s in range(3)
        ]
        stacked = [jnp.stack([layer[t] for layer in layers]) for t in range(2)]
        dims = gradax.MuonDimensionNumbers(1, 2)
        tx = _direction(name, weight_dimension_numbers=dims)
        state = tx.init(stacked[0])
        single = _direction(name)
        if name == "dion":  # same starting Q per layer as the separate runs
            q = jnp.stack([single.init(jnp.asarray(lay[0])).q for lay in layers])
            state = state._replace(q=q)
        together = []
        for g in stacked:
            u, state = tx.update(g, state)
            together.append(u)
        for i, layer in enumerate(layers):
            alone, _ = run(single, [jnp.asarray(g) for g in layer])
            for a, b in zip(alone, together, strict=True):
                assert a.dtype == b.dtype == jnp.float64
                np.testing.assert_allclose(a, b[i], rtol=_INDEPENDENT_RTOL, atol=1e-12)


@pytest.mark.parametrize("name", ["normuon", "adamuon", "dion", "dion2"])
def test_vmap_over_independent_problems(name):
    with enable_x64(True):
        tx = getattr(gradax, name)(0.05)

        def f64(x):
            return jnp.asarray(x, jnp.float64)

        params = {
            "w": f64(np.stack(grads_of((5, 3), 2, seed=1))),
            "b": f64(np.ones((2, 3))),
        }
        grads = {"w": f64(np.stack(grads_of((5, 3), 2))), "b": f64(np.ones((2, 3)))}
        state = jax.vmap(tx.init)(params)
        batched, _ = jax.jit(jax.vmap(tx.update))(grads, state, params)
        for i in range(2):
            p_i, g_i = jax.tree.map(lambda x, i=i: x[i], (params, grads))
            u_i, _ = tx.update(g_i, tx.init(p_i), p_i)
            for a, b in zip(
                jax.tree.leaves(u_i), jax.tree.leaves(batched), strict=True
            ):
                assert a.dtype == jnp.float64
                np.testing.assert_allclose(a, b[i], rtol=_INDEPENDENT_RTOL, atol=1e-12)


@explicit_axes
@pytest.mark.parametrize("name", ["normuon", "adamuon", "dion", "dion2"])
def test_scan_with_explicitly_sharded_params(name):
    mesh = jax.make_mesh(
        (4, 2), ("a", "b"), axis_types=(jax.sharding.AxisType.Explicit,) * 2
    )
    spec = jax.sharding.PartitionSpec
    tx = getattr(gradax, name)(0.05, muon_weight_dimension_numbers="auto")
    # Gaussian parameters and a gradient with no zero column: every gradient
    # matrix has full rank, condition number at most 32 (measured over the 3
    # steps), so rounding moves the updates by about 32 eps relative, far
    # inside rtol=1e-5. With all-ones parameters the first gradients had
    # rank 1, and Dion's QR, or the slope of Newton-Schulz at 0 (about 1000),
    # turned rounding into differences of 7% between machines; that case is
    # tests/conformance/test_rank_deficient.py's.
    keys = jax.random.split(jax.random.key(4), 3)
    params = {
        "w": jax.random.normal(keys[0], (8, 6)),
        "t": jax.random.normal(keys[1], (2, 6, 8)),
        "b": jax.random.normal(keys[2], (8,)),
    }
    specs = {"w": spec("a", None), "t": spec(None, None, "b"), "b": spec("a")}

    def body(carry, step):
        p, s = carry
        g = jax.tree.map(lambda x: jnp.sin(step + x * (1 + jnp.arange(x.shape[-1]))), p)
        u, s = tx.update(g, s, p)
        return (gradax.apply_updates(p, u), s), None

    with set_mesh(mesh):
        sharded = {
            k: jax.device_put(v, jax.NamedSharding(mesh, specs[k]))
            for k, v in params.items()
        }
        run_scan = jax.jit(
            lambda p: jax.lax.scan(body, (p, tx.init(p)), jnp.arange(3.0))[0][0]
        )
        out = run_scan(sharded)
    expected = jax.jit(
        lambda p: jax.lax.scan(body, (p, tx.init(p)), jnp.arange(3.0))[0][0]
    )(params)
    for a, b in zip(jax.tree.leaves(out), jax.tree.leaves(expected), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
