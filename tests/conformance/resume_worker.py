"""Resume cases, and the fresh process that restores and continues them.

``tests/conformance/test_resume.py`` trains every case of a group a few steps, saves
params and optimizer state with orbax, and trains on without interruption.
It then runs this file as a script in a fresh Python process:

    python tests/conformance/resume_worker.py CHECKPOINT PROGRAM_KEY RESULT \
        SUITE GROUP KEYS

which restores the checkpoint against the abstract tree of ``tx.init`` (built
here, in the new process), checks that tracing the step here gives the
program PROGRAM_KEY names (the saving process's), continues the same number
of steps and saves the final params and state to RESULT (pickled NumPy
arrays) for the test to compare bit for bit. A group is one process and one
compiled program for all its cases, so the catalogue costs a handful of
processes, not one per entry.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
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
import orbax.checkpoint as ocp  # noqa: E402
from conformance_base import make_params, quadratic_grads  # noqa: E402
from registry import (  # noqa: E402
    CANONICAL,
    ENTRIES,
    EXTRA_ARG_CASES,
    VARIANTS,
    entry_id,
)
from registry_base import loss_fn  # noqa: E402

import gradax  # noqa: E402

STEPS_BEFORE = 3  # steps before the checkpoint
STEPS_AFTER = 3  # steps after it, in both runs
N_GROUPS = 4


def _no_extra(params: Any, step: jax.Array) -> dict[str, Any]:
    del params, step
    return {}


@dataclasses.dataclass(frozen=True)
class Case:
    """One optimizer to resume: how to build it and what its update needs."""

    name: str
    build: Callable[[], Any]
    extra: Callable[[Any, jax.Array], dict[str, Any]] = _no_extra
    # What the saved state must show for the case to test what it claims.
    mid_accumulation: bool = False  # a MultiSteps state with mini_step > 0
    adamw_group: bool = False  # state for the vector "v" (the AdamW group)

    def step(self, params: Any, state: Any, step: jax.Array) -> tuple[Any, Any]:
        # Per-step different gradients: they depend on the params and the step.
        grads = quadratic_grads(params, step.astype(jnp.float32))
        updates, state = self.build().update(
            grads, state, params, **self.extra(params, step)
        )
        return gradax.apply_updates(params, updates), state


def _scheduled(value: float, end: float) -> gradax.Schedule:
    # Changes at every step, so a count that is not restored shows.
    return gradax.linear_schedule(value, end, transition_steps=10)


def _schedule_kwargs(entry, make: Callable[..., Any]) -> dict[str, Any]:
    """``entry.kwargs`` with its schedulable argument given as a schedule.

    The schedule moves the value by 10% over 10 steps, down where the
    argument's declared range allows it, else up (e.g. rprop's eta_plus >= 1).
    """
    value = entry.kwargs.get(entry.schedule_arg)
    if value is None:
        value = getattr(entry.build(), entry.schedule_arg)
    for end in (0.9 * value, 1.1 * value):
        kwargs = {**entry.kwargs, entry.schedule_arg: _scheduled(value, end)}
        try:
            make(**kwargs)
        except gradax.HyperparameterError:
            continue
        return kwargs
    raise ValueError(f"{entry_id(entry)}: no schedule of {entry.schedule_arg} fits")


# Built when a case is run, so an entry that fails reports as its own case.
def _with_schedule(entry) -> Callable[[], Any]:
    return lambda: entry.build(**_schedule_kwargs(entry, entry.build))


def _injected(entry) -> Callable[[], Any]:
    def build():
        injected = gradax.inject_hyperparams(entry.factory)
        if not entry.schedule_arg:
            return injected(**entry.kwargs)
        return injected(**_schedule_kwargs(entry, injected))

    return build


def _extra_args(case) -> Callable[[Any, jax.Array], dict[str, Any]]:
    # The objective's value as test_contrib_extra_args gives it: the loss,
    # moved a little with the step so a plateau logic sees it change.
    def extra(params, step):
        value = loss_fn(params).astype(jnp.float32) + 0.01 * jnp.sin(step)
        return case.extra(params, value)

    return extra


def _muon_family(name: str) -> Case:
    # Matrices go to the orthogonalized update, the scalar, the vector and
    # the 3-D leaf to the AdamW group; both groups decay their weights.
    return Case(
        f"{name}+adamw-group",
        lambda: getattr(gradax, name)(
            gradax.cosine_decay_schedule(0.05, 20),
            weight_decay=0.01,
            adam_weight_decay=0.02,
        ),
        adamw_group=True,
    )


MUON_FAMILY = ("muon", "normuon", "adamuon", "dion", "dion2")

# MultiSteps cases: after STEPS_BEFORE mini-steps each is mid-accumulation.
MULTI_STEPS = [
    Case(
        "MultiSteps(adam,k=2)",
        lambda: gradax.MultiSteps(gradax.adam(0.05), 2),
        mid_accumulation=True,
    ),
    Case(
        "MultiSteps(adamw,k=4,sum)",
        lambda: gradax.MultiSteps(
            gradax.adamw(_scheduled(0.05, 0.04), weight_decay=0.01),
            4,
            use_grad_mean=False,
        ),
        mid_accumulation=True,
    ),
    Case(
        "MultiSteps(muon,k=2,skip_not_finite)",
        lambda: gradax.MultiSteps(
            gradax.muon(0.05, adam_weight_decay=0.01),
            2,
            should_skip_update_fn=gradax.skip_not_finite,
        ),
        mid_accumulation=True,
        adamw_group=True,
    ),
]

# The fast suite schedules or injects every VARIANT_STRIDE-th eligible entry
# (spread over the registry modules); the slow suite does all of them.
VARIANT_STRIDE = 12


def _scheduled_cases(stride: int) -> list[Case]:
    eligible = [e for e in ENTRIES if e.schedule_arg][::stride]
    return [
        Case(f"{entry_id(e)}@{e.schedule_arg}=schedule", _with_schedule(e))
        for e in eligible
    ]


def _injected_cases(stride: int) -> list[Case]:
    eligible = [e for e in ENTRIES if e.injectable][::stride]
    return [Case(f"inject_hyperparams({entry_id(e)})", _injected(e)) for e in eligible]


def suite(name: str) -> list[Case]:
    """The cases of a suite: ``"fast"`` (in CI) or ``"slow"`` (``-m slow``).

    fast: every canonical registry entry (registry.CANONICAL) as
    registered, the contrib optimizers whose update needs extra arguments,
    the Muon family with its AdamW group, MultiSteps saved
    mid-accumulation, and a spread of entries with their schedulable
    argument given as a schedule and wrapped in inject_hyperparams. slow:
    the kwargs variants, every schedulable entry scheduled and every
    injectable entry injected.
    """
    if name == "slow":
        variants = [Case(entry_id(e), e.build) for e in VARIANTS]
        return variants + _scheduled_cases(1) + _injected_cases(1)
    if name != "fast":
        raise ValueError(f"suite must be 'fast' or 'slow', got {name!r}")
    # An entry that needs a newer jax (Entry.requires) is left out there.
    cases = [Case(entry_id(e), e.build) for e in CANONICAL if e.runs_here]
    cases += [Case(c.name, c.make, _extra_args(c)) for c in EXTRA_ARG_CASES]
    cases += [_muon_family(name) for name in MUON_FAMILY]
    cases += MULTI_STEPS
    return cases + _scheduled_cases(VARIANT_STRIDE) + _injected_cases(VARIANT_STRIDE)


def group(name: str, index: int) -> dict[str, Case]:
    """One group of a suite, by checkpoint key (names have odd characters)."""
    cases = suite(name)
    return {f"c{i}": c for i, c in enumerate(cases) if i % N_GROUPS == index}


# Both processes inherit the suite's compile options (XLA_FLAGS, set in
# tests/conftest.py), so their programs agree.


def starter(cases: dict[str, Case]) -> Callable[..., Any]:
    """``init`` for every case of a group, compiled (eagerly it is 5x slower)."""

    def start(params):
        return {k: (params, c.build().init(params)) for k, c in cases.items()}

    return jax.jit(start)


def stepper(cases: dict[str, Case]) -> Callable[..., Any]:
    """One compiled step for every case of a group: ``{key: (params, state)}``."""

    def step(trees, i):
        return {k: cases[k].step(*trees[k], i) for k in cases}

    return jax.jit(step)


def run(step: Callable[..., Any], trees: Any, start: int, steps: int) -> Any:
    """``steps`` calls of the compiled step, as a training loop makes them."""
    for i in range(start, start + steps):
        trees = step(trees, jnp.asarray(i, jnp.int32))
    return trees


def on_device() -> jax.sharding.Sharding:
    """Where both processes keep the trees: committed to the first device.

    orbax restores committed arrays, and a jitted step traced on committed
    arrays is another program (with sharding annotations) than on
    uncommitted ones; the saving process commits its trees too.
    """
    # A one-device mesh rather than SingleDeviceSharding, which jax 0.12.1
    # deprecates (its replacement, make_single_device_sharding, is new there).
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("device",))
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())


def abstract_trees(cases: dict[str, Case]) -> dict[str, Any]:
    """What a group's checkpoint holds: params and the state ``init`` makes."""
    device = on_device()
    params = jax.eval_shape(make_params)
    trees = {
        k: (params, jax.eval_shape(c.build().init, params)) for k, c in cases.items()
    }
    return jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(
            x.shape, x.dtype, sharding=device, weak_type=x.weak_type
        ),
        trees,
    )


