"""Time one update of chain(clip_by_global_norm, adamw): gradax, optax, torch.

The floor is memory bandwidth: the update streams 8 float32 arrays of the
tree's size (the gradients twice: once for the global norm, once for the
update; both moments read and written; the parameters read; the updates
written). The machine's bandwidth is measured in the same run with a jitted
``a = a + b`` (``a`` donated) on arrays four times the tree's size (past the
caches). References that are not installed are left out.

torch, where installed, runs ``clip_grad_norm_`` and ``AdamW(foreach=True)``
(its multi-tensor path; the CPU default is a slower per-tensor loop) on the
same tensors with as many threads as JAX. Its ``step()`` also writes the
parameters, which gradax's and optax's ``update`` leave to
``apply_updates``: two more arrays of traffic, about a quarter more.
``--quick`` uses a 1-layer tree (about 0.9M parameters) and fewer rounds.

Run: python benchmarks/bench_adamw.py [--quick] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

import gradax

from .common import (
    comparisons_against,
    count_params,
    cpu_threads,
    fake_grads,
    gpt_like_params,
    optional_optax,
    optional_torch,
    time_interleaved,
    to_torch,
)


def make_step(tx):
    @jax.jit
    def step(grads, state, params):
        return tx.update(grads, state, params)

    return step


def torch_step(torch, params, grads):
    """A no-argument call of torch's clip + AdamW step on copies of the tree."""
    tensors, grad_tensors = to_torch(torch, params), to_torch(torch, grads)
    for name, tensor in tensors.items():
        tensor.grad = grad_tensors[name]
    leaves = list(tensors.values())
    # optax's adamw defaults (torch's weight decay default is 1e-2).
    opt = torch.optim.AdamW(
        leaves, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-4, foreach=True
    )

    def call():
        torch.nn.utils.clip_grad_norm_(leaves, 1.0, foreach=True)
        opt.step()

    return call


def run(quick: bool = False) -> dict:
    optax, torch = optional_optax(), optional_torch()
    params = gpt_like_params(layers=1 if quick else 6)
    grads = fake_grads(params)
    candidates = {
        "gradax": gradax.chain(gradax.clip_by_global_norm(1.0), gradax.adamw(1e-3)),
    }
    if optax is not None:
        candidates["optax"] = optax.chain(
            optax.clip_by_global_norm(1.0), optax.adamw(1e-3)
        )
    fns: dict[str, Callable[[], Any]] = {}
    for name, tx in candidates.items():
        step, state = make_step(tx), tx.init(params)
        fns[name] = lambda step=step, state=state: step(grads, state, params)
    if torch is not None:
        fns["torch"] = torch_step(torch, params, grads)
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
    label = f"clip+adamw {n / 1e6:.1f}M"
    result = {
        "benchmark": "chain(clip_by_global_norm, adamw) update",
        "params": n,
        "device": str(jax.devices()[0]),
        "threads": cpu_threads(),
        "seconds": times,
        "ratio_gradax_over_optax": (
            times["gradax"] / times["optax"] if optax is not None else None
        ),
        "bandwidth_gbps": bandwidth / 1e9,
        "bandwidth_floor_seconds": floor,
        "gradax_fraction_of_floor": floor / times["gradax"],
        "comparisons": comparisons_against(
            label, times, ["optax", "torch"], "bandwidth", floor
        ),
        "notes": [f"adamw floor: 8 arrays of the tree at {bandwidth / 1e9:.1f} GB/s"],
    }
    if torch is not None:
        result["notes"].append(
            "adamw vs torch: clip_grad_norm_ + AdamW(foreach=True); its step() "
            "also writes the parameters (about a quarter more traffic)"
        )
    return result


def main() -> None:
    """Print the timings (``--json FILE`` writes them too)."""
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
    for row in result["comparisons"]:
        if row["reference"] is not None:
            print(f"  ratio gradax/{row['reference']}: {row['ratio']:.3f}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
