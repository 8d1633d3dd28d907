"""QR, eigh and SVD based optimizers on rank-deficient input.

On an exactly rank-1 gradient ``G = s u v^T`` (``u``, ``v`` unit) and on an
all-zero one, Dion, Dion2, Shampoo, SOAP and GaLore must give a finite
update that does not depend on the basis rounding picks for the null space:
the same under ``jit`` and eager, sharded on 8 devices and not, and equal to
the answer the method defines (a rank-1 update along ``u``). Before the fix,
Dion, SOAP and GaLore turned the null-space rounding noise into O(1) steps.

Each optimizer runs once per path (eager, jit, sharded) on a tree holding
both inputs, so the whole file compiles a handful of programs. The sharded
path uses Explicit mesh axes, which gradax supports from jax 0.7.0 on; on an
older jax it alone is skipped.

Tolerances. The rank-1 input has one nonzero singular value separated from
the rest by ``s``, so its singular pair, and every update built from it, is
perturbed by rounding by about ``eps`` relative (condition number 1). The
floor of ``gradax/linalg/null_space.py``, ``4 sqrt(n) eps`` with ``n = 8``, bounds
each path's error; two paths differ by at most twice that (``TOL``, 2.7e-5
of the update's largest entry). Shampoo alone keeps rounding noise along
the null space, scaled by the damped inverse root there: its factor
``(matrix_epsilon)^(-1/4) = 31.6`` on one side (the terms with noise on both
sides are ``eps^2``), hence ``SHAMPOO_TOL = 31.6 TOL``. Dion2's
Newton-Schulz polynomial has slope ``a_k`` at 0 in its step ``k``, so the
rounding of each step (``sqrt(n) eps``) in the null space grows by the
product of the later slopes: ``DION2_TOL = 2 sqrt(n) eps sum_k prod_{j>=k}
a_j`` (1150 for the 5 polar-express steps; 7.8e-4), as in every Muon.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax_versions import explicit_axes, set_mesh

import gradax

P = jax.sharding.PartitionSpec
SHAPE = (8, 6)
STEPS = 2
EPS32 = float(np.finfo(np.float32).eps)
TOL = 2 * 4 * np.sqrt(SHAPE[0]) * EPS32
SHAMPOO_TOL = TOL * 1e-6 ** (-1 / 4)
_slopes = np.asarray(gradax.polar_express_coefficients(5))[:, 0]
DION2_TOL = (
    2
    * np.sqrt(SHAPE[0])
    * EPS32
    * sum(np.prod(_slopes[k:]) for k in range(len(_slopes)))
)

U = np.random.default_rng(7).normal(size=SHAPE[0])
# Dion2 keeps the 3 columns with the largest |v_j|; with error feedback the
# others catch up by a factor 2 / 1.95 by step 2, far from the 1.5 between
# the third and fourth here, so its choice has no near-ties to round.
V = np.array([0.2, -0.9, 0.45, -0.1, 0.7, -0.3])
U, V = U / np.linalg.norm(U), V / np.linalg.norm(V)

GRADS = {
    "one": jnp.asarray(3.0 * np.outer(U, V), jnp.float32),
    "zero": jnp.zeros(SHAPE, jnp.float32),
}


def _dion2_expected():
    # "auto" slices along the shorter side (the 6 columns); fraction 0.5
    # orthogonalizes the 3 with the largest L1 norms, |v_j| * ||u||_1.
    keep = np.argsort(-np.abs(V))[:3]
    w = np.zeros_like(V)
    w[keep] = V[keep]
    return np.outer(U, w)


# name: (transformation, the rank-1 update's direction, its tolerance, the
# steps with an update: SOAP's first step only builds its bases).
CASES = {
    "dion": (lambda: gradax.scale_by_dion(1.0), np.outer(U, V), TOL, 0),
    "dion2": (lambda: gradax.scale_by_dion2(0.5), _dion2_expected(), DION2_TOL, 0),
    "shampoo": (
        lambda: gradax.scale_by_shampoo(start_preconditioning_step=0),
        np.outer(U, V),
        SHAMPOO_TOL,
        0,
    ),
    "soap": (lambda: gradax.scale_by_soap(), np.outer(U, V), TOL, 1),
    # Adam on the projection s (u^T u) v^T: each entry's sign, along u.
    "galore": (
        lambda: gradax.scale_by_galore(rank=3),
        np.outer(U, np.sign(V)),
        TOL,
        0,
    ),
}


def _eager(tx, grads):
    """STEPS updates on a constant gradient, op by op: the stacked updates."""
    state, out = tx.init(grads), []
    for _ in range(STEPS):
        u, state = tx.update(grads, state)
        out.append(u)
    return jax.tree.map(lambda *x: jnp.stack(x), *out)


def _scanned(tx, grads):
    """The same as one program (the step compiled once, in a scan)."""

    def step(state, _):
        u, state = tx.update(grads, state)
        return state, u

    return jax.lax.scan(step, tx.init(grads), length=STEPS)[1]


def _jit(tx):
    return jax.jit(lambda g: _scanned(tx, g))(GRADS)


def _sharded(tx):
    """The scanned program on 8 devices, Explicit axes (sharding in types)."""
    kind = jax.sharding.AxisType.Explicit
    mesh = jax.make_mesh((4, 2), ("a", "b"), axis_types=(kind, kind))
    with set_mesh(mesh):
        grads = jax.device_put(GRADS, jax.NamedSharding(mesh, P("a", "b")))
        return jax.jit(lambda g: _scanned(tx, g))(grads)


@functools.cache
def _eager_updates(name):
    return _eager(CASES[name][0](), GRADS)


# Each path is compared with eager; the sharded one needs Explicit axes,
# which gradax supports from jax 0.7.0 on.
PATHS = {"jit": _jit, "sharded": _sharded}


@pytest.mark.parametrize("path", ["jit", pytest.param("sharded", marks=explicit_axes)])
@pytest.mark.parametrize("name", sorted(CASES))
def test_rank_one_and_zero_updates(name, path):
    make, expected, tol, first = CASES[name]
    paths = {"eager": _eager_updates(name), path: PATHS[path](make())}
    for which, updates in paths.items():
        one, zero = np.asarray(updates["one"]), np.asarray(updates["zero"])
        assert np.all(np.isfinite(one)) and np.all(np.isfinite(zero)), which
        # Rank 0: nothing to do, exactly.
        np.testing.assert_array_equal(zero, 0, err_msg=f"{name} {which} rank 0")
        np.testing.assert_array_equal(one[:first], 0, err_msg=which)
        for step in range(first, STEPS):
            d = one[step]
            scale = np.abs(d).max()
            assert scale > 0.1, (which, step)
            # The update is the method's rank-1 answer, up to a positive
            # factor: nothing along the null space rounding chose.
            factor = np.sum(d * expected) / np.sum(expected**2)
            assert factor > 0, (which, step)
            np.testing.assert_allclose(
                d,
                factor * expected,
                rtol=0,
                atol=tol * scale,
                err_msg=f"{which} {step}",
            )
    for a, b in zip(
        jax.tree.leaves(paths[path]), jax.tree.leaves(paths["eager"]), strict=True
    ):
        a, b = np.asarray(a), np.asarray(b)
        np.testing.assert_allclose(
            a, b, rtol=0, atol=tol * max(np.abs(b).max(), 1e-30), err_msg=path
        )


def test_dion_rank_one_update_does_not_depend_on_the_seed():
    """Any start Q with B Q != 0 gives the same rank-1 update."""
    grads = {"w": GRADS["one"]}
    step = jax.jit(lambda tx, g, s: tx.update(g, s))
    outs = []
    for seed in (0, 1):
        tx = gradax.scale_by_dion(1.0, seed=seed)
        outs.append(np.asarray(step(tx, grads, tx.init(grads))[0]["w"]))
    np.testing.assert_allclose(outs[0], outs[1], rtol=0, atol=TOL)
    np.testing.assert_allclose(outs[0], np.outer(U, V), rtol=0, atol=TOL)


def test_dion_keeps_its_power_iteration_through_low_rank_steps():
    """A zero gradient leaves Q as it was; after rank-1 steps a full-rank
    gradient gets a full-rank update (Q did not collapse to rank 1)."""
    tx = gradax.scale_by_dion(1.0)
    full = jnp.asarray(np.random.default_rng(1).normal(size=SHAPE), jnp.float32)

    def run(g):
        state = tx.init({"w": g})
        _, after_zero = tx.update({"w": jnp.zeros(SHAPE)}, state)
        for _ in range(2):
            _, after_one = tx.update({"w": GRADS["one"]}, after_zero)
        u, _ = tx.update({"w": full}, after_one)
        return state.q["w"], after_zero.q["w"], u["w"]

    q0, q_zero, u = jax.jit(run)(full)
    np.testing.assert_array_equal(q_zero, q0)
    singular = np.linalg.svd(np.asarray(u), compute_uv=False)
    assert singular.min() > 0.1, singular
