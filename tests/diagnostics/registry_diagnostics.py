"""Registry entries for gradax/diagnostics (see tests/registry.py)."""

from __future__ import annotations

from registry_base import Entry

import gradax


def _watched_adamw(learning_rate):
    return gradax.with_metrics(gradax.adamw(learning_rate, weight_decay=0.01))


def _watched_muon(learning_rate):
    # Two groups, a clip on the raw gradients, a schedule, and both
    # optional metrics that need no extra argument.
    return gradax.with_metrics(
        gradax.chain(
            gradax.clip_by_global_norm(1.0),
            gradax.muon(learning_rate, adam_learning_rate=0.01),
        ),
        extras=("leaf_norms", "orthogonality"),
    )


ENTRIES: list[Entry] = [
    Entry(
        "with_metrics",
        dict(learning_rate=0.05),
        build_fn=_watched_adamw,
        optimizer=True,
        schedule_arg="learning_rate",
        optax_name="",
        # inject_hyperparams goes inside the wrapper (test_registry_watched
        # wraps the inject_hyperparams entry), and resume_worker injects an
        # entry's factory, not its build_fn.
        injectable=False,
    ),
    Entry(
        "with_metrics",
        dict(learning_rate=0.05),
        build_fn=_watched_muon,
        schedule_arg="learning_rate",
        optax_name="",
        injectable=False,
    ),
]
