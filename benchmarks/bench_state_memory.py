"""Optimizer state bytes per parameter and step time: 8-bit, Adam-mini, float32.

On the GPT-like bench tree, for chain(clip_by_global_norm, adamw) with
float32 moments (gradax and optax), with both moments 8-bit blockwise
(``gradax.int8_blockwise()``), and for Adam-mini (float32 and 8-bit first
moment; embedding full, other matrices one value per output neuron). State
bytes count every array of the state (codes, scales, step counts). Step times
are measured side by side in one run (``time_interleaved``); the ratio to
float32 gradax is the figure to read, not the absolute times.
``--quick`` uses a 1-layer tree and fewer rounds.

Run: python benchmarks/bench_state_memory.py [--quick] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import jax

sys.path.insert(0, str(Path(__file__).parent))
from common import (  # noqa: E402
    count_params,
    fake_grads,
    gpt_like_params,
    optional_optax,
    time_interleaved,
)

import gradax  # noqa: E402


def _bytes(state) -> int:
    return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state))


def candidates(optax):
    q8 = gradax.int8_blockwise()
    clip = gradax.clip_by_global_norm(1.0)

    def mini(**kwargs):
        def partition(params):
            return {
                k: "full" if k == "embed" else ("neuron" if p.ndim >= 2 else "tensor")
                for k, p in params.items()
            }

        return gradax.chain(clip, gradax.adam_mini(1e-3, partition=partition, **kwargs))

    out = {
        "gradax adamw f32": gradax.chain(clip, gradax.adamw(1e-3)),
        "gradax adamw 8-bit": gradax.chain(
            clip, gradax.adamw(1e-3, mu_dtype=q8, nu_dtype=q8)
        ),
        "gradax adam_mini f32": mini(),
        "gradax adam_mini 8-bit mu": mini(mu_dtype=q8),
    }
    if optax is not None:
        out["optax adamw f32"] = optax.chain(
            optax.clip_by_global_norm(1.0), optax.adamw(1e-3)
        )
    return out


def run(quick: bool = False) -> dict:
    optax = optional_optax()
    params = gpt_like_params(layers=1 if quick else 6)
    grads = fake_grads(params)
    n = count_params(params)
    fns, per_param = {}, {}
    for name, tx in candidates(optax).items():
        state = tx.init(params)
        per_param[name] = _bytes(state) / n
        step = jax.jit(lambda g, s, p, tx=tx: tx.update(g, s, p))
        fns[name] = lambda step=step, state=state: step(grads, state, params)
    times = time_interleaved(fns, repeats=6 if quick else 30)
    base = times["gradax adamw f32"]
    return {
        "benchmark": "optimizer state memory and step time",
        "params": n,
        "device": str(jax.devices()[0]),
        "state_bytes_per_param": per_param,
        "seconds": times,
        "time_over_gradax_f32": {k: t / base for k, t in times.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = run(args.quick)
    print(f"{result['benchmark']} on {result['params']:,} parameters")
    print(f"  {'':28s} {'bytes/param':>12s} {'ms/step':>9s} {'x f32':>7s}")
    for name, seconds in result["seconds"].items():
        print(
            f"  {name:28s} {result['state_bytes_per_param'][name]:12.3f} "
            f"{seconds * 1e3:9.3f} {result['time_over_gradax_f32'][name]:7.2f}"
        )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
