"""The Pallas kernel for symmetric products, in Pallas's interpret mode.

Runs on the CPU (``interpret=True``) with small tiles, so that a few tiles,
the skipped lower ones, the mirrored writes and the zero padding are all
exercised in a fraction of a second. The bound is that of
tests/orthogonal/test_symmetric.py: every entry is one dot product of
length ``n`` accumulated in float32 (``gamma_n`` of float32 times
``|L| |R|^T``; products of two bfloat16 numbers are exact in float32), then
one rounding to the output dtype (``u |exact|``).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from jax_versions import enable_x64, needs_jax

import gradax
from gradax.orthogonal import _symmetric as symmetric

# The kernel's block specs use pl.squeezed (jax 0.6.1); below it gradax's
# dispatch never picks the kernel (gradax/orthogonal/_symmetric.py).
pytestmark = needs_jax((0, 6, 1), "The Pallas symmetric kernel (pl.squeezed)")

pallas_symmetric = pytest.importorskip(
    "gradax.orthogonal._pallas_symmetric",
    reason="jax.experimental.pallas is not importable in this jax",
)


def gamma(n, dtype):
    u = float(jnp.finfo(dtype).eps) / 2
    return n * u / (1 - n * u)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("shape", [(40, 70), (2, 32, 48)])
def test_kernel_matches_the_exact_product(dtype, shape):
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal(shape), dtype)
    # 40 rows and 70 columns pad to 48 x 80: three 16-row tiles, five steps.
    got = pallas_symmetric.hermitian_product(x, x, tile=16, k_tile=16, interpret=True)
    assert got.shape == (*shape[:-1], shape[-2]) and got.dtype == dtype
    xd = np.asarray(x, np.float64)
    exact = xd @ np.swapaxes(xd, -1, -2)
    u = float(jnp.finfo(dtype).eps) / 2
    bound = gamma(shape[-1], jnp.float32) * (
        np.abs(xd) @ np.swapaxes(np.abs(xd), -1, -2)
    ) + u * np.abs(exact)
    got = np.asarray(got, np.float64)
    assert np.all(np.abs(got - exact) <= bound)
    # The lower tiles are written from the upper ones: exact transposes.
    assert np.array_equal(got[..., 16:, :16], np.swapaxes(got[..., :16, 16:], -1, -2))


def test_kernel_refuses_different_shapes():
    with pytest.raises(ValueError, match="left and right differ in shape"):
        pallas_symmetric.hermitian_product(
            jnp.ones((4, 8)), jnp.ones((4, 6)), interpret=True
        )


def test_gpu_dispatch_picks_the_kernel_for_half_precision():
    pick = symmetric.hermitian_products
    assert pick(512, jnp.bfloat16, jnp.matmul, "gpu") is (
        pallas_symmetric.hermitian_product
    )
    # float32 keeps XLA's products (and their precision settings).
    assert pick(512, jnp.float32, jnp.matmul, "gpu") is not (
        pallas_symmetric.hermitian_product
    )
    assert not pallas_symmetric.supports(128, jnp.bfloat16)  # one tile


def test_newton_schulz_through_the_kernel(monkeypatch):
    """The whole bfloat16 iteration with the interpreted kernel stays within
    the plain bfloat16 path's rounding envelope (see test_symmetric.py)."""

    def interpreted(m, dtype, mm, backend=None):
        def product(left, right):
            return pallas_symmetric.hermitian_product(
                left, right, tile=16, k_tile=16, interpret=True
            )

        return product

    rng = np.random.default_rng(3)
    u, _ = np.linalg.qr(rng.standard_normal((48, 48)))
    v, _ = np.linalg.qr(rng.standard_normal((64, 48)))
    x = (u * rng.uniform(0.5, 1.0, 48)) @ v.T
    plain = np.asarray(
        gradax.orthogonalize(jnp.asarray(x, jnp.float32), precision="bfloat16"),
        np.float64,
    )
    with enable_x64(True):
        exact = np.asarray(gradax.orthogonalize(jnp.asarray(x), method="ns"))
    monkeypatch.setattr(symmetric, "hermitian_products", interpreted)
    got = np.asarray(
        gradax.orthogonalize(
            jnp.asarray(x, jnp.float32), method="symmetric", precision="bfloat16"
        ),
        np.float64,
    )
    envelope = np.linalg.norm(plain - exact)
    assert np.linalg.norm(got - plain) <= 2 * envelope
