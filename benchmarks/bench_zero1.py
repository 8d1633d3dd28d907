"""ZeRO-1 (``gradax.shard_state``) against plain data parallelism, 8 devices.

For AdamW and Muon on a small transformer-shaped tree, one compiled training
step (gradients of a batch split over the ``data`` axis, optimizer update,
apply) with replicated parameters, in two forms:

- plain data parallelism: state replicated like the parameters; the
  compiler all-reduces the gradients;
- ZeRO-1: the same step with the transformation wrapped in
  ``shard_state(tx, axis="data")``, the gradients still all-reduced;
- ZeRO-1 with reduce-scattered gradients: the gradients from
  ``gradax.sharding.data_parallel_value_and_grad``, each device receiving
  only the summed slice it updates (then the updates are all-gathered).

Printed per form: the optimizer state's bytes on each device, and the
collectives in the compiled step's HLO (count of each kind, and bytes each
device receives, estimated as gradax's distributed benchmark does). Runs on
simulated CPU devices; the counts and bytes are the compiler's plan, not
timings.

Run: python benchmarks/bench_zero1.py [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import re

SIMULATED = "--xla_force_host_platform_device_count=8"
if SIMULATED not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {SIMULATED}".strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import gradax  # noqa: E402
from gradax_cli.benchmarks.distributed import collective_bytes  # noqa: E402

P = jax.sharding.PartitionSpec
KINDS = (
    "all-reduce",
    "all-gather",
    "reduce-scatter",
    "collective-permute",
    "all-to-all",
)
VOCAB, WIDTH, LAYERS, BATCH = 1024, 256, 8, 64


def make_params() -> dict:
    keys = jax.random.split(jax.random.key(0), 4)
    return {
        "embed": jax.random.normal(keys[0], (VOCAB, WIDTH)) / 16,
        "layers": jax.random.normal(keys[1], (LAYERS, WIDTH, WIDTH)) / 16,
        "head": jax.random.normal(keys[2], (WIDTH, VOCAB)) / 16,
        "bias": jnp.zeros(WIDTH),
    }


def loss_fn(p: dict, tokens: jax.Array) -> jax.Array:
    h = p["embed"][tokens] + p["bias"]
    for i in range(LAYERS):
        h = h + jnp.tanh(h @ p["layers"][i])
    logits = h @ p["head"]
    return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(tokens.size), tokens])


def optimizers() -> dict:
    return {
        "adamw": gradax.adamw(1e-3, weight_decay=0.1),
        "muon": gradax.muon(0.02, muon_weight_dimension_numbers="auto"),
    }


def count(hlo: str) -> dict[str, int]:
    return {k: len(re.findall(rf"\s{k}(?:-start)?\(", hlo)) for k in KINDS}


def all_reduced_grads(p, t):
    """Plain data parallelism's gradient: each device's own, averaged."""

    def local(p, t):
        # Differentiate a varying copy: the gradient with respect to a
        # replicated input would come back already summed over the axis.
        p = jax.tree.map(lambda x: jax.lax.pcast(x, "data", to="varying"), p)
        return jax.lax.pmean(jax.grad(loss_fn)(p, t), "data")

    return jax.shard_map(local, in_specs=(P(), P("data")), out_specs=P())(p, t)


def reduce_scattered_grads(p, t):
    return gradax.sharding.data_parallel_value_and_grad(loss_fn)(p, t)[1]


def measure(tx, mesh, grads_fn=all_reduced_grads) -> dict:
    replicated = jax.NamedSharding(mesh, P())
    params = jax.device_put(make_params(), replicated)
    tokens = jax.device_put(
        jnp.arange(BATCH) % VOCAB, jax.NamedSharding(mesh, P("data"))
    )
    state = jax.jit(tx.init)(params)

    @jax.jit
    def step(p, s, t):
        grads = grads_fn(p, t)
        updates, s = tx.update(grads, s, p)
        return gradax.apply_updates(p, updates), s

    hlo = step.lower(params, state, tokens).compile().as_text()
    per_device: dict = {}
    for leaf in jax.tree.leaves(state):
        for shard in leaf.addressable_shards:
            per_device[shard.device] = per_device.get(shard.device, 0) + (
                shard.data.nbytes
            )
    whole = sum(leaf.nbytes for leaf in jax.tree.leaves(state))
    received = collective_bytes(hlo, mesh.size)
    return {
        "state_bytes_whole": int(whole),
        "state_bytes_per_device": int(max(per_device.values())),
        "collectives": count(hlo),
        "received_bytes": {k: int(v) for k, v in received.items()},
    }


def run() -> dict:
    mesh = jax.make_mesh((8,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    results = {}
    with jax.set_mesh(mesh):
        for name, tx in optimizers().items():
            results[name] = {
                "data parallel": measure(tx, mesh),
                "zero-1": measure(gradax.shard_state(tx, axis="data"), mesh),
                "zero-1 rs": measure(
                    gradax.shard_state(tx, axis="data"), mesh, reduce_scattered_grads
                ),
            }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    params = sum(x.size for x in jax.tree.leaves(make_params()))
    print(f"{params} parameters (float32), 8 devices on one 'data' axis")
    results = run()
    for name, forms in results.items():
        for form, r in forms.items():
            ops = ", ".join(f"{k} {v}" for k, v in r["collectives"].items() if v)
            received = ", ".join(
                f"{k} {v / 2**20:.2f} MiB" for k, v in r["received_bytes"].items()
            )
            print(
                f"{name:6s} {form:13s} state/device "
                f"{r['state_bytes_per_device'] / 2**20:6.2f} MiB "
                f"(whole {r['state_bytes_whole'] / 2**20:.2f} MiB) | ops: {ops} "
                f"| received/device: {received} "
                f"(total {sum(r['received_bytes'].values()) / 2**20:.2f} MiB)"
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