def with_weak_types(restored: Any, target: Any) -> Any:
    """``restored`` with the weak types of ``target`` put back.

    orbax restores strongly typed arrays whatever the target says, and a
    weakly typed scalar in ``init``'s state (an injected integer
    hyperparameter, ``jnp.asarray(2)``, as optax keeps it) would then trace
    another program than the saving process's, with the same numbers. A
    weakly typed template filled with the value (``lax.full_like``) puts the
    weak type back without touching the value.
    """

    def fix(leaf: Any, want: Any) -> Any:
        if not want.weak_type or leaf.weak_type:
            return leaf
        assert leaf.ndim == 0, "only scalars are weakly typed in init's states"
        zero = 0 if jnp.issubdtype(leaf.dtype, jnp.integer) else 0.0
        template = jnp.asarray(zero)
        assert template.dtype == leaf.dtype, (template.dtype, leaf.dtype)
        return jax.device_put(jax.lax.full_like(template, leaf), leaf.sharding)

    return jax.tree.map(fix, restored, target)


def avals(tree: Any) -> dict[str, tuple[Any, ...]]:
    """Shape, dtype and weak type of every leaf, by path."""
    return {
        jax.tree_util.keystr(path): (
            tuple(x.shape),
            str(x.dtype),
            bool(getattr(x, "weak_type", False)),
        )
        for path, x in jax.tree_util.tree_flatten_with_path(tree)[0]
    }


