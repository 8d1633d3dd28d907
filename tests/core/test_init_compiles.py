"""The first eager ``init`` compiles no more programs than optax's (issue 46).

A transformation whose hook reads none of its fields (``scale_by_learning_rate``
among them) does not evaluate its schedules at step 0: eagerly, each
operation of a schedule is one small compiled program (18 for a
warmup-cosine learning rate). Counted in a fresh process for each library,
since JAX keeps what it compiled for the rest of a process.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# Counts the programs XLA compiles during ``init`` through JAX's monitoring
# events. A program compiled on purpose first checks that the count works.
SCRIPT = """
import json, sys
import jax, jax.numpy as jnp, numpy as np
from jax import monitoring

compiled = []
monitoring.register_event_duration_secs_listener(
    lambda event, duration, **kwargs: compiled.append(event)
    if event == "/jax/core/compile/backend_compile_duration" else None
)
lib = __import__(sys.argv[1])
jax.jit(lambda x: x * 3 + 1)(np.float32(2.0)).block_until_ready()
probe = len(compiled)
params = {"w": jnp.asarray(np.ones((4, 3), np.float32)),
          "b": jnp.asarray(np.ones((3,), np.float32))}
schedule = lib.warmup_cosine_decay_schedule(0.0, 1e-3, 10, 100)
tx = lib.chain(lib.clip_by_global_norm(1.0), lib.adamw(schedule))
before = len(compiled)
state = jax.block_until_ready(tx.init(params))
leaves, tree = jax.tree.flatten(state)
print(json.dumps({
    "probe": probe,
    "init": len(compiled) - before,
    "tree": str(tree).replace(sys.argv[1], "LIB"),
    "leaves": [[list(x.shape), str(x.dtype), bool(x.weak_type)] for x in leaves],
}))
"""


def first_init(library: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, library],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out.splitlines()[-1])


def test_first_init_with_a_schedule_compiles_no_more_than_optax():
    pytest.importorskip("optax")
    ours, theirs = first_init("gradax"), first_init("optax")
    # The listener saw the probe program, so a count of 0 below is real.
    assert ours["probe"] == 1 and theirs["probe"] == 1
    assert ours["init"] <= theirs["init"], (ours["init"], theirs["init"])
    # The state is optax's: the same tree, shapes, dtypes and weak types.
    assert ours["tree"] == theirs["tree"]
    assert ours["leaves"] == theirs["leaves"]
