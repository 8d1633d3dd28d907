"""A state made for other parameter dtypes says so, naming path and dtypes.

``master_weights`` keeps a float32 copy only of its low-precision leaves, so
its state's tree follows the parameters' dtypes. Given parameters cast since
``init``, the tree differs; the error must give that cause in words, not
only the tree difference it produces.
"""

import re

import jax.numpy as jnp
import pytest

import gradax
from gradax import UpdateError


def _params(w_dtype):
    return {"w": jnp.ones((4, 4), w_dtype), "norm": jnp.ones(4, jnp.float32)}


@pytest.mark.parametrize(
    "made_for, given",
    [
        (jnp.bfloat16, jnp.float32),
        (jnp.float32, jnp.bfloat16),
    ],
    ids=["bf16-state-f32-params", "f32-state-bf16-params"],
)
def test_master_weights_names_the_changed_dtype(made_for, given):
    tx = gradax.master_weights(gradax.adam(1e-3))
    state = tx.init(_params(made_for))
    params = _params(given)
    with pytest.raises(UpdateError) as raised:
        tx.update(params, state, params)
    message = str(raised.value)
    made_for_said = jnp.dtype(made_for)
    said = (
        f"The state was made for {made_for_said} params where ['w'] is "
        f"{jnp.dtype(given)} now: the params' dtypes changed since init."
    )
    assert said in message, message
    # The cast explains it all: no advice about another tree or shapes.
    assert not re.search(r"another tree or other shapes", message)


def test_a_state_of_another_tree_is_not_blamed_on_dtypes():
    tx = gradax.master_weights(gradax.adam(1e-3))
    state = tx.init({"w": jnp.ones((4, 4), jnp.bfloat16)})
    params = {"v": jnp.ones((4, 4), jnp.float32)}
    with pytest.raises(UpdateError) as raised:
        tx.update(params, state, params)
    assert "dtypes changed" not in str(raised.value)
    assert "another tree or other shapes" in str(raised.value)
