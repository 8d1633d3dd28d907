"""Shampoo and SOAP: the update rules in NumPy, stacked weights, sharding."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax_versions import axis_type_params, enable_x64, explicit_axes, set_mesh

import gradax

P = jax.sharding.PartitionSpec


def _tree(seed=0):
    keys = jax.random.split(jax.random.key(seed), 3)
    return {
        "w": jax.random.normal(keys[0], (4, 5)),
        "t": jax.random.normal(keys[1], (2, 3, 4)),
        "b": jax.random.normal(keys[2], (5,)),
    }


def _grads(params, step):
    """Gradients of a perturbed quadratic, elementwise in the params."""
    return jax.tree.map(
        lambda p: (
            p * (1.0 + 0.3 * jnp.sin(step + 3.0 * p))
            - 0.2 * jnp.cos(3.0 * step + 2.0 * p)
        ),
        params,
    )


def _run(tx, params, steps):
    """The params after ``steps`` jitted updates; numbers in NumPy float64."""
    step = jax.jit(tx.update)
    state = tx.init(params)
    history = []
    for i in range(steps):
        u, state = step(_grads(params, float(i)), state, params)
        params = gradax.apply_updates(params, u)
        history.append(jax.tree.map(np.asarray, params))
    return history


def _numpy_run(rule, params, steps):
    params = jax.tree.map(lambda p: np.asarray(p, np.float64), params)
    state = {k: {} for k in params}
    history = []
    for i in range(steps):
        grads = jax.tree.map(
            lambda g: np.asarray(g, np.float64),
            _grads(jax.tree.map(jnp.asarray, params), float(i)),
        )
        # The gradients are float32 in both runs: round them the same way.
        params = {
            k: params[k] + rule(grads[k], params[k], state[k], i + 1) for k in params
        }
        history.append(params)
    return history


def _compare(ours, reference, rtol, atol):
    for step, (a, b) in enumerate(zip(ours, reference, strict=True)):
        for k in a:
            np.testing.assert_allclose(
                a[k], b[k], rtol=rtol, atol=atol, err_msg=f"{k} at step {step + 1}"
            )


# --------------------------------------------------------------------------
# Shampoo, written out per matrix (blocks uneven, no padding) in float64.


def _inverse_root(s, exponent, epsilon):
    w, v = np.linalg.eigh(s)
    w = np.maximum(w, 0)
    damped = w + epsilon * max(w[-1], 1e-16)
    return (v * damped ** (-1.0 / exponent)) @ v.T


def _shampoo_rule(lr, b1, b2, eps, meps, block, every, start, wd, s0=0.0):
    # s0: the factors' start, s0 * I (the reference's is matrix_epsilon * I).
    def matrix(g, st, t):
        blocks = [
            (slice(i, i + block), slice(j, j + block))
            for i in range(0, g.shape[0], block)
            for j in range(0, g.shape[1], block)
        ]
        out = np.zeros_like(g)
        for n, (rs, cs) in enumerate(blocks):
            gb = g[rs, cs]
            left0, right0 = (s0 * np.eye(k) for k in gb.shape)
            left = st.get(("L", n), left0) * b2 + (1 - b2) * gb @ gb.T
            right = st.get(("R", n), right0) * b2 + (1 - b2) * gb.T @ gb
            st["L", n], st["R", n] = left, right
            if (t - 1) % every == 0:
                st["l", n] = _inverse_root(left, 4, meps)
                st["r", n] = _inverse_root(right, 4, meps)
            out[rs, cs] = st["l", n] @ gb @ st["r", n]
        return out

    def rule(g, p, st, t):
        a = st.get("a", 0) * b2 + (1 - b2) * g**2
        st["a"] = a
        u = graft = g / (np.sqrt(a / (1 - b2**t)) + eps)
        if g.ndim >= 2:  # a matrix, or a stack of them along the first axis
            slices = g.reshape(-1, *g.shape[-2:])
            grafts = graft.reshape(slices.shape)
            pre = [matrix(x, st.setdefault(k, {}), t) for k, x in enumerate(slices)]
            if t - 1 >= start:
                u = np.stack(
                    [
                        x * np.linalg.norm(d) / (np.linalg.norm(x) + 1e-16)
                        for x, d in zip(pre, grafts, strict=True)
                    ]
                ).reshape(g.shape)
        m = st.get("m", 0) * b1 + (1 - b1) * u
        st["m"] = m
        return -lr * (m / (1 - b1**t) + wd * p)

    return rule


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(start_preconditioning_step=0),  # Shampoo from the first update
        dict(preconditioning_compute_steps=3, start_preconditioning_step=2),
        dict(block_size=2, weight_decay=0.1, b2=0.9),  # uneven blocks
        # the reference's start: matrix_epsilon * I, large enough to matter
        dict(start_statistics="matrix_epsilon", matrix_epsilon=0.5),
    ],
    ids=["every-step", "cached-roots", "blocks", "epsilon-start"],
)
def test_shampoo_matches_numpy(kwargs):
    options = dict(
        b1=0.9,
        b2=0.99,
        eps=1e-8,
        matrix_epsilon=1e-4,
        block_size=128,
        preconditioning_compute_steps=1,
        start_preconditioning_step=0,
        weight_decay=0.0,
    )
    options.update(kwargs)
    lr = 0.05
    rule = _shampoo_rule(
        lr,
        options["b1"],
        options["b2"],
        options["eps"],
        options["matrix_epsilon"],
        options["block_size"],
        options["preconditioning_compute_steps"],
        options["start_preconditioning_step"],
        options["weight_decay"],
        options["matrix_epsilon"]
        * (kwargs.get("start_statistics") == "matrix_epsilon"),
    )
    steps = 8
    ours = _run(gradax.shampoo(lr, **options), _tree(), steps)
    reference = _numpy_run(rule, _tree(), steps)
    _compare(ours, reference, rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------
# SOAP, written out per matrix in float64 after the reference implementation.


def _soap_rule(lr, b1, b2, sb, eps, wd, freq, reorders):
    def adam(g, st, s):
        st["m"] = b1 * st["m"] + (1 - b1) * g
        st["v"] = b2 * st["v"] + (1 - b2) * g**2
        return st["m"] / (np.sqrt(st["v"]) + eps)

    def matrix(g, st, t):
        if t == 1:
            st["L"], st["R"] = (1 - sb) * g @ g.T, (1 - sb) * g.T @ g
            st["QL"] = np.linalg.eigh(st["L"])[1][:, ::-1]
            st["QR"] = np.linalg.eigh(st["R"])[1][:, ::-1]
            st["m"], st["v"] = np.zeros_like(g), np.zeros_like(g)
            return np.zeros_like(g)
        ql, qr = st["QL"], st["QR"]
        st["m"] = b1 * st["m"] + (1 - b1) * g
        st["v"] = b2 * st["v"] + (1 - b2) * (ql.T @ g @ qr) ** 2
        d = ql @ ((ql.T @ st["m"] @ qr) / (np.sqrt(st["v"]) + eps)) @ qr.T
        st["L"] = sb * st["L"] + (1 - sb) * g @ g.T
        st["R"] = sb * st["R"] + (1 - sb) * g.T @ g
        if (t - 1) % freq == 0:
            for axis, (s, q) in enumerate([("L", "QL"), ("R", "QR")]):
                order = np.argsort(-np.diag(st[q].T @ st[s] @ st[q]), kind="stable")
                reorders.append(np.any(order != np.arange(len(order))))
                st["v"] = np.take(st["v"], order, axis=axis)
                st[q] = np.linalg.qr(st[s] @ st[q][:, order])[0]
        return d

    def rule(g, p, st, t):
        s = t - 1
        if g.ndim < 2:
            if t == 1:
                st["m"], st["v"] = np.zeros_like(g), np.zeros_like(g)
                return np.zeros_like(g)
            d = adam(g, st, s)
        else:
            slices = g.reshape(-1, *g.shape[-2:])
            d = np.stack(
                [matrix(x, st.setdefault(k, {}), t) for k, x in enumerate(slices)]
            ).reshape(g.shape)
        if t == 1:
            return np.zeros_like(g)
        scale = np.sqrt(1 - b2**s) / (1 - b1**s)
        return -lr * (scale * d + wd * p)

    return rule


@pytest.mark.parametrize("freq, sb", [(1, -1.0), (3, -1.0), (1, 0.0)])
def test_soap_matches_numpy(freq, sb):
    lr, b1, b2, eps, wd = 0.02, 0.9, 0.95, 1e-8, 0.01
    steps, reorders = 10, []
    tx = gradax.soap(lr, b1, b2, sb, eps, wd, precondition_frequency=freq)
    ours = _run(tx, _tree(), steps)
    rule = _soap_rule(lr, b1, b2, b2 if sb < 0 else sb, eps, wd, freq, reorders)
    reference = _numpy_run(rule, _tree(), steps)
    _compare(ours, reference, rtol=1e-5, atol=1e-6)
    if sb == 0.0:  # factors of the last gradient only: the order changes
        assert any(reorders)


def test_soap_first_update_is_zero_and_sets_bases():
    params = _tree()
    tx = gradax.scale_by_soap()
    updates, state = tx.update(_grads(params, 0.0), tx.init(params), params)
    assert all(not np.any(u) for u in jax.tree.leaves(updates))
    g = np.asarray(_grads(params, 0.0)["w"], np.float64)
    left, right = state.bases["w"]
    # The bases diagonalize G G^T and G^T G, largest eigenvalue first.
    for q, s in ((left, g @ g.T), (right, g.T @ g)):
        d = np.asarray(q).T @ s @ np.asarray(q)
        np.testing.assert_allclose(d, np.diag(np.diag(d)), atol=1e-4)
        assert np.all(np.diff(np.diag(d)) <= 1e-5)


@pytest.mark.parametrize("name", ["soap", "shampoo"])
def test_float64_bias_correction_is_float64(name):
    """With float64 leaves `1 - b2**t` is computed in float64, as Adam's is:
    a Python `b2` and a float64 array of it give the same steps (in float32
    the Python one differed by 3e-8 relative after three steps)."""
    with enable_x64(True):
        params = {
            "w": jax.random.normal(jax.random.key(0), (4, 3), jnp.float64),
            "v": jnp.linspace(-1.0, 1.0, 5, dtype=jnp.float64),
        }

        def steps(b2):
            every = {"soap": "precondition_frequency"}.get(
                name, "preconditioning_compute_steps"
            )
            tx = getattr(gradax, name)(0.05, b2=b2, **{every: 2})
            state, p = tx.init(params), params
            for step in range(3):
                grads = jax.tree.map(lambda x, s=step: x * (1.0 + 0.3 * s) + 0.1, p)
                updates, state = tx.update(grads, state, p)
                p = gradax.apply_updates(p, updates)
            return p

        # The same float64 arithmetic; only the weak type differs.
        jax.tree.map(
            lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-14, atol=1e-15),
            steps(0.95),
            steps(jnp.float64(0.95)),
        )


@pytest.mark.parametrize(
    "name, value, options",
    [
        ("b2", 0.95, {}),
        # Normalizing a zero step (the first) takes the root of a zero mean.
        ("eps", 1e-3, {"normalize_grads": True, "precondition_frequency": 1}),
    ],
)
def test_soap_gradient_through_a_hyperparameter_is_finite_and_right(
    name, value, options
):
    """The null lines of a rank-deficient statistic leave exact zeros in the
    second moment, and the first step is zero: sqrt's slope at those zeros
    must not make the gradient NaN. Against central differences, in float64
    (a 4x3 leaf: a 4x4 statistic of rank 3)."""
    with enable_x64(True):
        params = {"w": jax.random.normal(jax.random.key(0), (4, 3), jnp.float64)}

        def total(x):
            chosen = {"precondition_frequency": 2, **options, name: x}
            tx = gradax.soap(learning_rate=0.05, **chosen)
            state, p = tx.init(params), params
            for step in range(3):
                grads = jax.tree.map(lambda x, s=step: x * (1.0 + 0.3 * s) + 0.1, p)
                updates, state = tx.update(grads, state, p)
                p = gradax.apply_updates(p, updates)
            return jnp.sum(p["w"])

        at = jnp.float64(value)
        slope = jax.grad(total)(at)
        h = 1e-6
        central = (total(at + h) - total(at - h)) / (2 * h)
        assert np.isfinite(slope)
        # Central differences carry O(h^2) and rounding/h ~ 1e-10 errors.
        np.testing.assert_allclose(slope, central, rtol=1e-6)


def test_soap_normalized_zero_gradients_are_zero_steps_under_jit():
    """Zero gradients with normalize_grads, jitted: zero steps, not NaN.

    XLA joins the normalization's division with Adam's ((a / b) / c to
    a / (b c)); with eps = 1e-8 and the authors' floor 1e-30 the product is
    below float32's smallest normal number and flushed to 0, so a scalar or
    vector leaf's step was 0 / 0 (eagerly, it was 0).
    """
    tx = gradax.scale_by_soap(precondition_frequency=1, normalize_grads=True)
    params = {"s": jnp.asarray(0.3), "v": jnp.ones(3), "m": jnp.ones((4, 3))}
    zeros = jax.tree.map(jnp.zeros_like, params)
    state = tx.init(params)
    update = jax.jit(tx.update)
    for _ in range(3):
        updates, state = update(zeros, state, params)
        for key, u in updates.items():
            np.testing.assert_array_equal(u, jnp.zeros_like(u), err_msg=key)


@pytest.mark.parametrize("correct_bias", [True, False])
def test_soap_normalized_step_keeps_the_bias_correction(correct_bias):
    # The authors' SOAP normalizes each direction to RMS 1 and then steps
    # with the corrected rate sqrt(1 - b2^s) / (1 - b1^s). At the first
    # moved step (s = 1) with b1 = b2 = 0.95 that is 1 / sqrt(0.05) = 4.47.
    # Normalizing after the correction cancelled it (RMS 1 either way).
    params = _tree()
    tx = gradax.scale_by_soap(b1=0.95, b2=0.95, normalize_grads=True)
    tx = tx.replace(correct_bias=correct_bias)
    state = tx.init(params)
    for k in range(2):
        updates, state = tx.update(_grads(params, float(k)), state, params)
    expected = np.sqrt(1 - 0.95) / (1 - 0.95) if correct_bias else 1.0
    w = np.asarray(updates["w"], np.float64)
    np.testing.assert_allclose(np.sqrt(np.mean(w**2)), expected, rtol=1e-5)


# --------------------------------------------------------------------------
# Stacked weights and conv kernels are independent matrices.

OPTIMIZERS = {
    "shampoo": lambda: gradax.shampoo(0.05, start_preconditioning_step=1, block_size=3),
    "soap": lambda: gradax.soap(0.05, precondition_frequency=2),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_stacked_equals_separate(name):
    keys = jax.random.split(jax.random.key(3), 4)
    stacked = {
        "t": jax.random.normal(keys[0], (3, 4, 5)),
        "conv": jax.random.normal(keys[1], (2, 2, 3, 4)),
    }
    separate = {f"t{i}": stacked["t"][i] for i in range(3)}
    separate["conv"] = stacked["conv"].reshape(12, 4)
    ours = _run(OPTIMIZERS[name](), stacked, 6)
    theirs = _run(OPTIMIZERS[name](), separate, 6)
    for a, b in zip(ours, theirs, strict=True):
        for i in range(3):
            np.testing.assert_allclose(a["t"][i], b[f"t{i}"], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(
            a["conv"].reshape(12, 4), b["conv"], rtol=1e-5, atol=1e-6
        )


# --------------------------------------------------------------------------
# Progress on an ill-conditioned least-squares problem.


def _least_squares():
    """``||A W B - C||^2``: its Hessian ``B B^T (x) A^T A`` is Kronecker-factored
    and ill-conditioned along rotated axes, which no diagonal method fixes."""
    rng = np.random.default_rng(0)

    def rotated(m, n):  # singular values from 1 to 0.1, random singular vectors
        u, _ = np.linalg.qr(rng.normal(size=(m, m)))
        v, _ = np.linalg.qr(rng.normal(size=(n, n)))
        k = min(m, n)
        return jnp.asarray((u[:, :k] * np.logspace(0, -1, k)) @ v[:, :k].T)

    a, b = rotated(32, 16), rotated(8, 12)
    c = a @ jnp.asarray(rng.normal(size=(16, 8)), jnp.float32) @ b

    def loss(params):
        return 0.5 * jnp.sum((a @ params["w"] @ b - c) ** 2)

    return loss, {"w": jnp.zeros((16, 8))}


def _final_loss(tx, steps=100):
    loss, params = _least_squares()

    def body(carry, _):
        p, s = carry
        u, s = tx.update(jax.grad(loss)(p), s, p)
        return (gradax.apply_updates(p, u), s), None

    (params, _), _ = jax.lax.scan(body, (params, tx.init(params)), None, steps)
    return float(loss(params))


def test_faster_than_adam_on_ill_conditioned_least_squares():
    # Same learning rate, steps and betas (Adam's) for all three. Measured
    # from 3.5: adam 8.1e-3, shampoo 1.6e-4, soap 1.4e-4.
    lr = 0.1
    adam = _final_loss(gradax.adam(lr))
    shampoo = _final_loss(gradax.shampoo(lr, 0.9, 0.999, start_preconditioning_step=1))
    soap = _final_loss(gradax.soap(lr, 0.9, 0.999, weight_decay=0.0))
    assert shampoo < 0.2 * adam, (shampoo, adam)
    assert soap < 0.2 * adam, (soap, adam)


# --------------------------------------------------------------------------
# Sharded weights: the same numbers, and each device keeps its own factors.

# Float32 rounding differs between the two programs (a sharded sum adds in
# another order), and each optimizer magnifies it by its conditioning, which
# these settings bound whatever the draw:
# - Shampoo: matrix_epsilon=1e-2 bounds every damped factor's condition number
#   by 1 + 1/1e-2 = 101, which bounds how much an inverse root magnifies the
#   rounding (eps = 1.2e-7) of its factor. The 4 x 4 blocks cut from the
#   matrices are not otherwise controlled; the 3-row edge blocks are rank
#   deficient.
# - SOAP: the gradients below make the first eigenbases accurate to about
#   eps / 0.09; eps=1e-2 (small beside a typical sqrt(v), about 0.06) bounds
#   how much Adam's division in the eigenbasis magnifies a basis error where
#   v happens to be small.
SHARDED = {
    "shampoo": lambda: gradax.shampoo(
        0.05, start_preconditioning_step=0, block_size=4, matrix_epsilon=1e-2
    ),
    # the reference's vectors (a full statistic, here of 2 x 4 blocks,
    # damped like the matrices') and its two momentums
    "shampoo_reference_options": lambda: gradax.shampoo(
        0.05,
        start_preconditioning_step=1,
        block_size=4,
        matrix_epsilon=1e-2,
        precondition_vectors=True,
        grafting_momentum="separate",
    ),
    "soap": lambda: gradax.soap(0.05, eps=1e-2, precondition_frequency=1),
}
# Largest difference relative to the leaf's largest entry. Measured: sharded
# within 1.6e-6; over 10 draws of the gradients, each also perturbed by one
# ulp (another machine's rounding), Shampoo within 1.8e-6 and SOAP within
# 1.2e-5 (100 eps). A sharding mistake is off by order one.
SHARDED_TOL = 5e-5
SPECS = {"rows": P("a", None), "cols": P(None, "a"), "stack": P("a"), "b": P("b")}


def _sharded_params():
    keys = jax.random.split(jax.random.key(5), 4)
    return {
        "rows": jax.random.normal(keys[0], (8, 7)),
        "cols": jax.random.normal(keys[1], (7, 8)),
        "stack": jax.random.normal(keys[2], (4, 7, 8)),
        "b": jax.random.normal(keys[3], (8,)),
    }


def _sharded_grads(steps=3):
    """Gradients whose factors have well separated eigenvalues.

    Each matrix is ``U diag(s) V^T`` with random orthonormal ``U, V`` and
    singular values ``s`` from 1 down to 0.4 in steps of 0.1: its factors'
    eigenvalues (``s^2``) are at least 0.09 of the largest apart. The sides
    differ by one, so the larger factor's null space is a line, 0.16 below
    the rest: SOAP's first eigenbases are unique up to sign, which its update
    does not depend on. (Gaussian matrices of these shapes are often nearly
    singular, and eigh could then only guess the basis of the smallest
    eigenvalues.)
    """
    rng = np.random.default_rng(0)

    def matrix(m, n):
        k = min(m, n)
        u = np.linalg.qr(rng.normal(size=(m, k)))[0]
        v = np.linalg.qr(rng.normal(size=(n, k)))[0]
        return (u * np.linspace(1.0, 0.4, k)) @ v.T

    grads = []
    for _ in range(steps):
        g = {
            "rows": matrix(8, 7),
            "cols": matrix(7, 8),
            "stack": np.stack([matrix(7, 8) for _ in range(4)]),
            "b": rng.normal(size=8),
        }
        grads.append({k: jnp.asarray(x, jnp.float32) for k, x in g.items()})
    return grads


def _updates(tx, params, state, grads):
    step = jax.jit(tx.update)
    out = []
    for g in grads:
        u, state = step(g, state, params)
        out.append(u)
    return out, state


@pytest.mark.parametrize("axis_type", axis_type_params("Auto", "Explicit"))
@pytest.mark.parametrize("name", sorted(SHARDED))
def test_sharded_equals_unsharded(name, axis_type):
    kind = getattr(jax.sharding.AxisType, axis_type)
    mesh = jax.make_mesh((4, 2), ("a", "b"), axis_types=(kind, kind))
    tx, params, grads = SHARDED[name](), _sharded_params(), _sharded_grads()
    single, _ = _updates(tx, params, tx.init(params), grads)
    shardings = {k: jax.NamedSharding(mesh, s) for k, s in SPECS.items()}
    with set_mesh(mesh):
        sharded = jax.device_put(params, shardings)
        grads = [jax.device_put(g, shardings) for g in grads]
        state = jax.jit(tx.init)(sharded)
        updates, state = _updates(tx, sharded, state, grads)
    for step, (a, b) in enumerate(zip(single, updates, strict=True)):
        for k in a:
            np.testing.assert_allclose(
                b[k],
                a[k],
                rtol=0,
                atol=SHARDED_TOL * np.abs(a[k]).max(),
                err_msg=f"{k} at step {step + 1}",
            )
    if axis_type == "Explicit":
        inner = state[0]
        for k in params:  # state shaped like a parameter is sharded like it
            for leaf in (inner.mu[k], inner.nu[k]):
                assert leaf.sharding.is_equivalent_to(shardings[k], leaf.ndim), k
        # The stacked weight's factors are split along its batch axis.
        cached = inner.bases if name == "soap" else inner.roots
        factors = jax.tree.leaves((inner.stats["stack"], cached["stack"]))
        assert len(factors) == 4
        for f in factors:
            assert f.sharding.spec[0] == "a", f.sharding


@explicit_axes
@pytest.mark.parametrize("name", sorted(SHARDED))
def test_stacked_factors_are_not_gathered(name):
    """Each device preconditions its own slices of a batch-sharded stack."""
    kind = jax.sharding.AxisType.Explicit
    mesh = jax.make_mesh((8,), ("a",), axis_types=(kind,))
    tx = SHARDED[name]()
    params = {"stack": jax.random.normal(jax.random.key(0), (8, 6, 5))}
    with set_mesh(mesh):
        params = jax.device_put(params, jax.NamedSharding(mesh, P("a")))
        state = jax.jit(tx.init)(params)
        hlo = jax.jit(tx.update).lower(params, state, params).compile().as_text()
    gathers = re.findall(r"= \S+ all-gather\(", hlo) + re.findall(
        r"all-gather-start\(", hlo
    )
    assert not gathers, gathers


# --------------------------------------------------------------------------
# Validation names the argument.


@pytest.mark.parametrize(
    "factory, kwargs, name",
    [
        (gradax.shampoo, dict(b1=1.0), "b1"),
        (gradax.shampoo, dict(b2=1.5), "b2"),
        (gradax.shampoo, dict(eps=-1.0), "eps"),
        (gradax.shampoo, dict(matrix_epsilon=-1.0), "matrix_epsilon"),
        (gradax.shampoo, dict(weight_decay=-1.0), "weight_decay"),
        (gradax.shampoo, dict(block_size=0), "block_size"),
        (gradax.shampoo, dict(block_size=2.5), "block_size"),
        (
            gradax.shampoo,
            dict(preconditioning_compute_steps=0),
            "preconditioning_compute_steps",
        ),
        (gradax.shampoo, dict(start_preconditioning_step=-1), "start_preconditioning"),
        (gradax.scale_by_shampoo, dict(grafting_type="adam"), "grafting_type"),
        (gradax.soap, dict(b1=-0.1), "b1"),
        (gradax.soap, dict(b2=1.0), "b2"),
        (gradax.soap, dict(shampoo_beta=1.0), "shampoo_beta"),
        (gradax.soap, dict(eps=-1.0), "eps"),
        (gradax.soap, dict(weight_decay=-1.0), "weight_decay"),
        (gradax.soap, dict(precondition_frequency=0), "precondition_frequency"),
        (gradax.scale_by_soap, dict(max_precond_dim=0), "max_precond_dim"),
    ],
)
def test_validation_names_the_argument(factory, kwargs, name):
    args = () if factory in (gradax.scale_by_shampoo, gradax.scale_by_soap) else (0.1,)
    with pytest.raises(ValueError, match=name):
        factory(*args, **kwargs)


def test_grafting_type_error_lists_the_choices():
    with pytest.raises(ValueError, match="rmsprop_normalized"):
        gradax.shampoo(0.1, grafting_type="bogus")


def test_soap_weight_decay_needs_params():
    tx = gradax.scale_by_soap(weight_decay=0.1)
    g = {"w": jnp.ones((2, 3))}
    with pytest.raises(ValueError, match="params"):
        tx.update(g, tx.init(g))


# The reference's rules (distributed Shampoo), each an option; checked on a
# vector leaf with "sgd" grafting, whose direction is the gradient itself,
# against the recurrences written out in numpy.


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(momentum="average"), "momentum"),
        (dict(weight_decay_mode="l2"), "weight_decay_mode"),
        (dict(graft_bias_correction="no"), "graft_bias_correction"),
    ],
)
def test_reference_rule_options_name_themselves(kwargs, name):
    with pytest.raises(ValueError, match=name):
        gradax.shampoo(0.1, **kwargs)


def _sgd_grafted_vector_run(steps=4, **kwargs):
    """gradax's updates and the gradients and params they came from."""
    rng = np.random.default_rng(0)
    tx = gradax.shampoo(0.1, grafting_type="sgd", **kwargs)
    params = {"b": jnp.asarray(rng.standard_normal(5))}
    state = tx.init(params)
    out = []
    for _ in range(steps):
        g = {"b": jnp.asarray(rng.standard_normal(5))}
        u, state = tx.update(g, state, params)
        out.append((np.asarray(g["b"]), np.asarray(params["b"]), np.asarray(u["b"])))
        params = gradax.apply_updates(params, u)
    return out


