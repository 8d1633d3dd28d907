"""One process of the multi-host test (see test_multihost.py).

Usage: python multihost_worker.py PROCESS_ID NUM_PROCESSES PORT OUT_FILE
With NUM_PROCESSES=1 it runs the same training on one process with 8 devices.
"""

from __future__ import annotations

import os
import sys

process_id, num_processes, port, out_file = (
    int(sys.argv[1]),
    int(sys.argv[2]),
    sys.argv[3],
    sys.argv[4],
)
local_devices = 8 // num_processes
# After the suite's compile options (tests/subprocess_env.py).
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "")
    + f" --xla_force_host_platform_device_count={local_devices}"
)

import jax  # noqa: E402

if num_processes > 1:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=f"localhost:{port}",
        num_processes=num_processes,
        process_id=process_id,
    )

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import gradax  # noqa: E402

# tests/jax_versions.py (the tests folder, not on this script's path).
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from jax_versions import set_mesh  # noqa: E402

P = jax.sharding.PartitionSpec


def main() -> None:
    assert jax.device_count() == 8, jax.devices()
    mesh = jax.make_mesh((8,), ("d",), axis_types=(jax.sharding.AxisType.Auto,))
    rng = np.random.default_rng(0)
    host_params = {
        "w1": rng.standard_normal((16, 32)).astype(np.float32) / 4,
        "w2": rng.standard_normal((32, 8)).astype(np.float32) / 6,
        "b": np.zeros(8, np.float32),
    }
    x = rng.standard_normal((64, 16)).astype(np.float32)
    y = rng.standard_normal((64, 8)).astype(np.float32)
    shardings = {"w1": P(None, "d"), "w2": P("d", None), "b": P()}

    def loss_fn(p, x, y):
        h = jnp.tanh(x @ p["w1"])
        return jnp.mean((h @ p["w2"] + p["b"] - y) ** 2)

    tx = gradax.muon(0.02, weight_decay=0.01)

    @jax.jit
    def step(p, s, x, y):
        grads = jax.grad(loss_fn)(p, x, y)
        updates, s = tx.update(grads, s, p)
        return gradax.apply_updates(p, updates), s

    with set_mesh(mesh):
        params = {
            k: jax.make_array_from_callback(
                v.shape, jax.NamedSharding(mesh, shardings[k]), lambda i, v=v: v[i]
            )
            for k, v in host_params.items()
        }
        batch = [
            jax.make_array_from_callback(
                a.shape, jax.NamedSharding(mesh, P()), lambda i, a=a: a[i]
            )
            for a in (x, y)
        ]
        state = jax.jit(tx.init)(params)
        for _ in range(5):
            params, state = step(params, state, *batch)
        replicated = jax.jit(lambda p: p, out_shardings=jax.NamedSharding(mesh, P()))(
            params
        )
    if process_id == 0:
        np.savez(out_file, **{k: np.asarray(v) for k, v in replicated.items()})
    if num_processes > 1:
        jax.distributed.shutdown()


if __name__ == "__main__":
    main()
