"""Registry entries wrapped in with_metrics, resumed in a fresh process.

The cases are those of tests/conformance/resume_worker.py's suite, each
wrapped in `gradax.with_metrics`; the training, saving, restoring and
continuing are that file's (``resume_worker``). As a script, in a fresh
Python process:

    python tests/diagnostics/resume_watched_worker.py CHECKPOINT PROGRAM_KEY \
        RESULT SUITE GROUP KEYS

restores the checkpoint of group GROUP of SUITE ("fast" or "slow") against
``init``'s abstract tree, checks that the step traces to the saving
process's program, continues, and saves the result for the test to compare
bit for bit (see resume_worker.main).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import sys

_TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(_TESTS, "conformance"), _TESTS]

import jax  # noqa: E402
import numpy as np  # noqa: E402
import orbax.checkpoint as ocp  # noqa: E402
import resume_worker as rw  # noqa: E402

import gradax  # noqa: E402

# Processes (one compiled step each) per suite.
N_GROUPS = {"fast": 2, "slow": 4}
FAST_STRIDE = 8  # CI resumes every 8th case of the conformance suite


def _watched(case: rw.Case) -> rw.Case:
    build = case.build
    return dataclasses.replace(
        case,
        name=f"with_metrics({case.name})",
        build=lambda: gradax.with_metrics(build()),
    )


def suite(name: str) -> list[rw.Case]:
    """Every case of resume_worker's fast suite, wrapped ("slow"), or a
    spread of them ("fast")."""
    cases = [_watched(c) for c in rw.suite("fast")]
    if name == "fast":
        return cases[::FAST_STRIDE]
    if name != "slow":
        raise ValueError(f"suite must be 'fast' or 'slow', got {name!r}")
    return [c for i, c in enumerate(cases) if i % FAST_STRIDE]


def group(name: str, index: int) -> dict[str, rw.Case]:
    cases = suite(name)
    return {f"c{i}": c for i, c in enumerate(cases) if i % N_GROUPS[name] == index}


def main(
    checkpoint: str, program: str, result: str, name: str, index: int, keys: str
) -> None:
    whole = group(name, index)
    cases = {k: whole[k] for k in keys.split(",")}
    target = rw.abstract_trees(cases)
    restored = rw.with_weak_types(
        ocp.StandardCheckpointer().restore(checkpoint, target), target
    )
    report = {
        "structure": jax.tree.structure(restored) == jax.tree.structure(target),
        "avals": [
            cases[k].name for k in cases if rw.avals(restored[k]) != rw.avals(target[k])
        ],
    }
    lowered = rw.stepper(cases).lower(restored, np.int32(rw.STEPS_BEFORE))
    report["same_program"] = rw.program_key(lowered) == program
    final = rw.run(lowered.compile(), restored, rw.STEPS_BEFORE, rw.STEPS_AFTER)
    with open(result, "wb") as file:
        pickle.dump(rw.leaves_by_path(final), file)
    print(json.dumps(report))


if __name__ == "__main__":
    main(*sys.argv[1:5], int(sys.argv[5]), sys.argv[6])
