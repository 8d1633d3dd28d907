"""Symmetric Newton–Schulz: the upper blocks of X X^T and A A, mirrored.

Tolerances are derived here, not fitted:

- One product. Every entry of ``L R^T`` is one dot product of length ``n``
  however the output is cut into blocks, so the blocked product and the
  exact one differ entrywise by at most ``gamma_n |L| |R|^T`` with
  ``gamma_n = n u / (1 - n u)`` (Higham, Accuracy and Stability of Numerical
  Algorithms, 3.5), plus one rounding of the result to the output dtype.
- The whole iteration in float64. The two paths start from the same X_t;
  the products they form differ by at most ``2 gamma_n |X| |X|^T``, whose
  spectral norm is at most ``2 gamma_n ||X||_F^2 <= 2 gamma_n m rho_t^2``
  (rho_t bounds X_t's singular values; 1 after normalization, then the
  maximum of the previous step's polynomial), and A A inherits twice that
  relative error plus its own. A step's new difference is then at most
  ``eps_t = 4 gamma m (|a| rho + |b| rho^3 + 3 |c| rho^5)`` (4: the two
  paths' roundings and the second products), and an earlier difference is
  carried by at most ``K_t = max |p_t'|`` on ``[0, rho_t]``: the Fréchet
  derivative of an odd matrix polynomial acts through divided differences
  of ``p_t`` (Daleckii–Krein), which the mean value theorem bounds by the
  largest slope. The bound is ``sum_t eps_t prod_{s > t} K_s``.
- float32 and bfloat16. That bound multiplies ``n u`` by a few hundred,
  useless at these precisions. Instead: both paths form every entry as a
  dot product of the same length in the same dtype, so each lies within
  the plain path's rounding envelope E of the exact iteration (E: the
  largest distance of the plain path from its float64 evaluation over the
  inputs tried), and by the triangle inequality
  ``||symmetric - plain|| <= 2 E``. A mirrored block in the wrong place
  moves the result by O(1), far outside.

Inputs are well conditioned (singular values in [0.5, 1]): with a
rank-deficient input the iteration amplifies rounding along the null
directions and neither path's result is meaningful there.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax_versions import enable_x64

import gradax
from gradax.orthogonal import _symmetric as symmetric
from gradax.orthogonal.coefficients import resolve_coefficients


@pytest.fixture(autouse=True)
def x64():
    """float64 for the references and the float64 cases."""
    with enable_x64(True):
        yield


def well_conditioned(shape, seed=0, dtype=np.float64):
    """Random singular vectors, singular values spread over [0.5, 1]."""
    rng = np.random.default_rng(seed)
    *batch, m, n = shape
    k = min(m, n)
    u, _ = np.linalg.qr(rng.standard_normal((*batch, m, k)))
    v, _ = np.linalg.qr(rng.standard_normal((*batch, n, k)))
    s = rng.uniform(0.5, 1.0, (*batch, 1, k))
    return ((u * s) @ np.swapaxes(v, -1, -2)).astype(dtype)


def gamma(n, dtype):
    u = float(jnp.finfo(dtype).eps) / 2
    return n * u / (1 - n * u)


def mT(x):  # noqa: N802
    return np.swapaxes(x, -1, -2)


@pytest.mark.parametrize("blocks", [2, 3, 4])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_blocked_product_is_the_product(blocks, dtype):
    x = well_conditioned((2, 36, 50), dtype=np.float64)
    got = symmetric.hermitian_product(
        jnp.asarray(x, dtype), jnp.asarray(x, dtype), blocks, jnp.matmul
    )
    xd = np.asarray(jnp.asarray(x, dtype), np.float64)
    exact = xd @ mT(xd)
    # gamma_n |X| |X|^T for the dot products, u |exact| for the output.
    u = float(jnp.finfo(dtype).eps) / 2
    bound = gamma(50, dtype) * (np.abs(xd) @ mT(np.abs(xd))) + u * np.abs(exact)
    assert np.all(np.abs(np.asarray(got, np.float64) - exact) <= bound)
    # Blocks off the diagonal are mirrored, so exactly each other's transposes.
    got = np.asarray(got)
    size = 36 // blocks
    assert np.array_equal(got[..., :size, size:], mT(got[..., size:, :size]))


def test_blocked_product_of_commuting_matrices_and_complex():
    """``L R^H`` for two commuting Hermitian matrices (Gram-NS's products),
    here complex: polynomials in one Hermitian matrix."""
    rng = np.random.default_rng(1)
    z = rng.standard_normal((24, 40)) + 1j * rng.standard_normal((24, 40))
    h = z @ z.conj().T / 40
    left, right = h, 0.5 * np.eye(24) + h @ h
    got = symmetric.hermitian_product(
        jnp.asarray(left), jnp.asarray(right), 4, jnp.matmul
    )
    exact = left @ right.conj().T
    bound = 2 * gamma(24, jnp.float64) * (np.abs(left) @ np.abs(right).T)
    assert np.all(np.abs(np.asarray(got) - exact) <= bound)
    # The blocks off the diagonal are exact mirrors (6 rows a block).
    got = np.asarray(got)
    assert np.array_equal(got[:6, 6:], got[6:, :6].conj().T)


def test_blocks_must_divide_the_rows():
    x = jnp.ones((10, 4))
    with pytest.raises(ValueError, match="blocks must divide the rows"):
        symmetric.hermitian_product(x, x, 3, jnp.matmul)


def test_cpu_blocks_rule():
    assert symmetric.cpu_blocks(255) == 1  # under two blocks of 128 rows
    assert symmetric.cpu_blocks(256) == 2
    assert symmetric.cpu_blocks(1024) == 8
    assert symmetric.cpu_blocks(4096) == 16
    assert symmetric.cpu_blocks(257) == 1  # a prime: nothing divides it
    for m in (300, 768, 1000, 2048):
        k = symmetric.cpu_blocks(m)
        assert m % k == 0 and m // k >= symmetric.MIN_BLOCK_ROWS


def float64_bound(table, m, n):
    """The bound of the module docstring, for float64, from the table."""
    g = gamma(max(m, n), jnp.float64)
    rho, total = 1.0, 0.0
    grid = np.linspace(0.0, 1.0, 4001)
    for a, b, c in table:
        s = rho * grid
        slope = np.abs(a + 3 * b * s**2 + 5 * c * s**4).max()
        step = 4 * g * m * (abs(a) * rho + abs(b) * rho**3 + 3 * abs(c) * rho**5)
        total = total * slope + step
        rho = np.abs(a * s + b * s**3 + c * s**5).max()
    return total


@pytest.fixture
def four_blocks(monkeypatch):
    """Cut even small Gram matrices into 4 blocks, so small tests exercise
    the mirrored blocks (the measured rule leaves them whole)."""
    monkeypatch.setattr(symmetric, "cpu_blocks", lambda m: 4)


@pytest.mark.parametrize("preset", ["keller", "polar_express"])
@pytest.mark.parametrize(
    "method, reference, shape",
    [
        ("symmetric", "ns", (48, 48)),
        ("symmetric", "ns", (2, 40, 96)),
        ("symmetric", "ns", (96, 40)),
        ("gram_symmetric", "gram", (40, 96)),
    ],
)
def test_float64_iteration_matches_plain(four_blocks, preset, method, reference, shape):
    x = jnp.asarray(well_conditioned(shape, seed=2))
    got = gradax.orthogonalize(x, coefficients=preset, method=method)
    want = gradax.orthogonalize(x, coefficients=preset, method=reference)
    table, _ = resolve_coefficients(preset, None)
    m, n = sorted(shape[-2:])
    bound = float64_bound(np.asarray(table, np.float64), m, n)
    assert bound < 1e-6  # the bound is tight enough to catch a wrong block
    diff = np.linalg.norm(np.asarray(got - want), ord=2, axis=(-2, -1)).max()
    assert diff <= bound, (diff, bound)


@pytest.mark.parametrize("precision", [None, "bfloat16"])
@pytest.mark.parametrize(
    "method, reference, shape",
    [("symmetric", "ns", (64, 64)), ("gram_symmetric", "gram", (32, 96))],
)
def test_low_precision_iteration_within_plain_rounding(
    four_blocks, precision, method, reference, shape
):
    seeds = range(4)
    inputs = [well_conditioned(shape, seed=s, dtype=np.float32) for s in seeds]

    def run(x, method, dtype, precision):
        return np.asarray(
            gradax.orthogonalize(
                jnp.asarray(x, dtype), method=method, precision=precision
            ),
            np.float64,
        )

    # The plain path's rounding envelope E: its distance from float64.
    envelope = max(
        np.linalg.norm(
            run(x, reference, jnp.float32, precision)
            - run(x, reference, jnp.float64, None)
        )
        for x in inputs
    )
    for x in inputs:
        got = run(x, method, jnp.float32, precision)
        want = run(x, reference, jnp.float32, precision)
        assert np.linalg.norm(got - want) <= 2 * envelope


@pytest.mark.parametrize("shape", [(256, 300), (384, 384)])
def test_measured_block_counts_run_through_orthogonalize(shape):
    """At the sizes where the rule cuts blocks (2 and 3 here), without the
    fixture: float64, the float64 bound."""
    x = jnp.asarray(well_conditioned(shape, seed=3))
    m, n = sorted(shape)
    assert symmetric.cpu_blocks(m) > 1
    got = gradax.orthogonalize(x, method="symmetric")
    want = gradax.orthogonalize(x, method="ns")
    table, _ = resolve_coefficients("keller", None)
    bound = float64_bound(np.asarray(table, np.float64), m, n)
    assert np.linalg.norm(np.asarray(got - want), ord=2) <= bound


def test_auto_picks_the_measured_method():
    from gradax.orthogonal.newton_schulz import auto_method

    f32, bf16 = jnp.float32, jnp.bfloat16
    assert auto_method(1024, 1024, f32, "cpu") == "symmetric"
    assert auto_method(1024, 4096, f32, "cpu") == "gram_symmetric"
    assert auto_method(128, 128, f32, "cpu") == "ns"  # one block: no saving
    assert auto_method(128, 512, f32, "cpu") == "gram"
    assert auto_method(1024, 1024, bf16, "cpu") == "ns"  # not measured
    assert auto_method(1024, 1024, f32, "gpu") == "ns"
    assert auto_method(1024, 4096, f32, "tpu") == "gram"


def test_method_option_in_muon_and_state_tree_unchanged():
    params = {"w": jnp.ones((8, 12)), "b": jnp.ones((12,))}
    plain, sym = gradax.muon(0.02, method="ns"), gradax.muon(0.02, method="symmetric")
    s_plain, s_sym = plain.init(params), sym.init(params)
    assert jax.tree.structure(s_plain) == jax.tree.structure(s_sym)
    assert jax.tree.map(lambda a: (a.shape, a.dtype), s_plain) == jax.tree.map(
        lambda a: (a.shape, a.dtype), s_sym
    )
    with pytest.raises(ValueError, match="method must be one of"):
        gradax.muon(0.02, method="triangle")