def program_key(lowered: Any) -> str:
    """A fingerprint of a traced program (what a compilation cache keys on)."""
    return hashlib.sha256(lowered.as_text().encode()).hexdigest()


def leaves_by_path(trees: Any) -> dict[str, np.ndarray]:
    """Every leaf as a NumPy array (a PRNG key as its data), by path."""
    out = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(trees)[0]:
        if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            leaf = jax.random.key_data(leaf)
        out[jax.tree_util.keystr(path)] = np.asarray(leaf)
    return out


def main(
    checkpoint: str, program: str, result: str, name: str, index: int, keys: str
) -> None:
    """Restore a group against ``init``'s tree, continue it, save the result.

    ``program`` is the fingerprint of the saving process's step program;
    ``keys`` a comma-separated list of the group's cases that the saving
    process could run (it reports the others as failures itself).
    """
    whole = group(name, index)
    cases = {k: whole[k] for k in keys.split(",")}
    target = abstract_trees(cases)
    checkpointer = ocp.StandardCheckpointer()
    restored = with_weak_types(checkpointer.restore(checkpoint, target), target)
    # The restored tree must be the one init makes (structure, dtypes, weak
    # types), or the continued program is not the uninterrupted one.
    report = {
        "structure": jax.tree.structure(restored) == jax.tree.structure(target),
        "avals": [
            cases[k].name for k in cases if avals(restored[k]) != avals(target[k])
        ],
    }
    lowered = stepper(cases).lower(restored, np.int32(STEPS_BEFORE))
    report["same_program"] = program_key(lowered) == program
    final = run(lowered.compile(), restored, STEPS_BEFORE, STEPS_AFTER)
    # Pickled NumPy arrays are exact, and cheaper than another checkpoint.
    with open(result, "wb") as file:
        pickle.dump(leaves_by_path(final), file)
    print(json.dumps(report))


if __name__ == "__main__":
    main(*sys.argv[1:5], int(sys.argv[5]), sys.argv[6])
