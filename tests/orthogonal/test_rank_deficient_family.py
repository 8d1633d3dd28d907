"""The Muon family on rank-deficient matrices, stacked and single.

Every member gets rank-1 gradients (an outer product of a cosine and a sine
column, varying with the step) on a stacked `(2, 12, 16)` leaf, a tall
`(16, 12)` and a wide `(12, 16)` matrix, with muon_weight_dimension_numbers
"auto" (the stack is two matrices). The columns of step `t` are
`cos(0.3 i + t + s)` and `sin(0.7 j + 2 t + s)`, so every gradient lies in
the same two-dimensional column and row spaces: the momentum has rank 2 from
the second step on, and the rest of each matrix is a null space whose basis
only rounding picks. The update must not depend on that basis: `jax.jit`
and eager agree to float32 rounding after `STEPS` steps. Dion used to
normalize its power iteration's rounding noise there into an O(1) column
(issue 47, item 8): here both paths moved the stacked leaf outside the
gradients' spaces (below) by a third of its movement, each in a direction
of its own rounding.

All members run in one jitted program and once eagerly, so the file
compiles one program (and eager's primitives).

Tolerances, relative to the sum over the steps of each step's largest change
of the leaf (the errors of the steps add up at most):

- Newton–Schulz members: rounding in the null space (`sqrt(n) eps` per
  step, `n = 16` the longer side) grows by the slope at 0 of each later
  polynomial, `a_k`: `2 sqrt(n) eps sum_k prod_{j >= k} a_j` for the two
  paths (as in tests/conformance/test_rank_deficient.py; 6.5e-4 for
  Keller's coefficients).
- Dion and AdamH have no such amplification (nor has QK-Clip's rescaling,
  which MuonClip adds to Muon's steps): each path is within the noise floor
  `4 sqrt(n) eps` of the exact step per product, and Dion's normalized
  columns come from a QR of `B Q`, whose rounding grows with that
  product's condition number `||B|| ||Q_k|| / s_k(B Q_k)`
  (`k` the rank of `B`, `Q_k` the first `k` columns of the start `Q`). The
  products here have condition numbers up to 113 (computed in float64 from
  the eager run's states: the Gaussian start `Q` makes some columns of
  `B Q` nearly dependent, which is what once let rounding through), which
  `CONDITION` bounds: `2 * 4 sqrt(n) eps * CONDITION` per step.

The exact Muon, Scion (spectral) and Dion steps lie in the gradients' column
and row spaces (their momentum stays there: Dion's error feedback subtracts
a product of its factors, `P` in the column space and `R` in the row
space), so the parameters move only there; a rounding-chosen column is
outside. That holds to the same tolerances, on each path by itself.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradax
from gradax.linalg.null_space import independent_columns, noise_floor
from gradax.orthogonal.coefficients import newton_schulz_table, resolve_coefficients

STEPS = 4
LR = 0.05
LONG_SIDE = 16
EPS32 = float(np.finfo(np.float32).eps)
FLOOR = 4 * np.sqrt(LONG_SIDE) * EPS32
CONDITION = 120
QR_TOL = 2 * FLOOR * CONDITION
AUTO = dict(muon_weight_dimension_numbers="auto")


def _ns_tol(ns_coeffs, ns_steps=5):
    """The null-space bound of a Newton–Schulz scheme (module docstring)."""
    table, _ = resolve_coefficients(*newton_schulz_table(ns_coeffs, ns_steps))
    slopes = np.asarray(table)[:, 0]
    amplification = sum(np.prod(slopes[k:]) for k in range(len(slopes)))
    return 2 * np.sqrt(LONG_SIDE) * EPS32 * amplification


KELLER = (3.4445, -4.775, 2.0315)


def _spectral_everywhere(params):
    return jax.tree.map(lambda x: "spectral" if x.ndim >= 2 else "rms", params)


# name: (optimizer, per-step tolerance, whether its exact step lies in the
# gradients' column and row spaces).
MEMBERS = {
    "muon": (lambda: gradax.muon(LR, **AUTO), _ns_tol(KELLER), True),
    # MuonClip: Muon, then QK-Clip on the stack's two slices (query, key).
    "muonclip": (lambda: gradax.muon(LR, **AUTO), _ns_tol(KELLER), False),
    "normuon": (lambda: gradax.normuon(LR, **AUTO), _ns_tol(KELLER), False),
    "adamuon": (lambda: gradax.adamuon(LR, **AUTO), _ns_tol(KELLER), False),
    "dion": (lambda: gradax.dion(LR, **AUTO), QR_TOL, True),
    "dion_as_is": (
        lambda: gradax.dion(LR, orientation="as_is", **AUTO),
        QR_TOL,
        True,
    ),
    "dion_rank2": (lambda: gradax.dion(LR, rank=2, **AUTO), QR_TOL, True),
    "dion2": (
        lambda: gradax.dion2(LR, **AUTO),
        _ns_tol("polar_express_fixed5"),
        False,
    ),
    "scion": (
        lambda: gradax.scion(
            LR,
            unconstrained=True,
            lmo=_spectral_everywhere,
            weight_dimension_numbers="auto",
        ),
        _ns_tol(KELLER),
        True,
    ),
    "muonh": (lambda: gradax.muonh(LR, **AUTO), _ns_tol(KELLER), False),
    "adamh": (lambda: gradax.adamh(LR), QR_TOL, False),
}


def _columns(length, step, phase, freq, wave):
    return wave(freq * jnp.arange(length) + step + phase)


def _rank_one(rows, cols, step, phase):
    u = _columns(rows, step, phase, 0.3, jnp.cos)
    v = _columns(cols, 2 * step, phase, 0.7, jnp.sin)
    return u[:, None] * v[None, :]


def _grads(step):
    return {
        "mat": _rank_one(16, 12, step, 0.5),
        "stack": jnp.stack(
            [_rank_one(12, 16, step, 0.0), _rank_one(12, 16, step, 1.0)]
        ),
        "vector": jnp.cos(jnp.arange(5.0) + step),
        "wide": _rank_one(12, 16, step, 2.0),
    }


PARAMS = {
    "mat": jnp.linspace(0.3, -0.2, 16 * 12).reshape(16, 12),
    "stack": jnp.linspace(-0.5, 0.5, 2 * 12 * 16).reshape(2, 12, 16),
    "vector": jnp.ones(5),
    "wide": jnp.linspace(-0.1, 0.4, 12 * 16).reshape(12, 16),
}
# QK-Clip's recorded logits per head (4 heads of 4 on the stack's last
# axis): two above tau, two below.
MAX_LOGITS = jnp.array([150.0, 80.0, 300.0, 100.0])


def _clip(params):
    w_q, w_k = gradax.qk_clip(
        params["stack"][0], params["stack"][1], MAX_LOGITS, tau=100.0
    )
    return {**params, "stack": jnp.stack([w_q, w_k])}


def _run_all():
    """Every member's parameters after each step: {name: [params_0..T]}."""
    out = {}
    for name, (make, _, _) in MEMBERS.items():
        tx = make()
        params = PARAMS
        state = tx.init(params)
        trajectory = [params]
        for step in range(STEPS):
            updates, state = tx.update(_grads(float(step)), state, params)
            params = gradax.apply_updates(params, updates)
            if name == "muonclip":
                params = _clip(params)
            trajectory.append(params)
        out[name] = trajectory
    return out


