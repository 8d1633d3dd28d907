"""The coordinate check on a small MLP and a small transformer, widths 32-128.

Under gradax's parametrization (width_transfer, µP's initialization) every
layer's change is flat in width for AdamW and Muon: |slope| within
CoordCheck.tolerance (derived in its docstring from the seeds' spread and
the finite-width correction). Under the standard parametrization with AdamW
the output layer's slope is near 1 (the update grows with the fan-in), and
the check must say it is not flat.
"""

from __future__ import annotations

import functools

import jax
import pytest
import width_models as models

import gradax

WIDTHS = (32, 64, 128)
# Adam in its linear regime over 3 steps (the logits move by ~2% of their
# scale); Muon's hidden rate 10x AdamW's, its usual ratio.
ADAM_LR, MUON_LR = 1e-3, 1e-2

MODELS = {
    "mlp": (models.mlp_init, lambda param: models.mlp_loss, models.mlp_batch, 64),
    "transformer": (
        models.transformer_init,
        lambda param: functools.partial(models.transformer_loss, param=param),
        models.transformer_batch,
        8 * models.SEQ,  # tokens
    ),
}


def _optimizer(name: str):
    if name == "adamw":
        return gradax.adamw(ADAM_LR)

    def routing(params):
        return gradax.muon_labels(
            params, exclude="embed|head|input", print_report=False
        )[1]

    return gradax.muon(
        MUON_LR, adam_learning_rate=ADAM_LR, muon_weight_dimension_numbers=routing
    )


def _check(model: str, param: str, optimizer: str):
    init, loss, batch, examples = MODELS[model]
    init_fn = functools.partial(init, param=param)
    tx = _optimizer(optimizer)
    if param == "mup":
        tx = gradax.width_transfer(tx, init_fn(jax.random.key(0), models.BASE_WIDTH))
    return gradax.coord_check(
        init_fn,
        loss(param),
        WIDTHS,
        tx,
        batch(),
        steps=3,
        seeds=4,
        examples=examples,
        print_table=False,
    )


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
@pytest.mark.parametrize("model", ["mlp", "transformer"])
def test_flat_under_gradax_parametrization(model, optimizer):
    check = _check(model, "mup", optimizer)
    slopes, tolerance = check.slopes(), check.tolerance()
    bad = {
        k: (slopes[k], tolerance[k]) for k in slopes if abs(slopes[k]) > tolerance[k]
    }
    assert not bad, f"not flat (slope, tolerance):\n{check.table()}"
    # The check can tell: the tolerance is well below the slope of 1 that
    # a parametrization growing with the fan-in gives.
    assert max(tolerance.values()) < 0.6, check.table()


@pytest.mark.parametrize("model", ["mlp", "transformer"])
def test_standard_parametrization_output_is_not_flat(model):
    check = _check(model, "standard", "adamw")
    output = check.layers[-1]  # the output / logits (the names sort last)
    assert check.slopes()[output] > check.tolerance()[output], check.table()
