"""The conformance registry: every public transformation, with small kwargs.

Each entry gets every check in ``test_conformance.py``. Adding a
transformation to gradax means adding one entry here.
"""

from __future__ import annotations

import jax
import optax
import registry_adaptive
import registry_beyond
import registry_contrib
import registry_field
import registry_memory
import registry_muon
import registry_sign
from precision import registry_precision
from registry_base import Entry, entry_id

import gradax

__all__ = ["ENTRIES", "EXTRA_ARG_CASES", "NOT_IN_REGISTRY", "Entry", "entry_id"]


LR = dict(learning_rate=0.05)

CORE_ENTRIES: list[Entry] = [
    # Optimizers.
    Entry(
        "adam", LR, optimizer=True, schedule_arg="learning_rate", rosenbrock_steps=3000
    ),
    Entry(
        "adam",
        dict(learning_rate=0.05, nesterov=True),
        optimizer=True,
        schedule_arg="b1",
    ),
    Entry(
        "adamw",
        dict(learning_rate=0.05, weight_decay=1e-3),
        optimizer=True,
        schedule_arg="weight_decay",
        rosenbrock_steps=3000,
    ),
    Entry("sgd", LR, optimizer=True, schedule_arg="learning_rate"),
    Entry(
        "sgd",
        dict(learning_rate=0.05, momentum=0.9, nesterov=True),
        optimizer=True,
        schedule_arg="momentum",
        rosenbrock_steps=3000,
        converge_kwargs=dict(learning_rate=1e-3, momentum=0.9),
    ),
    # Building blocks.
    Entry("trace", dict(decay=0.9), schedule_arg="decay"),
    Entry("ema", dict(decay=0.9), schedule_arg="decay"),
    Entry("ema", dict(decay=0.8, debias=False)),
    Entry(
        "add_noise",
        dict(eta=0.01, gamma=0.55, seed=0),
        schedule_arg="eta",
        complex_ok=False,
    ),
    Entry("centralize"),
    Entry("zero_nans"),
    Entry("keep_params_nonnegative", complex_ok=False),
    Entry("clip", dict(max_delta=0.5), schedule_arg="max_delta", complex_ok=False),
    Entry("clip_by_global_norm", dict(max_norm=1.0), schedule_arg="max_norm"),
    Entry("clip_by_block_rms", dict(threshold=0.5), schedule_arg="threshold"),
    Entry(
        "adaptive_grad_clip",
        dict(clipping=0.1),
        schedule_arg="clipping",
        complex_ok=False,
    ),
    Entry("scale", dict(step_size=-0.1), schedule_arg="step_size"),
    Entry("scale_by_learning_rate", LR, schedule_arg="learning_rate"),
    Entry(
        "scale_by_schedule",
        dict(step_size_fn=lambda c: 0.1 / (1 + c)),
        injectable=False,
    ),
    Entry("scale_by_adam", dict(b1=0.8), schedule_arg="eps"),
    Entry("add_decayed_weights", dict(weight_decay=0.1), schedule_arg="weight_decay"),
    Entry("identity"),
    Entry("set_to_zero"),
    # Muon (the variants are in registry_muon.py). Its updates have a fixed
    # size, so convergence needs a decaying learning rate.
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
    # Combinators.
    Entry(
        "chain",
        injectable=False,
        build_fn=lambda: gradax.chain(gradax.scale(0.5), gradax.adam(0.05)),
        optax_build_fn=lambda: optax.chain(optax.scale(0.5), optax.adam(0.05)),
        optimizer=True,
    ),
    Entry(
        "named_chain",
        injectable=False,
        build_fn=lambda: gradax.named_chain(("a", gradax.adam(0.05))),
        optax_build_fn=lambda: optax.named_chain(("a", optax.adam(0.05))),
        optimizer=True,
    ),
    Entry(
        "masked",
        injectable=False,
        build_fn=lambda: gradax.masked(gradax.adam(0.05), _MASK),
        optax_build_fn=lambda: optax.masked(optax.adam(0.05), _MASK),
    ),
    Entry(
        "partition",
        injectable=False,
        optimizer=True,
        build_fn=lambda: gradax.partition(
            {"a": gradax.adam(0.05), "b": gradax.adamw(0.02)}, _LABELS
        ),
        optax_build_fn=lambda: optax.partition(
            {"a": optax.adam(0.05), "b": optax.adamw(0.02)}, _LABELS
        ),
    ),
    Entry(
        "multi_transform",
        injectable=False,
        optimizer=True,
        build_fn=lambda: gradax.multi_transform(
            {"a": gradax.adam(0.05), "b": gradax.sgd(0.02)}, _LABELS
        ),
        optax_build_fn=lambda: optax.multi_transform(
            {"a": optax.adam(0.05), "b": optax.sgd(0.02)}, _LABELS
        ),
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
    Entry(
        "MultiSteps",
        injectable=False,
        build_fn=lambda: gradax.MultiSteps(gradax.adam(0.05), 2),
        optax_build_fn=lambda: optax.MultiSteps(optax.adam(0.05), 2),
    ),
    Entry(
        "apply_if_finite",
        injectable=False,
        build_fn=lambda: gradax.apply_if_finite(gradax.adam(0.05), 2),
        optax_build_fn=lambda: optax.apply_if_finite(optax.adam(0.05), 2),
    ),
    Entry(
        "conditionally_mask",
        injectable=False,
        build_fn=lambda: gradax.conditionally_mask(gradax.adam(0.05), _EVEN),
        optax_build_fn=lambda: optax.conditionally_mask(optax.adam(0.05), _EVEN),
    ),
    Entry(
        "conditionally_transform",
        injectable=False,
        build_fn=lambda: gradax.conditionally_transform(gradax.adam(0.05), _EVEN),
        optax_build_fn=lambda: optax.conditionally_transform(optax.adam(0.05), _EVEN),
    ),
    Entry(
        "flatten",
        injectable=False,
        build_fn=lambda: gradax.flatten(gradax.adam(0.05)),
        optax_build_fn=lambda: optax.flatten(optax.adam(0.05)),
    ),
    Entry(
        "freeze",
        injectable=False,
        build_fn=lambda: gradax.freeze(_MASK),
        optax_build_fn=lambda: optax.freeze(_MASK),
    ),
    Entry(
        "selective_transform",
        injectable=False,
        build_fn=lambda: gradax.selective_transform(
            gradax.adam(0.05), freeze_mask=_MASK
        ),
        optax_build_fn=lambda: optax.selective_transform(
            optax.adam(0.05), freeze_mask=_MASK
        ),
    ),
    Entry("apply_every", dict(k=2)),
    Entry(
        "inject_hyperparams",
        injectable=False,
        optimizer=True,
        build_fn=lambda: gradax.inject_hyperparams(gradax.adam)(0.05, b1=0.8),
        optax_build_fn=lambda: optax.inject_hyperparams(optax.adam)(0.05, b1=0.8),
    ),
]

# The parameter tree the checks use has leaves "s", "v", "m", "t".
_MASK = {"s": False, "v": True, "m": True, "t": False}
_LABELS = {"s": "a", "v": "b", "m": "a", "t": "b"}


def _EVEN(count):  # noqa: N802 - a constant-like predicate
    return count % 2 == 0


ENTRIES: list[Entry] = [
    *CORE_ENTRIES,
    *registry_adaptive.ENTRIES,
    *registry_sign.ENTRIES,
    *registry_contrib.ENTRIES,
    *registry_beyond.ENTRIES,
    *registry_muon.ENTRIES,
    *registry_field.ENTRIES,
    *registry_memory.ENTRIES,
    *registry_precision.ENTRIES,
]

EXTRA_ARG_CASES = registry_contrib.EXTRA_ARG_CASES

# Public transformations that the conformance registry cannot run, and why.
# Each has tests of its own.
NOT_IN_REGISTRY = {
    "GradientTransformation": "the base class (FunctionTransformation is tested)",
    "GradientTransformationExtraArgs": "optax's name for the base class",
    "Alias": "a base class for compositions",
    "FunctionTransformation": "wraps user functions; tests/core/test_protocol.py",
    "lbfgs": "needs value and grad of the objective (value_fn); tests/linesearch/test_lbfgs.py",
    "scale_by_lbfgs": "as lbfgs; tests/linesearch/test_lbfgs.py",
    "scale_by_zoom_linesearch": "needs value, grad and value_fn; test_linesearch.py",
    "scale_by_backtracking_linesearch": "needs value_fn; tests/linesearch/test_linesearch.py",
    "lookahead": "params must be a LookaheadParams pair; test_combinators_wrappers",
    "polyak_sgd": "needs the objective's value; tests/optimizers/test_polyak_noisy_sgd.py",
    "scale_by_polyak": "needs the objective's value; tests/optimizers/test_polyak_noisy_sgd.py",
    "momo": "needs the objective's value; tests/contrib/test_contrib.py",
    "momo_adam": "needs the objective's value; tests/contrib/test_contrib.py",
    "reduce_on_plateau": "needs the loss as value; tests/contrib/test_contrib.py",
    "hutchinson_estimator_diag_hessian": "needs obj_fn; tests/contrib/test_contrib.py",
    "stateless": "wraps a user function; tests/transforms/test_transforms.py",
    "stateless_with_tree_map": "wraps a user function; tests/transforms/test_transforms.py",
}
