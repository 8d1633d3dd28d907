"""The registry's checks, with every entry wrapped in with_metrics.

The wrapper walks whatever it wraps (chains, partitions, aliases, wrappers,
optax objects) to find groups, learning rates, clips and skip counters, so
every registry entry is a case. Compiling is what CI pays for, so:

- state types under `scan` (what `lax.cond` and `while_loop` also require),
  no transformation built while tracing `update`, and no recompile for a
  freshly built equal optimizer: by tracing alone, every canonical entry in
  float32 (the walk), a spread of them in every dtype of the suite, every
  entry in every dtype with `-m slow`;
- sharded == unsharded: one compiled program per mesh for a representative
  set of entries, every entry with `-m slow`;
- resume bit for bit: resume_watched_worker.py, a spread in CI, every
  canonical entry with `-m slow`.
"""

from __future__ import annotations

import os

import jax
import numpy as np
import pytest
from conformance_base import (
    avals,
    control_flow_dtypes,
    counting_constructions,
    make_params,
    matrix_function_atol,
    mesh_and_shardings,
    quadratic_grads,
    sharding_params,
    state_type_problems,
)
from jax_versions import set_mesh
from registry import CANONICAL, ENTRIES, entry_id
from registry_base import Entry

import gradax
from gradax.orthogonal.groups import MuonGroups, routes_each_leaf

SAMPLE = max(1, int(os.environ.get("GRADAX_TEST_SAMPLE", "1")))
WATCHED = [e for e in CANONICAL[::SAMPLE] if e.name != "with_metrics"]
CHUNK = 30
DTYPE_STRIDE = 10  # every dtype on each DTYPE_STRIDE-th entry in CI


def watched(entry: Entry):
    return gradax.with_metrics(entry.build())


def _grads(params):
    return quadratic_grads(params, 1.0)


def _value(params, value):
    return {"value": value}


def _builds_parts_per_call(entry: Entry, tx) -> bool:
    # As in conformance/test_conformance.py: inject_hyperparams builds its
    # optimizer from each step's values; a Muon optimizer routed by a tree or
    # a function builds its parts for the tree it is given.
    if entry.name == "inject_hyperparams":
        return True
    return isinstance(tx, MuonGroups) and not routes_each_leaf(
        tx.muon_weight_dimension_numbers
    )


def _as_argument(tx) -> list:
    """The types jit sees for `tx`'s leaves (Python numbers weakly typed)."""
    return avals(jax.eval_shape(lambda t: t, tx))


def protocol_problems(entry: Entry) -> list[str]:
    """Built nothing while tracing update; a fresh equal build is the same
    jit argument (tree definition and leaf types: what jit's cache keys on);
    the state's types survive the step."""
    tx, fresh = watched(entry), watched(entry)
    params = make_params()
    state = jax.eval_shape(tx.init, params)
    with counting_constructions() as made:
        _, new_state = jax.eval_shape(
            lambda t, s: t.update(_grads(params), s, params, value=1.0), tx, state
        )
    problems = []
    if made and not _builds_parts_per_call(entry, entry.build()):
        problems.append(f"built while tracing update: {dict(made)}")
    if jax.tree.structure(fresh) != jax.tree.structure(tx) or _as_argument(
        fresh
    ) != _as_argument(tx):
        problems.append("a fresh build is another jit argument (recompiles)")
    if avals(new_state) != avals(state):
        problems.append("the state's types changed in update")
    return problems


def _chunks(entries, size):
    return [
        pytest.param(
            entries[i : i + size], id=f"{i}-{i + len(entries[i : i + size]) - 1}"
        )
        for i in range(0, len(entries), size)
    ]


@pytest.mark.parametrize("entries", _chunks([e for e in WATCHED if e.runs_here], CHUNK))
def test_every_entry_watched_keeps_its_types_and_compiles_once(entries):
    failures = {}
    for entry in entries:
        problems = protocol_problems(entry)
        problems += state_type_problems(
            lambda e=entry: watched(e), ["float32"], _grads, _value
        )
        if problems:
            failures[entry_id(entry)] = problems
    assert not failures, failures