@pytest.mark.parametrize("momentum", ["sum", "ema_uncorrected"])
@pytest.mark.parametrize("nesterov", [False, True])
@pytest.mark.parametrize("coupled", [False, True])
def test_reference_momentum_and_coupled_weight_decay(momentum, nesterov, coupled):
    b1, wd, lr = 0.8, 0.05, 0.1
    mode = "coupled" if coupled else "decoupled"
    run = _sgd_grafted_vector_run(
        b1=b1,
        momentum=momentum,
        nesterov=nesterov,
        weight_decay=wd,
        weight_decay_mode=mode,
    )
    w = 1.0 if momentum == "sum" else 1 - b1
    m = np.zeros(5)
    for g, p, got in run:
        d = g + wd * p if coupled else g
        m = b1 * m + w * d
        step = b1 * m + w * d if nesterov else m
        want = -lr * (step if coupled else step + wd * p)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_graft_bias_correction_false_leaves_the_accumulator_undivided():
    b2, eps, lr = 0.9, 1e-8, 0.1
    g = jnp.asarray([0.5, -2.0, 3.0])
    for correct in (True, False):
        tx = gradax.shampoo(lr, b1=0.0, b2=b2, eps=eps, graft_bias_correction=correct)
        u, _ = tx.update({"b": g}, tx.init({"b": g}), {"b": g})
        nu = (1 - b2) * g**2 / ((1 - b2) if correct else 1.0)
        want = -lr * g / (jnp.sqrt(nu) + eps)
        np.testing.assert_allclose(u["b"], want, rtol=1e-5)


