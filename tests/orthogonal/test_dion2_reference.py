"""Dion2's default Newton–Schulz scheme is the reference code's.

microsoft/dion, commit 0a059a4542e5aa74b40dcd1dce363836c7afcd48: Dion2
(dion/dion2.py, ``use_polar_express=True`` by default) orthogonalizes with
dion/polar_express.py: ``X / (||X||_F * 1.02 + epsilon)``, then the five fixed
rows of ``_POLAR_EXPRESS_COEFFS``, ``X <- a X + (b A + c A^2) X`` with
``A = X X^T`` on the wide orientation.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax_versions import enable_x64

import gradax
from gradax.orthogonal.coefficients import (
    POLAR_EXPRESS_FIXED5,
    PRESETS,
    resolve_coefficients,
)

# Transcribed from microsoft/dion dion/polar_express.py (_POLAR_EXPRESS_COEFFS)
# at commit 0a059a4542e5aa74b40dcd1dce363836c7afcd48.
PUBLISHED = (
    (8.156554524902461, -22.48329292557795, 15.878769915207462),
    (4.042929935166739, -2.808917465908714, 0.5000178451051316),
    (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
    (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
    (2.3465413258596377, -1.7097828382687081, 0.42323551169305323),
)
SAFETY = 1.02  # the same file: X.norm() * 1.02 + epsilon


def reference_polar_express(g: np.ndarray, eps: float = 1e-8) -> np.ndarray:
    """dion/polar_express.py's polar_express, in float64 NumPy."""
    x = g / (np.linalg.norm(g) * SAFETY + eps)
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = x.T
    for a, b, c in PUBLISHED:
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if tall else x


def test_fixed5_preset_is_the_published_table():
    assert POLAR_EXPRESS_FIXED5 == PUBLISHED
    rows, steps, norm_factor = PRESETS["polar_express_fixed5"]
    assert rows == PUBLISHED and steps == 5 and norm_factor == SAFETY
    table, factor = resolve_coefficients("polar_express_fixed5", None)
    np.testing.assert_array_equal(table, np.array(PUBLISHED))
    assert factor == SAFETY


def test_dion2_defaults_to_the_reference_scheme():
    assert gradax.dion2(0.01).ns_coeffs == "polar_express_fixed5"
    assert gradax.scale_by_dion2().ns_coeffs == "polar_express_fixed5"


def test_dion2_default_direction_is_the_reference_orthogonalization():
    """With fraction 1 every row is selected: the step is polar_express(G).

    gradax's own "polar_express" table (safety 1.01) is 9-13% off here.
    """
    with enable_x64(True):
        for shape in [(8, 16), (16, 8)]:
            g = np.random.default_rng(0).normal(size=shape)
            expected = reference_polar_express(g)
            tx = gradax.scale_by_dion2(fraction=1.0)
            u, _ = tx.update(jnp.asarray(g), tx.init(jnp.zeros(shape)))
            np.testing.assert_allclose(u, expected, rtol=1e-9, atol=1e-12)
            ours = gradax.scale_by_dion2(fraction=1.0, ns_coeffs="polar_express")
            v, _ = ours.update(jnp.asarray(g), ours.init(jnp.zeros(shape)))
            gap = np.linalg.norm(v - expected) / np.linalg.norm(expected)
            assert gap > 0.05
