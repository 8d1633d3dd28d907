"""Checkpoints that cross between optax and gradax: the configurations, and
the fresh process that restores one library's checkpoint into the other's.

``tests/conformance/test_checkpoint_crossing.py`` trains each configuration 3 steps with
optax and with gradax, saves params and optimizer state with orbax, and
trains both on 3 more steps. It then runs this file as a script in a fresh
Python process:

    python tests/conformance/crossing_worker.py CHECKPOINTS RESULT

which restores every optax checkpoint against the abstract tree of gradax's
``init`` (and every gradax checkpoint against optax's), continues 3 steps
with the other library, and pickles the restored states and final params to
RESULT for the test to compare.
"""

from __future__ import annotations

import os
import pickle
import sys
from collections.abc import Callable
from typing import Any

# This folder (the tests that launch it) and tests/ (the shared registry).
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.dirname(_HERE)]

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
import orbax.checkpoint as ocp  # noqa: E402
from conformance_base import make_params, quadratic_grads  # noqa: E402

import gradax  # noqa: E402

STEPS = 3  # before the checkpoint, and after it
LIBRARIES = {"optax": optax, "gradax": gradax}


def _matrices_only(params: Any) -> Any:
    return jax.tree.map(lambda p: p.ndim == 2, params)


# Each builds the same configuration from either library (``o``).
CONFIGS: dict[str, Callable[[Any], Any]] = {
    "adam": lambda o: o.adam(1e-2),
    "adamw(schedule)": lambda o: o.adamw(
        o.warmup_cosine_decay_schedule(0.0, 1e-2, 2, 20), weight_decay=0.1
    ),
    "sgd(momentum, nesterov)": lambda o: o.sgd(0.05, momentum=0.9, nesterov=True),
    "sgd(schedule)": lambda o: o.sgd(o.exponential_decay(0.1, 2, 0.5)),
    "chain(clip_by_global_norm, adamw(schedule))": lambda o: o.chain(
        o.clip_by_global_norm(1.0),
        o.adamw(o.linear_schedule(1e-2, 1e-3, 10), weight_decay=0.05),
    ),
    "inject_hyperparams(adamw)(schedule)": lambda o: o.inject_hyperparams(o.adamw)(
        learning_rate=o.cosine_decay_schedule(1e-2, 20), weight_decay=0.1
    ),
    "contrib.muon": lambda o: o.contrib.muon(0.02),
    "lion": lambda o: o.lion(1e-3, weight_decay=0.01),
    "adafactor": lambda o: o.adafactor(1e-2),
    "MultiSteps(adam)": lambda o: o.MultiSteps(o.adam(1e-2), every_k_schedule=2),
    "rmsprop(momentum)": lambda o: o.rmsprop(1e-2, momentum=0.9, centered=True),
    "adagrad": lambda o: o.adagrad(0.1),
    "lamb": lambda o: o.lamb(1e-2),
    "masked(add_decayed_weights(schedule)) + adam": lambda o: o.chain(
        o.masked(
            o.add_decayed_weights(o.linear_schedule(1e-2, 0.0, 10)), _matrices_only
        ),
        o.adam(1e-2),
    ),
    "partition(adam, sgd)": lambda o: o.partition(
        {"a": o.adam(1e-2), "b": o.sgd(0.05, momentum=0.5)},
        lambda p: jax.tree.map(lambda x: "a" if x.ndim > 1 else "b", p),
    ),
    "apply_if_finite(nadamw)": lambda o: o.apply_if_finite(
        o.nadamw(1e-2, weight_decay=0.1), 3
    ),
}


def stepper(tx: Any) -> Callable[[Any, Any, Any], tuple[Any, Any]]:
    """``STEPS`` updates from ``(params, state, first_step)``, compiled once."""

    @jax.jit
    def steps(params, state, first_step):
        for i in range(STEPS):
            grads = quadratic_grads(params, first_step + i)
            updates, state = tx.update(grads, state, params)
            params = optax.apply_updates(params, updates)
        return params, state

    return steps


def checkpoint_path(root: str, library: str, name: str) -> str:
    safe = "".join(c if c.isalnum() else "_" for c in name)
    return os.path.join(root, library, safe)


def main(root: str, result_path: str) -> None:
    checkpointer = ocp.StandardCheckpointer()
    params = make_params()
    results = {}
    for name, build in CONFIGS.items():
        for saved_by, restored_by in (("optax", "gradax"), ("gradax", "optax")):
            tx = build(LIBRARIES[restored_by])
            abstract = jax.eval_shape(
                lambda p, tx=tx: {"params": p, "opt_state": tx.init(p)}, params
            )
            restored = checkpointer.restore(
                checkpoint_path(root, saved_by, name), abstract
            )
            new_params, _ = stepper(tx)(
                restored["params"], restored["opt_state"], float(STEPS)
            )
            results[(name, saved_by)] = {
                "restored": [np.asarray(x) for x in jax.tree.leaves(restored)],
                "params": jax.tree.map(np.asarray, new_params),
                # Restored as the restoring library's own classes.
                "same_tree": jax.tree.structure(restored["opt_state"])
                == jax.tree.structure(abstract["opt_state"]),
            }
    with open(result_path, "wb") as f:
        pickle.dump(results, f)


if __name__ == "__main__":
    jnp.zeros(())  # start the backend before orbax does
    main(sys.argv[1], sys.argv[2])