def test_coupled_weight_decay_needs_params():
    tx = gradax.shampoo(0.1, weight_decay=0.1, weight_decay_mode="coupled")
    g = {"w": jnp.ones((2, 3))}
    with pytest.raises(ValueError, match="params"):
        tx.update(g, tx.init(g))


def test_reference_rule_options_keep_the_state_tree():
    params = {"w": jnp.ones((3, 4)), "b": jnp.ones(4)}
    default = gradax.shampoo(0.1).init(params)
    reference = gradax.shampoo(
        0.1,
        momentum="sum",
        weight_decay_mode="coupled",
        graft_bias_correction=False,
    ).init(params)
    assert jax.tree.structure(default) == jax.tree.structure(reference)


# --------------------------------------------------------------------------
# The reference's layouts: vectors, merged axes, skipped leaves, and a
# momentum of each direction.


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(precondition_vectors="yes"), "precondition_vectors"),
        (dict(merge_small_dims=-1), "merge_small_dims"),
        (dict(skip_preconditioning_dim_size_gt=-2), "skip_preconditioning"),
        (dict(grafting_momentum="both"), "grafting_momentum"),
    ],
)
def test_layout_options_name_themselves(kwargs, name):
    with pytest.raises(ValueError, match=name):
        gradax.shampoo(0.1, **kwargs)


