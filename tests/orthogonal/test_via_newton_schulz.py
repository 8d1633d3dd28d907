"""orthogonalize_via_newton_schulz: optax's call, optax's numbers."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from optax.contrib import _muon as optax_muon

import gradax
from gradax.orthogonal.coefficients import KELLER, YOU5

PRECONDITIONINGS = ("frobenius", "spectral", "aol", "schatten")
ONE_ROW = np.array(KELLER[0], np.float32)  # (3,), run ns_steps times
TABLE = np.array(YOU5, np.float32)  # (5, 3), one row a step
SHAPES = ((16, 16), (24, 12), (12, 24))  # square, tall, wide

# Tolerance. The two iterations do the same float32 operations in slightly
# different orders (the Frobenius norm's sum, the Schatten and AOL first
# steps' Gram matrix: optax rescales A = X X^T, gradax recomputes it from the
# rescaled X), so they differ by a few float32 ulps (eps = 2^-23) per step.
# A step X -> U p(S) V^T, p(s) = a s + b s^3 + c s^5, multiplies a
# difference by at most the largest divided difference of p on [-s_max,
# s_max], which for these polynomials is p'(0) = a. Over the steps:
# 4 eps * prod(max(a_t, 1)) = 2.3e-4 for Keller's row (3.4445^5) and for You's
# table (4.08 * 3.95 * 3.74 * 2.88 * 2.84); outputs are of size ~1, so the
# bound is absolute. Measured differences are below 1e-6: the singular values
# leave 0 after a step or two, for near 1, where |p'| <= 1.
F32_EPS = float(np.finfo(np.float32).eps)


def _tolerance(coeffs, steps):
    a = np.abs(np.atleast_2d(coeffs)[:, 0])
    a = np.resize(a, steps) if np.ndim(coeffs) == 1 else a
    return 4 * F32_EPS * float(np.prod(np.maximum(a, 1.0)))


def _well_conditioned(shape, seed):
    """U diag(s) V^T with s from 3 down to 0.3 (condition number 10)."""
    rng = np.random.default_rng(seed)
    *batch, m, n = shape
    k = min(m, n)
    u, _ = np.linalg.qr(rng.standard_normal((*batch, m, k)))
    v, _ = np.linalg.qr(rng.standard_normal((*batch, n, k)))
    s = rng.permutation(np.geomspace(3.0, 0.3, k))
    return jnp.asarray((u * s) @ np.swapaxes(v, -1, -2), jnp.float32)


# (preconditioning, coefficients, shape): every preconditioning with both
# kinds of coefficients on every orientation, in one compiled program a side.
CASES = [
    (p, name, shape)
    for p in PRECONDITIONINGS
    for name in ("one_row", "table")
    for shape in SHAPES
]
COEFFS = {"one_row": ONE_ROW, "table": TABLE}


def _run_all(fn, xs, coeffs):
    return [
        fn(x, coeffs[name], 5, p, 1e-8)
        for (p, name, _), x in zip(CASES, xs, strict=True)
    ]


def test_matches_optax_for_every_preconditioning_table_and_orientation():
    xs = [_well_conditioned(shape, seed) for seed, (_, _, shape) in enumerate(CASES)]
    as_arrays = {k: jnp.asarray(v) for k, v in COEFFS.items()}
    ours_fn = gradax.orthogonalize_via_newton_schulz
    theirs = jax.jit(
        lambda xs, c: _run_all(optax_muon.orthogonalize_via_newton_schulz, xs, c)
    )(xs, as_arrays)
    # Coefficients as jit arguments (traced, as optax's MuonState holds them)
    # and closed over (concrete: gradax's compile-time constants).
    traced = jax.jit(lambda xs, c: _run_all(ours_fn, xs, c))(xs, as_arrays)
    concrete = jax.jit(lambda xs: _run_all(ours_fn, xs, COEFFS))(xs)
    for case, t, a, b in zip(CASES, theirs, traced, concrete, strict=True):
        p, name, shape = case
        tol = _tolerance(COEFFS[name], 5)
        assert a.shape == b.shape == shape and a.dtype == jnp.float32
        np.testing.assert_allclose(a, t, rtol=0, atol=tol, err_msg=str(case))
        np.testing.assert_allclose(b, t, rtol=0, atol=tol, err_msg=str(case))


@pytest.mark.parametrize("preconditioning", ["frobenius", "schatten"])
def test_weight_with_dimension_numbers_matches_optax(preconditioning):
    # A stack of 3 layers (batch axis 1), fan-in axis 0, fan-out axis 2; and
    # a conv kernel (h, w, c_in, c_out) with three reduction axes.
    stack = jnp.swapaxes(_well_conditioned((3, 8, 12), seed=1), 0, 1)
    conv = _well_conditioned((18, 6), seed=2).reshape(3, 3, 2, 6)
    for x, dims in ((stack, (0, 2)), (conv, ((0, 1, 2), 3))):
        theirs = optax_muon.orthogonalize_via_newton_schulz(
            x,
            jnp.asarray(ONE_ROW),
            preconditioning=preconditioning,
            dimension_numbers=optax_muon.MuonDimensionNumbers(*dims),
        )
        ours = gradax.orthogonalize_via_newton_schulz(
            x,
            jnp.asarray(ONE_ROW),
            preconditioning=preconditioning,
            dimension_numbers=gradax.MuonDimensionNumbers(*dims),
        )
        assert ours.shape == x.shape
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=_tolerance(ONE_ROW, 5))


def test_vmap_and_jit_agree_with_dimension_numbers():
    stack = _well_conditioned((4, 12, 20), seed=3)
    coeffs = jnp.asarray(TABLE)
    one = gradax.orthogonalize_via_newton_schulz
    vmapped = jax.jit(jax.vmap(lambda x: one(x, coeffs, preconditioning="aol")))(stack)
    batched = one(
        stack,
        coeffs,
        preconditioning="aol",
        dimension_numbers=gradax.MuonDimensionNumbers(1, 2),
    )
    theirs = jax.vmap(
        lambda x: optax_muon.orthogonalize_via_newton_schulz(
            x, coeffs, preconditioning="aol"
        )
    )(stack)
    tol = _tolerance(TABLE, 5)
    np.testing.assert_allclose(vmapped, batched, rtol=0, atol=tol)
    np.testing.assert_allclose(vmapped, theirs, rtol=0, atol=tol)


def test_step_counts_follow_optax():
    x = _well_conditioned((6, 10), seed=4)
    one = gradax.orthogonalize_via_newton_schulz
    theirs = optax_muon.orthogonalize_via_newton_schulz
    # A (n, 3) table ignores ns_steps; (3,) runs ns_steps times, 0 included
    # (only the normalization; AOL and Schatten scale in their first step).
    np.testing.assert_array_equal(
        one(x, jnp.asarray(TABLE[:2]), 7), one(x, jnp.asarray(TABLE[:2]), 1)
    )
    for p in PRECONDITIONINGS:
        for steps in (0, 2):
            np.testing.assert_allclose(
                one(x, jnp.asarray(ONE_ROW), steps, p),
                theirs(x, jnp.asarray(ONE_ROW), steps, p),
                rtol=0,
                atol=_tolerance(ONE_ROW, 2),
            )


def test_errors_name_the_argument_where_optax_raises():
    one = gradax.orthogonalize_via_newton_schulz
    coeffs = jnp.asarray(ONE_ROW)
    with pytest.raises(ValueError, match="dimension_numbers"):
        one(jnp.ones((2, 3, 4)), coeffs)
    with pytest.raises(ValueError, match="dimension_numbers"):
        one(jnp.ones((2, 3, 4)), coeffs, dimension_numbers=(0, 1))
    for bad in (jnp.ones(4), jnp.ones((2, 2)), jnp.ones((2, 3, 3)), jnp.ones(())):
        with pytest.raises(ValueError, match="ns_coeffs"):
            one(jnp.ones((3, 4)), bad)
    with pytest.raises(ValueError, match="preconditioning"):
        one(jnp.ones((3, 4)), coeffs, preconditioning="polar")
    with pytest.raises(ValueError, match="ns_steps"):
        one(jnp.ones((3, 4)), coeffs, -1)
    # optax raises ValueError for the same calls.
    with pytest.raises(ValueError):
        optax_muon.orthogonalize_via_newton_schulz(jnp.ones((2, 3, 4)), coeffs)
    with pytest.raises(ValueError):
        optax_muon.orthogonalize_via_newton_schulz(jnp.ones((3, 4)), jnp.ones((2, 2)))


def test_optax_private_path_and_public_names_are_one_function():
    import gradax.contrib._muon as muon_path

    one = gradax.orthogonalize_via_newton_schulz
    assert muon_path.orthogonalize_via_newton_schulz is one
    assert gradax.contrib.orthogonalize_via_newton_schulz is one
