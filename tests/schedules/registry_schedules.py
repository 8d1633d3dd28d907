"""Registry entries for gradax/schedules (see tests/registry.py).

The schedules themselves are not transformations; ``inject_hyperparams``,
which lives with them as in optax, is.
"""

from __future__ import annotations

import optax
from registry_base import Entry

import gradax

ENTRIES: list[Entry] = [
    Entry(
        "inject_hyperparams",
        injectable=False,
        optimizer=True,
        build_fn=lambda: gradax.inject_hyperparams(gradax.adam)(0.05, b1=0.8),
        optax_build_fn=lambda: optax.inject_hyperparams(optax.adam)(0.05, b1=0.8),
    ),
]