@pytest.mark.parametrize(
    "shape, most, merged",
    [
        # distributed_shampoo.py's own examples
        ((1, 2, 512, 1, 2048, 1, 3, 4), 1024, (1024, 2048, 12)),
        ((1, 2, 768, 1, 2048), 1024, (2, 768, 2048)),
        ((3, 3, 64, 128), 4096, (576, 128)),
        ((32, 64), 4096, (2048,)),
        ((1, 1), 4096, (1,)),
        ((), 4096, ()),
    ],
)
def test_merged_shape(shape, most, merged):
    from gradax.optimizers._kronecker import merged_shape

    assert merged_shape(shape, most) == merged


def _sgd_grafted_shampoo(lr, b2, meps, **options):
    """Shampoo without momentum, preconditioning from the first update,
    grafted to the gradient's norm: the rules the numpy checks write out."""
    return gradax.shampoo(
        lr,
        b1=0.0,
        b2=b2,
        matrix_epsilon=meps,
        grafting_type="sgd",
        start_preconditioning_step=0,
        **options,
    )


def test_vector_full_statistic_matches_numpy():
    """Blocks of 4 and a short one of 2 (zero-padded here), exponent 2."""
    lr, b2, meps, steps = 0.1, 0.9, 0.1, 4
    rng = np.random.default_rng(1)
    grads = rng.standard_normal((steps, 6))
    tx = _sgd_grafted_shampoo(lr, b2, meps, block_size=4, precondition_vectors=True)
    params = {"b": jnp.zeros(6)}
    state = tx.init(params)
    stats = [np.zeros((4, 4)), np.zeros((2, 2))]
    for g in grads:
        u, state = tx.update({"b": jnp.asarray(g, jnp.float32)}, state, params)
        g = np.asarray(jnp.asarray(g, jnp.float32), np.float64)
        pre = []
        for k, piece in enumerate((g[:4], g[4:])):
            stats[k] = b2 * stats[k] + (1 - b2) * np.outer(piece, piece)
            pre.append(_inverse_root(stats[k], 2, meps) @ piece)
        pre = np.concatenate(pre)
        want = -lr * pre * np.linalg.norm(g) / np.linalg.norm(pre)
        np.testing.assert_allclose(u["b"], want, rtol=2e-5, atol=1e-7)