@functools.cache
def _paths():
    return {"jit": jax.jit(_run_all)(), "eager": _run_all()}


def _scale(trajectory, leaf):
    """The sum over the steps of the leaf's largest change."""
    steps = zip(trajectory[:-1], trajectory[1:], strict=True)
    return sum(float(np.abs(b[leaf] - a[leaf]).max()) for a, b in steps)


@pytest.mark.parametrize("name", sorted(MEMBERS))
def test_jit_and_eager_agree_on_rank_one_gradients(name):
    tol = MEMBERS[name][1]
    paths = _paths()
    jitted, eager = paths["jit"][name], paths["eager"][name]
    for leaf in ("mat", "stack", "wide"):
        scale = _scale(eager, leaf)
        assert scale > 0.01 * LR, (name, leaf)
        np.testing.assert_allclose(
            np.asarray(jitted[-1][leaf]),
            np.asarray(eager[-1][leaf]),
            rtol=0,
            atol=tol * scale,
            err_msg=f"{name} {leaf}",
        )


def _spaces(rows, cols):
    """Orthonormal bases of the gradients' column and row spaces."""
    i, j = np.arange(rows), np.arange(cols)
    u = np.linalg.qr(np.stack([np.cos(0.3 * i), np.sin(0.3 * i)], 1))[0]
    v = np.linalg.qr(np.stack([np.sin(0.7 * j), np.cos(0.7 * j)], 1))[0]
    return u, v


@pytest.mark.parametrize("name", sorted(n for n, m in MEMBERS.items() if m[2]))
def test_steps_stay_in_the_gradients_spaces(name):
    """No column that rounding chose: the parameters move within the span."""
    tol = MEMBERS[name][1]
    for path, trajectories in _paths().items():
        trajectory = trajectories[name]
        for leaf in ("mat", "stack", "wide"):
            moved = np.asarray(trajectory[-1][leaf] - PARAMS[leaf], np.float64)
            u, v = _spaces(*moved.shape[-2:])
            outside_columns = moved - u @ (u.T @ moved)
            outside_rows = moved - (moved @ v) @ v.T
            scale = _scale(trajectory, leaf)
            for outside in (outside_columns, outside_rows):
                assert np.abs(outside).max() <= tol * scale, (path, leaf)


def test_a_column_is_noise_by_its_distance_from_the_earlier_ones():
    """Dion's test (gradax/linalg/null_space.py): a column in the span of the
    earlier ones is dropped however large its norm, a small column outside
    it is kept, and no column after a dropped one is kept."""
    n, scale = 16, 1.0
    floor = noise_floor(n, jnp.float32) * scale
    basis = np.linalg.qr(np.random.default_rng(0).normal(size=(n, 4)))[0]
    a, b, c, d = basis.T
    columns = [
        a,
        b,
        # In the span of a and b, 1e3 floors long: noise of the old kind.
        1e3 * floor * (0.6 * a + 0.8 * b),
        # New, but after a dropped column: rounding's too.
        c,
    ]
    x = jnp.asarray(np.stack(columns, 1), jnp.float32)
    keep = np.asarray(independent_columns(x, jnp.full((1, 1), scale), n))
    np.testing.assert_array_equal(keep, [[True, True, False, False]])
    # A column 1e3 floors long outside the span is a true one.
    x = jnp.asarray(np.stack([a, b, 1e3 * floor * c, d], 1), jnp.float32)
    keep = np.asarray(independent_columns(x, jnp.full((1, 1), scale), n))
    np.testing.assert_array_equal(keep, [[True, True, True, True]])
    # Nothing from an all-zero matrix.
    zero = jnp.zeros((2, n, 3))
    keep = np.asarray(independent_columns(zero, jnp.zeros((2, 1, 1)), n))
    np.testing.assert_array_equal(keep, np.zeros((2, 1, 3), bool))
