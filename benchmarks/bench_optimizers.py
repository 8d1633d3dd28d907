"""Update time of the elementwise optimizers: gradax, optax and the bandwidth floor.

For adam, adamw, lion, adafactor and sgd+momentum on the ~5M-parameter
GPT-like tree, one jitted ``update`` of each library is timed side by side.
The floor is the bytes the update must read and write (gradients, params
where used, and every state buffer read and written, plus the updates
written) divided by the machine's copy bandwidth, measured in the same run.

Run: python benchmarks/bench_optimizers.py [--quick] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).parent))
from common import count_params, gpt_like_params, time_interleaved  # noqa: E402

import gradax  # noqa: E402


def _state_bytes(state) -> int:
    return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state))


def run(quick: bool = False) -> dict:
    import optax

    params = gpt_like_params()
    grads = jax.tree.map(lambda p: 0.1 * p + 1e-3, params)
    param_bytes = sum(p.size * p.dtype.itemsize for p in jax.tree.leaves(params))
    pairs = {
        "adam": (gradax.adam(1e-3), optax.adam(1e-3), False),
        "adamw": (gradax.adamw(1e-3), optax.adamw(1e-3), True),
        "lion": (gradax.lion(1e-4), optax.lion(1e-4), False),
        "adafactor": (gradax.adafactor(1e-3), optax.adafactor(1e-3), True),
        "sgd_momentum": (
            gradax.sgd(1e-2, momentum=0.9),
            optax.sgd(1e-2, momentum=0.9),
            False,
        ),
    }
    # Read and write 128 MiB, writing back into the input's buffer (a fresh
    # output buffer each call would time page faults, not bandwidth).
    copy = jax.jit(lambda x: x + 1.0, donate_argnums=0)
    holder = {"big": jnp.ones((32 * 1024 * 1024,), jnp.float32)}
    big_size = holder["big"].size

    def copy_once():
        holder["big"] = copy(holder["big"])
        return holder["big"]

    fns = {"copy_128MiB": copy_once}
    floors_bytes = {}
    for name, (ours, theirs, reads_params) in pairs.items():
        for lib, tx in (("gradax", ours), ("optax", theirs)):
            state = tx.init(params)
            step = jax.jit(tx.update)
            fns[f"{name}/{lib}"] = lambda step=step, s=state: step(grads, s, params)
        state = ours.init(params)
        # grads read + updates written (+ params read) + state read and written.
        floors_bytes[name] = (
            2 * param_bytes
            + (param_bytes if reads_params else 0)
            + 2 * _state_bytes(state)
        )
    times = time_interleaved(fns, repeats=5 if quick else 20, inner=3)
    bandwidth = 2 * big_size * 4 / times.pop("copy_128MiB")
    rows = {}
    for name in pairs:
        floor = floors_bytes[name] / bandwidth
        rows[name] = {
            "gradax_ms": times[f"{name}/gradax"] * 1e3,
            "optax_ms": times[f"{name}/optax"] * 1e3,
            "floor_ms": floor * 1e3,
            "gradax_over_optax": times[f"{name}/gradax"] / times[f"{name}/optax"],
            "gradax_over_floor": times[f"{name}/gradax"] / floor,
        }
    return {
        "benchmark": "optimizer update, GPT-like tree",
        "params": count_params(params),
        "device": str(jax.devices()[0]),
        "copy_bandwidth_gb_s": bandwidth / 1e9,
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    r = run(args.quick)
    print(
        f"{r['benchmark']} ({r['params']:,} params) on {r['device']}, "
        f"copy bandwidth {r['copy_bandwidth_gb_s']:.1f} GB/s"
    )
    print(
        f"  {'optimizer':14s} {'gradax ms':>10s} {'optax ms':>10s} {'floor ms':>9s} "
        f"{'g/optax':>8s} {'g/floor':>8s}"
    )
    for name, row in r["rows"].items():
        print(
            f"  {name:14s} {row['gradax_ms']:10.2f} {row['optax_ms']:10.2f} "
            f"{row['floor_ms']:9.2f} {row['gradax_over_optax']:8.3f} "
            f"{row['gradax_over_floor']:8.2f}"
        )
    if args.json:
        args.json.write_text(json.dumps(r, indent=2))


if __name__ == "__main__":
    main()
