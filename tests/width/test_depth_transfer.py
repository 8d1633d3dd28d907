"""Depth transfer: width_transfer's base_depth/depth option and branch_multiplier.

The expected factors are written out from the rules' sources, not read from
the code: Depth-µP (Yang, Yu, Zhu, Hayou, Tensor Programs VI,
arXiv:2310.02244) multiplies each residual branch by `1/sqrt(L)` and, for
Adam, the blocks' learning rate by `1/sqrt(L)`; CompleteP (Dey et al.,
arXiv:2505.01618) is the exponent alpha = 1 of the family `L**-alpha` on the
branch and `L**(alpha - 1)` on the hidden Adam rate. Relative to a base of
`L0` blocks: branch `(L0/L)**alpha`, hidden step `(L/L0)**(alpha - 1)`.
"""

from __future__ import annotations

import jax.numpy as jnp
import pytest

import gradax
from gradax.width.parametrization import branch_multiplier


def _tree(width: int, depth: int):
    return {
        "embed": jnp.ones((10, width)),
        "blocks": [
            {"w": jnp.ones((width, width)), "g": jnp.ones(width)} for _ in range(depth)
        ],
        "head": jnp.ones((width, 10)),
    }


def test_depth_mup_scales_hidden_steps_only():
    # Same width, 2 -> 8 blocks: hidden steps times sqrt(2/8) = 1/2; the
    # embedding, head and gains are outside the branches' sum: 1.
    base, deep = _tree(8, 8), _tree(8, 8)
    got = gradax.width_multipliers(
        deep, base, gradax.adamw(1e-3), base_depth=2, depth=8
    )
    assert got["embed"] == 1.0 and got["head"] == 1.0
    assert all(b["w"] == pytest.approx(0.5) for b in got["blocks"])
    assert all(b["g"] == 1.0 for b in got["blocks"])


def test_depth_and_width_factors_multiply():
    # Width 8 -> 32 (hidden 1/4 for Adam) and depth 1 -> 4 (1/2): 1/8.
    got = gradax.width_multipliers(
        _tree(32, 4), _tree(8, 4), gradax.adam(1e-3), base_depth=1, depth=4
    )
    assert got["blocks"][0]["w"] == pytest.approx(1 / 8)
    assert got["head"] == pytest.approx(1 / 4)


def test_completep_keeps_the_rate():
    got = gradax.width_multipliers(
        _tree(8, 4),
        _tree(8, 4),
        gradax.adam(1e-3),
        base_depth=1,
        depth=4,
        depth_exponent=1.0,
    )
    assert got["blocks"][3]["w"] == 1.0
    assert branch_multiplier(1, 4, 1.0) == pytest.approx(0.25)


def test_muon_hidden_matrices_take_the_depth_factor():
    tx = gradax.muon(0.02)  # KellerJordan's rule: width factor 1 for squares
    got = gradax.width_multipliers(_tree(32, 9), _tree(8, 9), tx, base_depth=1, depth=9)
    assert got["blocks"][0]["w"] == pytest.approx(1 / 3)


def test_branch_multiplier_and_the_wrapper():
    assert branch_multiplier(2, 8) == pytest.approx(0.5)
    base = _tree(8, 8)
    tx = gradax.width_transfer(gradax.adam(1e-2), base, base_depth=2, depth=8)
    assert tx.branch_multiplier == pytest.approx(0.5)
    assert gradax.width_transfer(gradax.adam(1e-2), base).branch_multiplier == 1.0
    # The update: Adam's first step is -lr * sign(g) in every entry, up to
    # float32's 1 - b2 (0.999 rounds to 0.99900001, so sqrt of the bias
    # correction is off by 6.4e-6 relative): rel=1e-5.
    params = _tree(8, 8)
    updates, _ = tx.update(params, tx.init(params))
    assert float(updates["blocks"][0]["w"][0, 0]) == pytest.approx(-0.005, rel=1e-5)
    assert float(updates["head"][0, 0]) == pytest.approx(-0.01, rel=1e-5)


def test_hyperball_matrices_keep_their_sphere():
    # MuonH's matrices: factor 1 at any width and depth (a multiplied step
    # would leave the sphere); its AdamW group's head still takes 1/m.
    tx = gradax.muonh(
        0.1,
        muon_weight_dimension_numbers=lambda p: gradax.muon_labels(
            p, exclude="embed|head", print_report=False
        )[1],
    )
    got = gradax.width_multipliers(_tree(32, 4), _tree(8, 4), tx, base_depth=1, depth=4)
    assert got["blocks"][0]["w"] == 1.0
    assert got["head"] == pytest.approx(0.25)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"depth": 4}, "base_depth and depth together"),
        ({"base_depth": 0, "depth": 4}, "base_depth must be a positive integer"),
        ({"base_depth": 2, "depth": 2.5}, "depth must be a positive integer"),
        ({"base_depth": 2, "depth": 4, "depth_exponent": 2}, r"in \[0.5, 1\]"),
    ],
)
def test_bad_depth_input_is_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        gradax.width_transfer(gradax.adam(1e-2), _tree(8, 2), **kwargs)
    with pytest.raises(ValueError, match=match):
        gradax.width_multipliers(_tree(8, 2), _tree(8, 2), **kwargs)
