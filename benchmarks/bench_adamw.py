"""Time one update of chain(clip_by_global_norm, adamw): gradax against optax.

Run: python benchmarks/bench_adamw.py [--quick] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import jax

sys.path.insert(0, str(Path(__file__).parent))
from common import count_params, gpt_like_params, time_interleaved  # noqa: E402

import gradax  # noqa: E402


def make_step(tx):
    @jax.jit
    def step(grads, state, params):
        return tx.update(grads, state, params)

    return step


def run(quick: bool = False) -> dict:
    import optax

    params = gpt_like_params()
    grads = jax.tree.map(lambda p: 0.1 * p + 1e-3, params)
    candidates = {
        "gradax": gradax.chain(gradax.clip_by_global_norm(1.0), gradax.adamw(1e-3)),
        "optax": optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3)),
    }
    fns = {}
    for name, tx in candidates.items():
        step, state = make_step(tx), tx.init(params)
        fns[name] = lambda step=step, state=state: step(grads, state, params)
    times = time_interleaved(fns, repeats=10 if quick else 40)
    return {
        "benchmark": "chain(clip_by_global_norm, adamw) update",
        "params": count_params(params),
        "device": str(jax.devices()[0]),
        "seconds": times,
        "ratio_gradax_over_optax": times["gradax"] / times["optax"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = run(args.quick)
    print(f"{result['benchmark']} on {result['params']:,} parameters")
    for name, seconds in result["seconds"].items():
        print(f"  {name:8s} {seconds * 1e3:8.3f} ms")
    print(f"  ratio gradax/optax: {result['ratio_gradax_over_optax']:.3f}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