# Every dtype on a spread of the canonical entries in CI; on every other
# entry, the kwargs variants included, with -m slow.
IN_CI = WATCHED[::DTYPE_STRIDE]
DTYPE_PARAMS = [pytest.param(e, id=entry_id(e), marks=e.marks) for e in IN_CI] + [
    pytest.param(e, id=f"{i}-{entry_id(e)}", marks=(*e.marks, pytest.mark.slow))
    for i, e in enumerate(ENTRIES)
    if e.name != "with_metrics" and not any(e is c for c in IN_CI)
]


@pytest.mark.parametrize("entry", DTYPE_PARAMS)
def test_watched_state_types_in_every_dtype(entry):
    dtypes = control_flow_dtypes(entry.complex_ok)
    problems = state_type_problems(lambda: watched(entry), dtypes, _grads, _value)
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------
# Sharded == unsharded, batched: one program runs the first step of many
# entries.

REPRESENTATIVE = (
    "adamw",  # elementwise
    "clip_by_global_norm",  # the grad norm shared with the clip
    "chain",
    "partition",  # groups from labels
    "adafactor",  # factored statistics
    "lamb",  # per-leaf trust ratio
    "muon",  # two groups, orthogonalized matrices
    "apply_if_finite",  # skip counters
    "MultiSteps",
    "inject_hyperparams",  # learning rate from the state
    "offload_state",  # state in host memory
)


def _first_step(txs, params, grads):
    out = {}
    for key, tx in txs.items():
        updates, state = tx.update(grads, tx.init(params), params, value=1.0)
        out[key] = (updates, gradax.metrics(state))
    return out


def sharded_failures(entries, axis_type):
    params = sharding_params()
    grads = quadratic_grads(params, 0.0)
    cases = {f"{i}:{entry_id(e)}": e for i, e in enumerate(entries)}
    txs = {k: watched(e) for k, e in cases.items()}
    single = jax.jit(_first_step)(txs, params, grads)
    mesh, shardings = mesh_and_shardings(axis_type)
    with set_mesh(mesh):
        sharded = jax.jit(_first_step)(
            txs, jax.device_put(params, shardings), jax.device_put(grads, shardings)
        )
    failures = []
    for key, entry in cases.items():
        (want_updates, want_metrics), (updates, metrics) = single[key], sharded[key]
        pairs = zip(
            jax.tree.leaves(want_updates), jax.tree.leaves(updates), strict=True
        )
        for a, b in pairs:
            # The conformance suite's sharded tolerance (matrix_function_atol).
            atol = matrix_function_atol(entry, a)
            if not np.allclose(b, a, rtol=1e-5, atol=atol):
                failures.append(f"{key} {axis_type}: updates differ")
        # A norm moves by at most sqrt(n) times the largest change of an
        # element: 1e-5 relative for elementwise entries; the matrix
        # functions' 1e-4 of the largest entry, over at most 96 elements,
        # bounds theirs by 1e-3.
        rtol = 1e-3 if atol > 1e-6 else 1e-5
        for name, value in want_metrics.items():
            if not np.allclose(
                metrics[name], value, rtol=rtol, atol=1e-7, equal_nan=True
            ):
                failures.append(f"{key} {axis_type}: {name} {metrics[name]} vs {value}")
    return failures


def _representative():
    seen, out = set(), []
    for entry in CANONICAL:
        if entry.name in REPRESENTATIVE and entry.name not in seen and entry.runs_here:
            seen.add(entry.name)
            out.append(entry)
    # An entry that needs a newer jax (offload_state) is left out there.
    wanted = {e.name for e in CANONICAL if e.name in REPRESENTATIVE and e.runs_here}
    assert {e.name for e in CANONICAL} >= set(REPRESENTATIVE)
    assert seen == wanted, wanted - seen
    return out


def test_representative_entries_watched_sharded_equal_unsharded():
    assert not sharded_failures(_representative(), "Auto")


@pytest.mark.slow
@pytest.mark.parametrize("axis_type", ["Auto", "Explicit"])
@pytest.mark.parametrize(
    "entries",
    _chunks([e for e in ENTRIES if e.runs_here and e.name != "with_metrics"], 40),
)
def test_every_entry_watched_sharded_equal_unsharded(entries, axis_type):
    assert not sharded_failures(entries, axis_type)