@pytest.mark.parametrize(
    "shape, merge, layout",
    [((8, 5), 4096, (40,)), ((2, 4, 6), 4096, (48,)), ((3, 3, 4, 5), 40, (36, 5))],
)
def test_merged_leaf_runs_as_its_merged_shape(shape, merge, layout):
    """merge_small_dims is a reshape to the merged layout, and back."""
    rng = np.random.default_rng(2)
    grads = rng.standard_normal((5, *shape)).astype(np.float32)
    options = dict(
        b1=0.9,
        start_preconditioning_step=1,
        matrix_epsilon=0.1,
        precondition_vectors=True,
    )
    merged = gradax.shampoo(0.1, merge_small_dims=merge, **options)
    plain = gradax.shampoo(0.1, **options)
    params = {"w": jnp.zeros(shape)}
    flat = {"w": jnp.zeros(layout)}
    s1, s2 = merged.init(params), plain.init(flat)
    for g in grads:
        u1, s1 = merged.update({"w": jnp.asarray(g)}, s1, params)
        u2, s2 = plain.update({"w": jnp.asarray(g.reshape(layout))}, s2, flat)
        np.testing.assert_allclose(
            u1["w"], np.asarray(u2["w"]).reshape(shape), rtol=1e-6, atol=1e-8
        )


