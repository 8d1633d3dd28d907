"""Resuming from an orbax checkpoint in a fresh process is bit-identical.

For every case of ``resume_worker.suite`` (every registry entry, the kwargs
variants with -m slow, plus scheduled hyperparameters, inject_hyperparams,
MultiSteps saved mid-accumulation and the Muon family with its AdamW
group): train a few
steps, save params and optimizer state, and train on. A fresh Python process
(``resume_worker.py``) restores the checkpoint against ``init``'s abstract
tree and continues; its params and every state leaf must equal the
uninterrupted run's bit for bit. One process and one compiled step per group
of cases keep the catalogue to a few seconds of compile per group.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest
import resume_worker as rw
from conformance_base import make_params

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "resume_worker.py")


def _saved_state_checks(cases, trees) -> list[str]:
    """Problems with what was saved: a case that does not test its claim."""
    problems = []
    for key, case in cases.items():
        state = trees[key][1]
        if case.mid_accumulation and int(state.mini_step) == 0:
            problems.append(f"{case.name}: saved at the end of an accumulation")
        if case.adamw_group:
            paths = [
                jax.tree_util.keystr(path)
                for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]
                if leaf.shape == (5,)
            ]
            if not any("['v']" in path for path in paths):
                problems.append(f"{case.name}: no state for the vector leaf")
    return problems


def _differences(expected, resumed) -> list[str]:
    """Every leaf path where the two runs differ, with the largest difference."""
    out = []
    for path, a in expected.items():
        b = resumed.get(path)
        if b is None:
            out.append(f"{path} missing")
        # Bitwise: NaN equals NaN, and -0.0 differs from 0.0.
        elif a.dtype != b.dtype or a.shape != b.shape or a.tobytes() != b.tobytes():
            gap = np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))
            out.append(f"{path} (max |diff| {gap:.3g})")
    return out + [f"{path} unexpected" for path in resumed if path not in expected]


def _error(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"[:500]


def _compile(cases, broken, make, args, check):
    """Compile ``make(cases)``, first setting aside the cases that raise.

    A case that cannot init or step is a failure of its own, reported by
    name; it must not hide what the rest of its group shows.
    """
    try:
        lowered = make(cases).lower(*args)
    except Exception:  # noqa: BLE001 - find the cases that raise, one by one
        for key, case in list(cases.items()):
            try:
                check(key, case)
            except Exception as exc:  # noqa: BLE001 - reported by name
                broken[case.name] = _error(exc)
                del cases[key]
        lowered = make(cases).lower(*args)
    return lowered, lowered.compile()


def _committed(trees):
    """``trees`` committed to ``rw.on_device()``, device memory, as the fresh
    process restores them.

    ``offload_state`` keeps its state in host memory. jax 0.12.1 cannot copy
    a CPU array that a jitted function placed in host memory into device
    memory ("UNIMPLEMENTED: Unsupported layout used for PjRt CPU buffers:
    {:S(5)}"; jax 0.10 can); those leaves go through NumPy, their weak
    types put back.
    """
    device = rw.on_device()

    def commit(x):
        # Not `== "device"`: jax 0.5's CPU arrays are in "unpinned_host".
        if getattr(x.sharding, "memory_kind", None) != "pinned_host":
            return jax.device_put(x, device)
        moved = jax.device_put(np.asarray(x), device)
        return rw.with_weak_types(moved, x)

    return jax.tree.map(commit, trees)


def _check_group(suite: str, index: int, tmp_path) -> None:
    params = make_params()
    cases, broken = rw.group(suite, index), {}
    _, start = _compile(
        cases,
        broken,
        rw.starter,
        (params,),
        lambda key, case: jax.eval_shape(case.build().init, params),
    )
    trees = _committed(start(params))
    i = np.int32(0)
    lowered, step = _compile(
        cases,
        broken,
        rw.stepper,
        ({k: trees[k] for k in cases}, i),
        lambda key, case: jax.eval_shape(case.step, *trees[key], i),
    )
    trees = rw.run(step, {k: trees[k] for k in cases}, 0, rw.STEPS_BEFORE)
    assert not _saved_state_checks(cases, trees)

    checkpoint, result = tmp_path / "checkpoint", tmp_path / "result.pickle"
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(checkpoint, trees)
    checkpointer.wait_until_finished()
    expected = rw.leaves_by_path(rw.run(step, trees, rw.STEPS_BEFORE, rw.STEPS_AFTER))

    program = rw.program_key(lowered)
    command = [WORKER, str(checkpoint), program, str(result), suite, str(index)]
    command.append(",".join(cases))
    done = subprocess.run(
        [sys.executable, *command],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[:3000] + "\n...\n" + done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["structure"], "restored tree differs from init's"
    assert not report["avals"], f"restored dtypes/weak types differ: {report['avals']}"
    # Tracing the optimizers afresh gives the program the first process ran
    # (a construction that draws a seed, say, would not).
    assert report["same_program"], "the fresh process traced another program"

    with open(result, "rb") as file:
        resumed = pickle.load(file)
    failures = {}
    for key, case in cases.items():
        prefix = f"['{key}']"
        diff = _differences(
            {p: x for p, x in expected.items() if p.startswith(prefix)},
            {p: x for p, x in resumed.items() if p.startswith(prefix)},
        )
        if diff:
            failures[case.name] = diff
    assert not failures, json.dumps(failures, indent=1)
    assert not broken, json.dumps(broken, indent=1)


@pytest.mark.parametrize("index", range(rw.N_GROUPS))
def test_resume_in_a_fresh_process_is_bit_identical(index, tmp_path):
    _check_group("fast", index, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("index", range(rw.N_GROUPS))
def test_resume_variants_and_every_schedule_and_injection(index, tmp_path):
    _check_group("slow", index, tmp_path)
