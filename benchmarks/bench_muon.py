"""Time one Muon update: gradax against optax.contrib.muon and the matmul floor.

The tree is GPT-like: d=256, 6 layers of qkv/proj/up/down, a 512x256
embedding. Both libraries route the same leaves (every 2-D leaf) to Muon.
The floor is the plain Newton–Schulz FLOPs of all matrices divided by the
machine's measured matmul throughput (a 1024^3 float32 matmul, timed in the
same run); Gram Newton–Schulz needs fewer FLOPs, so gradax can beat it.
``--quick`` uses 1 layer and leaves out the plain Newton–Schulz variant.

Run: python benchmarks/bench_muon.py [--quick] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).parent))
from common import fake_grads, normal_tree, optional_optax, time_interleaved  # noqa: E402

import gradax  # noqa: E402
from gradax.orthogonal.newton_schulz import newton_schulz_flops  # noqa: E402


def muon_tree(d: int = 256, layers: int = 6, vocab: int = 512) -> dict:
    shapes = {"embed": (vocab, d)}
    for i in range(layers):
        shapes |= {
            f"layer{i}/qkv": (d, 3 * d),
            f"layer{i}/proj": (d, d),
            f"layer{i}/up": (d, 4 * d),
            f"layer{i}/down": (4 * d, d),
        }
    return normal_tree(shapes)


# Quick mode: 1 layer instead of 6 (the compile time goes with the number of
# distinct shapes and leaves) and no plain Newton-Schulz variant.
QUICK_LAYERS = 1


def run(quick: bool = False) -> dict:
    import warnings

    optax = optional_optax()

    # Like optax, route the embedding to Muon here, knowingly.
    warnings.filterwarnings("ignore", message="gradax.muon routes")

    layers = QUICK_LAYERS if quick else 6
    params = muon_tree(layers=layers)
    grads = fake_grads(params)
    candidates = {"gradax": gradax.muon(0.02)}
    if not quick:
        candidates["gradax_ns"] = gradax.muon(0.02, method="ns")
    if optax is not None:
        candidates["optax"] = optax.contrib.muon(0.02)
    fns = {}
    for name, tx in candidates.items():
        step, state = jax.jit(tx.update), tx.init(params)
        fns[name] = lambda step=step, state=state: step(grads, state, params)
    size = 1024
    a = jnp.ones((size, size), jnp.float32)
    matmul = jax.jit(lambda a: a @ a)
    fns["matmul_1024"] = lambda: matmul(a)
    times = time_interleaved(fns, repeats=3 if quick else 15, inner=1 if quick else 2)
    flops_per_second = 2 * size**3 / times.pop("matmul_1024")
    ns_flops = sum(newton_schulz_flops(*p.shape, 5) for p in params.values())
    floor = ns_flops / flops_per_second
    result = {
        "benchmark": (
            f"muon update, GPT-like tree (d=256, {layers} layers, 512x256 embed)"
        ),
        "device": str(jax.devices()[0]),
        "seconds": times,
        "matmul_gflops": flops_per_second / 1e9,
        "newton_schulz_gflop": ns_flops / 1e9,
        "matmul_floor_seconds": floor,
        "ratio_gradax_over_optax": (
            times["gradax"] / times["optax"] if optax is not None else None
        ),
        "gradax_fraction_of_floor": floor / times["gradax"],
    }
    if "gradax_ns" in times:
        result["gradax_ns_fraction_of_floor"] = floor / times["gradax_ns"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    r = run(args.quick)
    print(r["benchmark"], "on", r["device"])
    for name, seconds in r["seconds"].items():
        print(f"  {name:10s} {seconds * 1e3:9.2f} ms")
    print(
        f"  matmul floor {r['matmul_floor_seconds'] * 1e3:9.2f} ms "
        f"({r['newton_schulz_gflop']:.1f} GFLOP at {r['matmul_gflops']:.1f} GFLOP/s)"
    )
    if r["ratio_gradax_over_optax"] is None:
        print("  optax is not installed; its columns are left out")
    else:
        print(f"  gradax/optax: {r['ratio_gradax_over_optax']:.3f}")
    plain = r.get("gradax_ns_fraction_of_floor")
    print(
        f"  floor/gradax: {r['gradax_fraction_of_floor']:.2f}"
        + ("" if plain is None else f" (plain NS: {plain:.2f})")
    )
    if args.json:
        args.json.write_text(json.dumps(r, indent=2))


if __name__ == "__main__":
    main()