def _tensor_shampoo_numpy(grads, lr, b2, meps, block):
    """Per-axis Shampoo of a rank-3 tensor, its blocks uneven (no padding),
    each block a factor per axis, roots of -1/6: distributed Shampoo's
    rule, written out; "sgd" grafting, no momentum."""
    shape = grads[0].shape
    cuts = [list(range(0, d, block)) for d in shape]
    stats = {}
    out = []
    for g in grads:
        pre = np.zeros_like(g)
        for i in cuts[0]:
            for j in cuts[1]:
                for k in cuts[2]:
                    idx = (
                        slice(i, i + block),
                        slice(j, j + block),
                        slice(k, k + block),
                    )
                    x = g[idx]
                    y = x
                    for axis in range(3):
                        others = [a for a in range(3) if a != axis]
                        gram = np.tensordot(x, x, axes=(others, others))
                        key = (i, j, k, axis)
                        stats[key] = b2 * stats.get(key, 0) + (1 - b2) * gram
                        root = _inverse_root(stats[key], 6, meps)
                        # contract the axis, the new one last (the reference's)
                        y = np.tensordot(y, root, axes=([0], [0]))
                    pre[idx] = y
        out.append(-lr * pre * np.linalg.norm(g) / np.linalg.norm(pre))
    return out


