"""gradax.width_transfer and width_multipliers: the rules, the state, the roles.

The expected factors are µP's table for Adam (Tensor Programs V, table 3:
hidden and output learning rates over the width ratio m, input weights,
biases and gains unchanged) and the spectral condition for Muon, written
out by hand here for the shapes used.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradax


def _tree(width: int):
    return {
        "embed": jnp.ones((10, width)),
        "w": jnp.ones((width, 2 * width)),
        "head": jnp.ones((2 * width, 10)),
        "b": jnp.ones(width),
        "stack": jnp.ones((3, width, width)),
    }


BASE, WIDE = _tree(8), _tree(32)  # m = 4


def test_adam_rules_follow_mup_table():
    got = gradax.width_multipliers(WIDE, BASE, gradax.adamw(1e-3))
    assert got == {"embed": 1.0, "w": 0.25, "head": 0.25, "b": 1.0, "stack": 0.25}


def test_no_optimizer_means_adam_like():
    assert gradax.width_multipliers(WIDE, BASE) == gradax.width_multipliers(
        WIDE, BASE, optax.adam(1e-3)
    )


def test_muon_rules_follow_spectral_condition():
    routing = gradax.muon_labels(
        WIDE, "auto", exclude="embed|head", print_report=False
    )[1]
    keller = gradax.width_multipliers(
        WIDE, BASE, gradax.muon(0.02, muon_weight_dimension_numbers="auto")
    )
    # KellerJordan's sqrt(max(1, fan_out/fan_in)) is already sqrt(fan_out /
    # fan_in) for w (8x16 -> 32x64) and the square stack: nothing to change.
    assert keller["w"] == pytest.approx(1.0) and keller["stack"] == pytest.approx(1.0)
    rms = gradax.width_multipliers(
        WIDE,
        BASE,
        gradax.muon(0.02, consistent_rms=0.2, muon_weight_dimension_numbers=routing),
    )
    # Moonlight's 0.2 sqrt(max(fan_in, fan_out)) grows as sqrt(m): 1/2.
    assert rms["w"] == pytest.approx(0.5) and rms["stack"] == pytest.approx(0.5)
    assert rms["embed"] == 1.0 and rms["head"] == 0.25  # the AdamW group


def test_base_width_is_the_inner_optimizer():
    tx = gradax.width_transfer(gradax.adamw(1e-2, weight_decay=0.1), BASE)
    inner = gradax.adamw(1e-2, weight_decay=0.1)
    grads = jax.tree.map(
        lambda x: jnp.sin(jnp.arange(x.size, dtype=jnp.float32)).reshape(x.shape), BASE
    )
    a, _ = tx.update(grads, tx.init(BASE), BASE)
    b, _ = inner.update(grads, inner.init(BASE), BASE)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize(
    "inner",
    [
        gradax.adamw(1e-2, weight_decay=0.1),
        gradax.muon(
            0.02,
            muon_weight_dimension_numbers=gradax.muon_labels(
                WIDE, "auto", exclude="embed|head", print_report=False
            )[1],
        ),
        optax.adamw(1e-2),
    ],
    ids=["adamw", "muon", "optax"],
)
def test_state_is_inner_state_and_updates_are_scaled(inner):
    tx = gradax.width_transfer(inner, BASE)
    state = tx.init(WIDE)
    expected_state = inner.init(WIDE)
    assert jax.tree.structure(state) == jax.tree.structure(expected_state)
    grads = jax.tree.map(
        lambda x: jnp.cos(jnp.arange(x.size, dtype=jnp.float32)).reshape(x.shape), WIDE
    )
    got, new_state = tx.update(grads, state, WIDE)
    want, want_state = inner.update(grads, expected_state, WIDE)
    factors = gradax.width_multipliers(WIDE, BASE, inner)
    for path, g in jax.tree_util.tree_leaves_with_path(got):
        key = path[0].key
        np.testing.assert_allclose(g, factors[key] * want[key], rtol=1e-6)
    for x, y in zip(
        jax.tree.leaves(new_state), jax.tree.leaves(want_state), strict=True
    ):
        np.testing.assert_allclose(x, y, rtol=1e-6)


def test_under_jit_with_tx_as_argument():
    tx = gradax.width_transfer(gradax.adam(1e-2), BASE)
    step = jax.jit(lambda tx, g, s: tx.update(g, s))
    updates, _ = step(tx, WIDE, tx.init(WIDE))
    # adam's first step is lr * sign(g) (g = 1): 1e-2 times the factor.
    assert float(updates["w"][0, 0]) == pytest.approx(-0.25e-2, rel=1e-5)
    assert float(updates["embed"][0, 0]) == pytest.approx(-1e-2, rel=1e-5)


def test_roles_override_by_pattern_and_function():
    # A head stored (vocab, width), torch's layout: only its name says so.
    base = {"proj": jnp.ones((10, 8))}
    wide = {"proj": jnp.ones((10, 32))}
    assert gradax.width_multipliers(wide, base) == {"proj": 1.0}
    assert gradax.width_multipliers(wide, base, roles={"proj": "output"}) == {
        "proj": 0.25
    }
    assert gradax.width_multipliers(
        wide, base, roles=lambda path, shape: "output" if "proj" in path else None
    ) == {"proj": 0.25}


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="roles.*must be one of"):
        gradax.width_transfer(gradax.adam(1e-2), BASE, roles={"w": "matrix"})
    with pytest.raises(ValueError, match="regular expression"):
        gradax.width_transfer(gradax.adam(1e-2), BASE, roles={"(": "output"})
    tx = gradax.width_transfer(gradax.adam(1e-2), {"w": jnp.ones((8, 8))})
    with pytest.raises(ValueError, match="not in base_params"):
        tx.init({"v": jnp.ones((8, 8))})
    with pytest.raises(ValueError, match="ranks must agree"):
        tx.init({"w": jnp.ones((8, 8, 2))})


def test_head_split_matrices_use_their_blocks():
    # W_q cut into 4 heads: each head is a (d, d/4) matrix; under Moonlight's
    # rms rule its factor is sqrt(max(8, 2) / max(32, 8)) = 1/2.
    base, wide = {"q": jnp.ones((8, 8))}, {"q": jnp.ones((32, 32))}
    heads = gradax.muon(
        0.02,
        consistent_rms=0.2,
        muon_weight_dimension_numbers={"q": gradax.MuonSplit(num_heads=4)},
    )
    assert gradax.width_multipliers(wide, base, heads)["q"] == pytest.approx(0.5)
