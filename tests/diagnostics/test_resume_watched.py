"""Registry entries wrapped in with_metrics resume bit for bit in a fresh process.

As tests/conformance/test_resume.py, for the cases of
resume_watched_worker.py: a few steps, an orbax checkpoint of params and
state (the metrics included), a few more steps; a fresh process restores
against `init`'s tree, traces the same program, and continues to the same
bits. A spread of the conformance suite's cases in CI, the rest with
`-m slow`; one process and one compiled step per group.
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
import resume_watched_worker as worker
from conformance_base import make_params

rw = worker.rw
WORKER = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "resume_watched_worker.py"
)


def _differences(expected, resumed):
    out = []
    for path, a in expected.items():
        b = resumed.get(path)
        if b is None:
            out.append(f"{path} missing")
        elif a.dtype != b.dtype or a.shape != b.shape or a.tobytes() != b.tobytes():
            out.append(path)
    return out + [f"{path} unexpected" for path in resumed if path not in expected]


def check_group(suite: str, index: int, tmp_path) -> None:
    params = make_params()
    cases = worker.group(suite, index)
    trees = jax.device_put(rw.starter(cases)(params), rw.on_device())
    lowered = rw.stepper(cases).lower(trees, np.int32(0))
    step = lowered.compile()
    trees = rw.run(step, trees, 0, rw.STEPS_BEFORE)
    # The metrics were written by the steps (not init's zeros).
    for key in cases:
        grad_norm = trees[key][1].metrics["grad_norm"]
        assert float(grad_norm) > 0, cases[key].name
    checkpoint, result = tmp_path / "checkpoint", tmp_path / "result.pickle"
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(checkpoint, trees)
    checkpointer.wait_until_finished()
    expected = rw.leaves_by_path(rw.run(step, trees, rw.STEPS_BEFORE, rw.STEPS_AFTER))
    command = [WORKER, str(checkpoint), rw.program_key(lowered), str(result)]
    command += [suite, str(index), ",".join(cases)]
    done = subprocess.run(
        [sys.executable, *command], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["structure"] and not report["avals"], report
    assert report["same_program"], "the fresh process traced another program"
    with open(result, "rb") as file:
        resumed = pickle.load(file)
    assert not _differences(expected, resumed)


@pytest.mark.parametrize("index", range(worker.N_GROUPS["fast"]))
def test_watched_spread_resumes_bit_for_bit(index, tmp_path):
    check_group("fast", index, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("index", range(worker.N_GROUPS["slow"]))
def test_every_watched_case_resumes_bit_for_bit(index, tmp_path):
    check_group("slow", index, tmp_path)
