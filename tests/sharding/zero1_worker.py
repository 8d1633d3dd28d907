"""Processes for tests/sharding/test_zero1.py: two hosts, and a resume.

    python zero1_worker.py multihost PROCESS_ID NUM_PROCESSES PORT OUT_FILE
    python zero1_worker.py resume CHECKPOINT OUT_FILE

``multihost`` trains a ZeRO-1 Muon model on 8 CPU devices, in one process or
split over two with ``jax.distributed`` (gloo collectives), and saves the
final parameters and state. ``resume`` restores an orbax checkpoint written
by the test against ``init``'s tree and shardings, continues, and saves.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from jax_versions import set_mesh  # noqa: E402  (tests/, not a package)

import gradax  # noqa: E402

P = jax.sharding.PartitionSpec
STEPS_BEFORE = 3  # steps before the checkpoint
STEPS_AFTER = 3  # steps after it, in both runs

TX = gradax.shard_state(
    gradax.apply_if_finite(
        gradax.muon(0.02, weight_decay=0.01, muon_weight_dimension_numbers="auto"), 2
    ),
    axis="data",
)


def initial_params() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "w1": rng.standard_normal((16, 32)).astype(np.float32) / 4,
        "layers": rng.standard_normal((8, 32, 32)).astype(np.float32) / 6,
        "w2": rng.standard_normal((32, 8)).astype(np.float32) / 6,
        "b": np.zeros(8, np.float32),
    }


def _batch(step: Any) -> tuple[jax.Array, jax.Array]:
    key = jax.random.fold_in(jax.random.key(1), step)
    x = jax.random.normal(key, (64, 16))
    return x, jnp.sin(x[:, :8] * 2.0)


def loss_fn(p: Any, x: jax.Array, y: jax.Array) -> jax.Array:
    h = jnp.tanh(x @ p["w1"])
    for i in range(p["layers"].shape[0]):
        h = jnp.tanh(h @ p["layers"][i])
    return jnp.mean((h @ p["w2"] + p["b"] - y) ** 2)


def step(params: Any, state: Any, i: jax.Array) -> tuple[Any, Any]:
    grads = jax.grad(loss_fn)(params, *_batch(i))
    updates, state = TX.update(grads, state, params)
    return gradax.apply_updates(params, updates), state


def start(mesh: Any) -> tuple[Any, Any]:
    """Replicated parameters (from host data, as on many hosts) and state."""
    replicated = jax.NamedSharding(mesh, P())
    params = {
        k: jax.make_array_from_callback(v.shape, replicated, lambda i, v=v: v[i])
        for k, v in initial_params().items()
    }
    return params, jax.jit(TX.init)(params)


def flat(tree: Any) -> dict[str, np.ndarray]:
    """Every leaf by its path, gathered to the host."""
    out = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        if not leaf.is_fully_addressable:
            leaf = jax.jit(lambda x: x, out_shardings=P())(leaf)
        out[jax.tree_util.keystr(path)] = np.asarray(leaf)
    return out


def _mesh(axis_type: str) -> Any:
    kind = getattr(jax.sharding.AxisType, axis_type)
    return jax.make_mesh((8,), ("data",), axis_types=(kind,))


def multihost(process_id: int, num_processes: int, port: str, out_file: str) -> None:
    if num_processes > 1:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(
            coordinator_address=f"localhost:{port}",
            num_processes=num_processes,
            process_id=process_id,
        )
    assert jax.device_count() == 8, jax.devices()
    mesh = _mesh("Auto")
    with set_mesh(mesh):
        params, state = start(mesh)
        run = jax.jit(step)
        for i in range(5):
            params, state = run(params, state, np.int32(i))
        result = flat({"params": params, "state": state})
    # Muon's momentum of the stack of layers.
    [mu] = [
        leaf
        for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]
        if "'muon'" in jax.tree_util.keystr(path) and leaf.shape == (8, 32, 32)
    ]
    rows = [s.data.shape[0] for s in mu.addressable_shards]
    result["shard_rows"] = np.asarray(rows)
    if process_id == 0:
        np.savez(out_file, **result)
    if num_processes > 1:
        jax.distributed.shutdown()


def resume(checkpoint: str, out_file: str) -> None:
    import orbax.checkpoint as ocp

    mesh = _mesh("Explicit")
    with set_mesh(mesh):
        params, state = start(mesh)  # the target tree, types and shardings
        target = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
            {"params": params, "state": state},
        )
        restored = ocp.StandardCheckpointer().restore(checkpoint, target)
        params, state = restored["params"], restored["state"]
        run = jax.jit(step)
        for i in range(STEPS_BEFORE, STEPS_BEFORE + STEPS_AFTER):
            params, state = run(params, state, np.int32(i))
        np.savez(out_file, **flat({"params": params, "state": state}))


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "multihost":
        devices = 8 // int(sys.argv[3])
        # After the suite's compile options (tests/subprocess_env.py).
        os.environ["XLA_FLAGS"] = (
            os.environ.get("XLA_FLAGS", "")
            + f" --xla_force_host_platform_device_count={devices}"
        )
        multihost(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])
    else:
        resume(sys.argv[2], sys.argv[3])
