"""Registry entries for gradax/orthogonal: the Muon family (see tests/registry.py).

Only muon has an optax twin (``optax.contrib.muon``).
"""

from __future__ import annotations

import jax
from registry_base import Q8, Entry

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
DECAYING = dict(learning_rate=gradax.cosine_decay_schedule(0.1, 500))


def _sign_on_matrices(params):
    return jax.tree.map(lambda x: "sign" if x.ndim == 2 else "rms", params)


def _column_and_row(params):
    """Column norm on the matrix, row norm on the stacked (2, 3, 2) leaf."""
    names = {2: "column", 3: "row"}
    return jax.tree.map(lambda x: names.get(x.ndim, "rms"), params)


# Scion. Its steps have a fixed size per leaf (an oracle's direction), so it
# converges with a decaying learning rate: here warmup-stable-decay with the
# 1-sqrt decay over the last half. The constrained form converges to a point
# of the ball, not to the parabola's minimum, so it gets no convergence check.
_WSD = gradax.warmup_stable_decay_schedule(
    0.0,
    0.05,
    warmup_steps=10,
    total_steps=500,
    decay_fraction=0.5,
    decay_type="1-sqrt",
)

ENTRIES: list[Entry] = [
    # Muon. Its updates have a fixed size, so convergence needs a decaying
    # learning rate.
    Entry(
        "muon",
        dict(learning_rate=0.05),
        optimizer=True,
        schedule_arg="learning_rate",
        optax_name="contrib.muon",
        converge_kwargs=dict(learning_rate=gradax.cosine_decay_schedule(0.1, 500)),
    ),
    Entry(
        "muon",
        dict(learning_rate=0.05, weight_decay=0.01, consistent_rms=0.2),
        schedule_arg="weight_decay",
        optax_name="contrib.muon",
    ),
    Entry(
        "muon",
        dict(
            learning_rate=0.05,
            momentum="sum",
            bias_correction=False,
            muon_weight_dimension_numbers="auto",
            ns_coeffs="polar_express",
        ),
        schedule_arg="beta",
        optax_name="",
    ),
    Entry(
        "scale_by_muon",
        dict(
            weight_dimension_numbers=lambda tree: jax.tree.map(
                lambda x: gradax.MuonDimensionNumbers() if x.ndim == 2 else None, tree
            )
        ),
        injectable=False,
        optax_name="",  # optax's scale_by_muon cannot skip non-matrix leaves
    ),
    Entry(
        "scale_by_shape",
        dict(
            consistent_rms=0.2,
            # Matrices only: the test tree also has a scalar and a vector.
            weight_dimension_numbers=lambda tree: jax.tree.map(
                lambda x: gradax.MuonDimensionNumbers() if x.ndim == 2 else None, tree
            ),
        ),
        schedule_arg="consistent_rms",
        injectable=False,  # the dimension-numbers function is not a number
        optax_name="",  # optax has no scale_by_shape
    ),
    # Any transformation for the leaves that are not matrices (adam=).
    Entry(
        "muon",
        dict(
            learning_rate=0.05,
            adam=gradax.adam(0.01, b1=0.9, b2=0.95),
            muon_weight_dimension_numbers="auto",
        ),
        schedule_arg="beta",
        optax_name="",
    ),
    # NorMuon, AdaMuon, Dion, Dion2: optax has none of them.
    Entry(
        "normuon",
        dict(learning_rate=0.05, muon_weight_dimension_numbers="auto"),
        optimizer=True,
        converge_kwargs=DECAYING,
        schedule_arg="learning_rate",
        optax_name="",
    ),
    Entry(
        "normuon",
        dict(learning_rate=0.05, beta2=0.9, nesterov=False, consistent_rms=None),
        optimizer=True,
        converge_kwargs=DECAYING,
        schedule_arg="beta2",
        optax_name="",
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
        optax_name="",
    ),
    Entry(
        "adamuon",
        dict(
            learning_rate=0.05, weight_decay=1e-3, muon_weight_dimension_numbers="auto"
        ),
        optimizer=True,
        converge_kwargs=DECAYING,
        schedule_arg="weight_decay",
        optax_name="",
    ),
    Entry(
        "adamuon",
        dict(learning_rate=0.05, sign=False, momentum="sum"),
        optimizer=True,
        converge_kwargs=DECAYING,
        schedule_arg="beta2",
        optax_name="",
    ),
    Entry(
        "scale_by_adamuon",
        dict(weight_dimension_numbers=matrices_only),
        schedule_arg="beta2",
        optax_name="",
    ),
    Entry(
        "dion",
        dict(learning_rate=0.05, rank=2, muon_weight_dimension_numbers="auto"),
        optimizer=True,
        converge_kwargs=DECAYING,
        schedule_arg="learning_rate",
        optax_name="",
    ),
    Entry(
        "dion",
        dict(learning_rate=0.05, rank=0.5, mu=0.9),
        optimizer=True,
        converge_kwargs=DECAYING,
        schedule_arg="mu",
        optax_name="",
    ),
    Entry(
        "scale_by_dion",
        dict(rank=2, weight_dimension_numbers=matrices_only),
        schedule_arg="mu",
        optax_name="",
    ),
    Entry(
        "dion2",
        dict(learning_rate=0.05, fraction=0.5, muon_weight_dimension_numbers="auto"),
        optimizer=True,
        converge_kwargs=DECAYING,
        schedule_arg="ef_decay",
        optax_name="",
    ),
    Entry(
        "dion2",
        dict(learning_rate=0.05, select="rows", ns_coeffs="keller"),
        optimizer=True,
        converge_kwargs=DECAYING,
        schedule_arg="learning_rate",
        optax_name="",
    ),
    Entry(
        "scale_by_dion2",
        dict(weight_dimension_numbers=matrices_only),
        schedule_arg="ef_decay",
        optax_name="",
    ),
    Entry(
        "scion",
        dict(learning_rate=0.05, unconstrained=True),
        optimizer=True,
        schedule_arg="learning_rate",
        optax_name="",
        converge_kwargs=dict(learning_rate=_WSD, unconstrained=True),
    ),
    Entry(
        "scion",
        dict(learning_rate=0.05, radius=3.0, lmo=_sign_on_matrices),
        schedule_arg="radius",
        optax_name="",
    ),
    Entry(
        "scale_by_scion",
        dict(beta=0.5, lmo=_column_and_row, weight_dimension_numbers="auto"),
        schedule_arg="beta",
        optax_name="",
    ),
    Entry(
        "muon",
        dict(learning_rate=0.02, mu_dtype=Q8),
        schedule_arg="learning_rate",
        optax_name="",
    ),
    # Hyperball (MuonH, AdamH): the matrices stay on their initial sphere, so
    # they converge to a point of it, not to the parabola's minimum: no
    # convergence check (as Scion's constrained form).
    Entry(
        "muonh", dict(learning_rate=0.05), schedule_arg="learning_rate", optax_name=""
    ),
    Entry(
        "muonh",
        dict(learning_rate=0.05, radius=2.0, muon_weight_dimension_numbers="auto"),
        optax_name="",
    ),
    Entry(
        "adamh", dict(learning_rate=0.05), schedule_arg="learning_rate", optax_name=""
    ),
]
