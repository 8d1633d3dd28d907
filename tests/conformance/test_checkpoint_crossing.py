"""An optax checkpoint restores into gradax, and a gradax one into optax.

For each configuration of ``crossing_worker.CONFIGS`` (a dozen and more
common ones: adam, adamw with a schedule, sgd with momentum, a clipped
chain, inject_hyperparams, Muon, lion, adafactor, MultiSteps, ...), both
libraries train 3 steps and save params and optimizer state with orbax, then
train 3 more. A fresh process (``crossing_worker.py``) restores each
library's checkpoint against the *other* library's abstract state and
continues 3 steps with it. The restored leaves must equal the saved ones bit
for bit, and the continued run must give the saving library's own
continuation.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

import crossing_worker as cw
import jax
import numpy as np
import orbax.checkpoint as ocp
from conformance_base import make_params

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "crossing_worker.py")

# Two libraries computing the same float32 math in different orders: the
# registry's tolerance against optax (tests/registry_base.py), over 6 steps.
RTOL = 1e-5
ATOL = 1e-7


def test_checkpoints_cross_both_ways(tmp_path):
    assert len(cw.CONFIGS) >= 12
    checkpointer = ocp.StandardCheckpointer()
    params = make_params()
    saved, continued = {}, {}
    for name, build in cw.CONFIGS.items():
        for library, module in cw.LIBRARIES.items():
            tx = build(module)
            steps = cw.stepper(tx)
            p3, s3 = steps(params, tx.init(params), 0.0)
            tree = {"params": p3, "opt_state": s3}
            checkpointer.save(cw.checkpoint_path(str(tmp_path), library, name), tree)
            saved[(name, library)] = [np.asarray(x) for x in jax.tree.leaves(tree)]
            p6, _ = steps(p3, s3, float(cw.STEPS))
            continued[(name, library)] = jax.tree.map(np.asarray, p6)
    checkpointer.wait_until_finished()

    result = tmp_path / "result.pkl"
    run = subprocess.run(
        [sys.executable, WORKER, str(tmp_path), str(result)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    with open(result, "rb") as f:
        resumed = pickle.load(f)

    problems = []
    for (name, saved_by), out in resumed.items():
        where = f"{name}: {saved_by}'s checkpoint"
        if not out["same_tree"]:
            problems.append(f"{where} restored into another tree")
        before = saved[(name, saved_by)]
        if len(before) != len(out["restored"]) or any(
            a.tobytes() != b.tobytes()
            for a, b in zip(before, out["restored"], strict=False)
        ):
            problems.append(f"{where} restored different leaves")
        # The other library continues as the saving library did itself.
        try:
            jax.tree.map(
                lambda a, b: np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL),
                out["params"],
                continued[(name, saved_by)],
            )
        except AssertionError as error:
            problems.append(f"{where} continued differently: {error}")
    assert len(resumed) == 2 * len(cw.CONFIGS)
    assert not problems, "\n".join(problems)
