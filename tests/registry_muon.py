"""Conformance registry entries for the muon optimizers (see registry.py)."""

from __future__ import annotations

import jax
from registry_base import Entry

import gradax


def matrices_only(tree):
    """Dimension numbers for 2-D and stacked 3-D leaves; None (pass) otherwise."""

    def rule(x):
        if x.ndim == 2:
            return gradax.MuonDimensionNumbers(0, 1)
        if x.ndim == 3:
            return gradax.MuonDimensionNumbers(1, 2)
        return None

    return jax.tree.map(rule, tree)


# Every update of these has a fixed size (an orthogonalized matrix), so a
# constant learning rate ends in a cycle of that size: converge with a decay.
NO_OPTAX = dict(optax_name="")
CONVERGE = dict(
    converge_kwargs=dict(learning_rate=gradax.cosine_decay_schedule(0.1, 500))
)
AUTO = dict(muon_weight_dimension_numbers="auto")

ENTRIES: list[Entry] = [
    # The lead adds muon's own entries (muon, scale_by_muon, ...) here.
    # Any transformation for the leaves that are not matrices (adam=).
    Entry(
        "muon",
        dict(learning_rate=0.05, adam=gradax.adam(0.01, b1=0.9, b2=0.95), **AUTO),
        schedule_arg="beta",
        **NO_OPTAX,
    ),
    # NorMuon, AdaMuon, Dion, Dion2: optax has none of them.
    Entry(
        "normuon",
        dict(learning_rate=0.05, **AUTO),
        optimizer=True,
        **CONVERGE,
        schedule_arg="learning_rate",
        **NO_OPTAX,
    ),
    Entry(
        "normuon",
        dict(learning_rate=0.05, beta2=0.9, nesterov=False, consistent_rms=None),
        optimizer=True,
        **CONVERGE,
        schedule_arg="beta2",
        **NO_OPTAX,
    ),
    Entry(
        "scale_by_normuon",
        dict(beta2=0.9, weight_dimension_numbers=matrices_only),
        # Not ``beta`` or ``beta2``: a scheduled decay gives ``1 - decay`` one
        # ulp away from the folded constant's, and Newton–Schulz amplifies
        # that to 3e-6..8e-6 relative over the test's 5 unscaled steps (the
        # check allows 1e-6). The normuon entries schedule beta2 and the
        # learning rate; their steps are 20x smaller.
        schedule_arg="eps",
        **NO_OPTAX,
    ),
    Entry(
        "adamuon",
        dict(learning_rate=0.05, weight_decay=1e-3, **AUTO),
        optimizer=True,
        **CONVERGE,
        schedule_arg="weight_decay",
        **NO_OPTAX,
    ),
    Entry(
        "adamuon",
        dict(learning_rate=0.05, sign=False, momentum="sum"),
        optimizer=True,
        **CONVERGE,
        schedule_arg="beta2",
        **NO_OPTAX,
    ),
    Entry(
        "scale_by_adamuon",
        dict(weight_dimension_numbers=matrices_only),
        schedule_arg="beta2",
        **NO_OPTAX,
    ),
    Entry(
        "dion",
        dict(learning_rate=0.05, rank=2, **AUTO),
        optimizer=True,
        **CONVERGE,
        schedule_arg="learning_rate",
        **NO_OPTAX,
    ),
    Entry(
        "dion",
        dict(learning_rate=0.05, rank=0.5, mu=0.9),
        optimizer=True,
        **CONVERGE,
        schedule_arg="mu",
        **NO_OPTAX,
    ),
    Entry(
        "scale_by_dion",
        dict(rank=2, weight_dimension_numbers=matrices_only),
        schedule_arg="mu",
        **NO_OPTAX,
    ),
    Entry(
        "dion2",
        dict(learning_rate=0.05, fraction=0.5, **AUTO),
        optimizer=True,
        **CONVERGE,
        schedule_arg="ef_decay",
        **NO_OPTAX,
    ),
    Entry(
        "dion2",
        dict(learning_rate=0.05, select="rows", ns_coeffs="keller"),
        optimizer=True,
        **CONVERGE,
        schedule_arg="learning_rate",
        **NO_OPTAX,
    ),
    Entry(
        "scale_by_dion2",
        dict(weight_dimension_numbers=matrices_only),
        schedule_arg="ef_decay",
        **NO_OPTAX,
    ),
]
