"""Time one update of chain(clip_by_global_norm, adamw): gradax against optax.

The floor is memory bandwidth: the update streams 8 float32 arrays of the
tree's size (the gradients twice: once for the global norm, once for the
update; both moments read and written; the parameters read; the updates
written). The machine's bandwidth is measured in the same run with a jitted
``a = a + b`` (``a`` donated) on arrays four times the tree's size (past the
caches). Without optax installed, the optax columns are left out.
``--quick`` uses a 1-layer tree (about 0.9M parameters) and fewer rounds.

Run: python benchmarks/bench_adamw.py [--quick] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).parent))
from common import (  # noqa: E402
    count_params,
    fake_grads,
    gpt_like_params,
    optional_optax,
    time_interleaved,
)

import gradax  # noqa: E402


def make_step(tx):
    @jax.jit
    def step(grads, state, params):
        return tx.update(grads, state, params)

    return step


def run(quick: bool = False) -> dict:
    optax = optional_optax()
    params = gpt_like_params(layers=1 if quick else 6)
    grads = fake_grads(params)
    candidates = {
        "gradax": gradax.chain(gradax.clip_by_global_norm(1.0), gradax.adamw(1e-3)),
    }
    if optax is not None:
        candidates["optax"] = optax.chain(
            optax.clip_by_global_norm(1.0), optax.adamw(1e-3)
        )
    fns = {}
    for name, tx in candidates.items():
        step, state = make_step(tx), tx.init(params)
        fns[name] = lambda step=step, state=state: step(grads, state, params)
    n = count_params(params)
    # The sum is written over its first operand (donated), so no call pays
    # for a fresh allocation's page faults.
    box = [jnp.ones(4 * n, jnp.float32)]
    b = jnp.full(4 * n, 2.0, jnp.float32)
    add = jax.jit(lambda a, b: a + b, donate_argnums=0)

    def stream():
        box[0] = add(box[0], b)
        return box[0]

    fns["stream"] = stream
    times = time_interleaved(fns, repeats=6 if quick else 40)
    bandwidth = 3 * b.nbytes / times.pop("stream")  # two reads, one write
    floor = 8 * 4 * n / bandwidth
    result = {
        "benchmark": "chain(clip_by_global_norm, adamw) update",
        "params": n,
        "device": str(jax.devices()[0]),
        "seconds": times,
        "ratio_gradax_over_optax": (
            times["gradax"] / times["optax"] if optax is not None else None
        ),
        "bandwidth_gbps": bandwidth / 1e9,
        "bandwidth_floor_seconds": floor,
        "gradax_fraction_of_floor": floor / times["gradax"],
    }
    if optax is None:
        result["note"] = "optax is not installed; its columns are left out"
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = run(args.quick)
    print(f"{result['benchmark']} on {result['params']:,} parameters")
    for name, seconds in result["seconds"].items():
        print(f"  {name:8s} {seconds * 1e3:8.3f} ms")
    print(
        f"  bandwidth floor {result['bandwidth_floor_seconds'] * 1e3:.3f} ms "
        f"({result['bandwidth_gbps']:.1f} GB/s); "
        f"floor/gradax {result['gradax_fraction_of_floor']:.2f}"
    )
    if result["ratio_gradax_over_optax"] is None:
        print(f"  {result['note']}")
    else:
        print(f"  ratio gradax/optax: {result['ratio_gradax_over_optax']:.3f}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
