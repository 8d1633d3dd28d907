"""master_weights and stochastic_rounding resume bit for bit in a fresh process.

Three cases (an exact master around 8-bit AdamW and around Muon, stochastic
rounding around 8-bit AdamW) train a few steps, are saved with orbax, and
train on; a fresh Python process (precision_resume_worker.py) restores them
against ``init``'s tree and continues. Params, low bits, the PRNG key and
every inner state leaf must equal the uninterrupted run's bit for bit.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

import jax
import numpy as np
import orbax.checkpoint as ocp
import precision_resume_worker as rw

BEFORE = 3
WORKER = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "precision_resume_worker.py"
)


def test_resume_in_a_fresh_process_is_bit_identical(tmp_path):
    start = rw.abstract_trees()
    saved = rw.run(start, 0, BEFORE)
    expected = rw.flat(rw.run(saved, BEFORE, rw.AFTER))
    # What was saved tests what it claims: low bits set, key advanced.
    assert int(np.max(np.asarray(saved["master_adamw"][1].low_bits["m"]))) > 0
    key0 = jax.random.key_data(start["rounding_adamw"][1].rng_key)
    key = jax.random.key_data(saved["rounding_adamw"][1].rng_key)
    assert not np.array_equal(key0, key)
    checkpoint = tmp_path / "checkpoint"
    with ocp.StandardCheckpointer() as ckpt:
        ckpt.save(os.path.abspath(checkpoint), saved)
    result = tmp_path / "result.pkl"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(WORKER), env.get("PYTHONPATH", "")]
    )
    subprocess.run(
        [sys.executable, WORKER, str(checkpoint), str(result), str(BEFORE)],
        check=True,
        env=env,
        timeout=300,
    )
    with open(result, "rb") as f:
        resumed = pickle.load(f)
    assert sorted(resumed) == sorted(expected)
    different = [
        path
        for path, a in expected.items()
        if a.dtype != resumed[path].dtype or a.tobytes() != resumed[path].tobytes()
    ]
    assert not different, different