def test_merged_rank_three_leaf_has_a_factor_per_axis():
    lr, b2, meps = 0.1, 0.9, 0.1
    rng = np.random.default_rng(4)
    grads = rng.standard_normal((3, 3, 5, 4)).astype(np.float32)
    # merge_small_dims=2: (3, 5, 4) stays rank 3
    tx = _sgd_grafted_shampoo(lr, b2, meps, block_size=3, merge_small_dims=2)
    params = {"w": jnp.zeros((3, 5, 4))}
    state = tx.init(params)
    # 1 x 2 x 2 blocks of 3 (the last ones zero-padded), a factor per axis
    assert [r.shape for r in state[0].roots["w"]] == [(4, 3, 3)] * 3
    want = _tensor_shampoo_numpy(np.asarray(grads, np.float64), lr, b2, meps, 3)
    for g, w in zip(grads, want, strict=True):
        u, state = tx.update({"w": jnp.asarray(g)}, state, params)
        np.testing.assert_allclose(u["w"], w, rtol=2e-5, atol=1e-7)


@pytest.mark.parametrize("axis_type", axis_type_params("Auto", "Explicit"))
def test_sharded_tensor_with_a_factor_per_axis(axis_type):
    """A leaf merged to rank 3 is gathered whole; the same updates sharded."""
    kind = getattr(jax.sharding.AxisType, axis_type)
    mesh = jax.make_mesh((4, 2), ("a", "b"), axis_types=(kind, kind))
    tx = gradax.shampoo(
        0.05,
        start_preconditioning_step=0,
        block_size=4,
        matrix_epsilon=1e-2,
        merge_small_dims=4,  # (4, 7, 8) stays rank 3
    )
    grads = _sharded_grads()
    params = {"stack": _sharded_params()["stack"]}
    grads = [{"stack": jnp.asarray(g["stack"])} for g in grads]
    single, _ = _updates(tx, params, tx.init(params), grads)
    sharding = {"stack": jax.NamedSharding(mesh, P("a", None, "b"))}
    with set_mesh(mesh):
        sharded = jax.device_put(params, sharding)
        grads = [jax.device_put(g, sharding) for g in grads]
        updates, _ = _updates(tx, sharded, jax.jit(tx.init)(sharded), grads)
    for a, b in zip(single, updates, strict=True):
        np.testing.assert_allclose(
            b["stack"], a["stack"], rtol=0, atol=SHARDED_TOL * np.abs(a["stack"]).max()
        )


