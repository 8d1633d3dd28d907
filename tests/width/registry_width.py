"""Registry entries for gradax/width: width_transfer (see tests/registry.py).

The base model is narrower than the suite's parameters (make_params and
sharding_params share its paths and ranks), so the factors are not all 1:
"m" (4, 3) against (2, 3) is a hidden matrix at twice the fan-in (0.5 under
AdamW); sharding's (8, 6) is 0.25.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from registry_base import Entry

import gradax

BASE = {
    "s": jax.ShapeDtypeStruct((), jnp.float32),
    "v": jax.ShapeDtypeStruct((1,), jnp.float32),
    "m": jax.ShapeDtypeStruct((2, 3), jnp.float32),
    "t": jax.ShapeDtypeStruct((2, 3, 2), jnp.float32),
}


def _adamw(learning_rate):
    return gradax.width_transfer(gradax.adamw(learning_rate), BASE)


def _muon(learning_rate):
    return gradax.width_transfer(
        gradax.muon(learning_rate, muon_weight_dimension_numbers="auto"), BASE
    )


ENTRIES: list[Entry] = [
    Entry(
        "width_transfer",
        dict(learning_rate=0.05),
        optimizer=True,
        schedule_arg="learning_rate",
        optax_name="",
        build_fn=_adamw,
    ),
    Entry(
        "width_transfer",
        dict(learning_rate=0.05),
        schedule_arg="learning_rate",
        optax_name="",
        build_fn=_muon,
    ),
]
