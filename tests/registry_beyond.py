"""Conformance registry entries for the beyond optimizers (see registry.py)."""

from __future__ import annotations

from registry_base import Entry

ENTRIES: list[Entry] = []

# MARS (no optax twin). The reference decays non-2-D leaves by 0.1 by default
# (weight_decay_1d), which would move the parabola's minimum away from 0.5.
_MARS_CONVERGE = dict(learning_rate=0.05, weight_decay_1d=0.0)
ENTRIES += [
    Entry(
        "mars",
        dict(learning_rate=0.05),
        optimizer=True,
        schedule_arg="learning_rate",
        optax_name="",
        converge_kwargs=_MARS_CONVERGE,
    ),
    # Sign steps of a constant size oscillate around the minimum: converge
    # with a step size decaying like 1/t.
    Entry(
        "mars",
        dict(learning_rate=0.02, mars_type="mars-lion", optimize_1d=True),
        optimizer=True,
        schedule_arg="gamma",
        optax_name="",
        converge_kwargs=dict(
            learning_rate=lambda count: 0.05 / (1 + 0.05 * count),
            mars_type="mars-lion",
            optimize_1d=True,
            weight_decay_1d=0.0,
        ),
    ),
]

# MARS' direction alone (no learning rate).
ENTRIES += [
    Entry("scale_by_mars", dict(gamma=0.025), schedule_arg="b1", optax_name=""),
]

# Shampoo and SOAP (no optax twins). Small blocks and frequent refreshes so the
# conformance checks' few steps reach blocking, cached roots and basis
# refreshes; complex parameters get Hermitian factors.
ENTRIES += [
    Entry(
        "shampoo",
        dict(learning_rate=0.05, start_preconditioning_step=1, block_size=4),
        optimizer=True,
        schedule_arg="learning_rate",
        optax_name="",
    ),
    Entry(
        "shampoo",
        dict(
            learning_rate=0.05,
            b2=0.9,
            preconditioning_compute_steps=2,
            start_preconditioning_step=0,
            grafting_type="adagrad",
            nesterov=True,
        ),
        optimizer=True,
        # Not b2: a scheduled b2 gives ``1 - b2`` one ulp away from the folded
        # constant's, and the first update's rank-deficient factors amplify
        # rounding in their null space by up to matrix_epsilon**-0.25 (31x):
        # measured 3.8e-6 relative against the check's 1e-6.
        schedule_arg="b1",
        optax_name="",
        # AdaGrad's steps shrink like 1/sqrt(t): 0.05 is too slow for 500 steps.
        converge_kwargs=dict(learning_rate=0.5),
    ),
    Entry(
        "scale_by_shampoo",
        # Unscaled directions (no learning rate): from the second update on the
        # factors have full rank, so float32 rounding is not amplified (with 0,
        # sharded and injected runs differ by up to 5e-5 relative).
        dict(start_preconditioning_step=1, grafting_type="rmsprop_normalized"),
        schedule_arg="matrix_epsilon",
        optax_name="",
    ),
    Entry(
        "soap",
        dict(learning_rate=0.05, precondition_frequency=2),
        optimizer=True,
        schedule_arg="learning_rate",
        optax_name="",
    ),
    Entry(
        "soap",
        dict(learning_rate=0.05, max_precond_dim=6, precondition_1d=True),
        optimizer=True,
        # Not b2: one ulp in ``1 - b2`` moves eigh's rounding, and eigenvectors
        # of ill-separated eigenvalues by ~eps * lambda_1 / gap: measured 1e-5
        # relative on the (3, 2) slices against the check's 1e-6.
        schedule_arg="weight_decay",
        optax_name="",
    ),
    Entry(
        "scale_by_soap",
        dict(precondition_frequency=1, normalize_grads=True),
        schedule_arg="eps",
        optax_name="",
    ),
]