def test_skipped_leaf_takes_the_grafting_direction():
    tx = gradax.shampoo(
        0.1,
        b1=0.0,
        grafting_type="sgd",
        start_preconditioning_step=0,
        skip_preconditioning_dim_size_gt=6,
    )
    params = {"long": jnp.zeros((8, 5)), "short": jnp.zeros((5, 5))}
    state = tx.init(params)
    assert state[0].stats["long"] is None and state[0].stats["short"] is not None
    g = jax.tree.map(
        lambda p: jnp.arange(p.size, dtype=p.dtype).reshape(p.shape), params
    )
    u, _ = tx.update(g, state, params)
    np.testing.assert_allclose(u["long"], -0.1 * g["long"], rtol=1e-6)


def test_separate_grafting_momentum():
    """Before the start both rules step with the grafting momentum; after it
    "separate" carries a momentum of Shampoo's directions from the first
    update, "shared" one that took the grafting directions until then."""
    rng = np.random.default_rng(3)
    grads = rng.standard_normal((4, 6, 5)).astype(np.float32)
    runs = {}
    for rule in ("shared", "separate"):
        tx = gradax.shampoo(
            0.1,
            b1=0.9,
            matrix_epsilon=0.1,
            start_preconditioning_step=2,
            grafting_momentum=rule,
        )
        params = {"w": jnp.zeros((6, 5))}
        state = tx.init(params)
        assert (state[0].graft_mu is None) == (rule == "shared")
        out = []
        for g in grads:
            u, state = tx.update({"w": jnp.asarray(g)}, state, params)
            out.append(np.asarray(u["w"]))
        runs[rule] = out
    for t in range(2):
        np.testing.assert_allclose(runs["shared"][t], runs["separate"][t], rtol=1e-6)
    gap = np.linalg.norm(runs["shared"][2] - runs["separate"][2])
    assert gap > 1e-2 * np.linalg.norm(runs["shared"][2])
