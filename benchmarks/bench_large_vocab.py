"""Cross-entropy over a large vocabulary: peak memory and time of fwd+bwd.

For ``tokens`` hidden states of width ``dim`` and an output projection
``(dim, vocab)``, each candidate computes ``value_and_grad`` of the mean
per-token loss with respect to the hidden states and the weights:

- ``optax``: ``optax.softmax_cross_entropy_with_integer_labels(h @ w, y)``;
- ``chunked``: gradax's chunked loss on ``h @ w`` (the logits exist; the
  float32 log-probabilities do not);
- ``fused``: ``gradax.losses.fused_linear_softmax_cross_entropy(h, w, y)``
  (the logits never exist whole).

Memory is read from the compiled program (``memory_analysis()``: temporary
buffers, and temporaries plus arguments plus outputs), which needs no run
and no memory, so it is reported for every size. Timing runs the programs:
the optax formulation at vocab 128k holds about 8 GiB of temporaries, so
sizes to time are chosen with ``--time-sizes`` (by default those where
the largest program fits in half of the memory ``free`` calls available).
``--quick`` is 2048 tokens at vocab 32k. Times are
medians of interleaved rounds after a warm-up call, reported as ratios to
optax.

Run: python benchmarks/bench_large_vocab.py [--quick] [--sizes 32768,131072]
     [--time-sizes 32768] [--tokens 8192] [--dim 1024] [--repeats 3]
     [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import optional_optax, time_interleaved  # noqa: E402

from gradax.losses import (  # noqa: E402
    chunked_softmax_cross_entropy_with_integer_labels,
    fused_linear_softmax_cross_entropy,
)

MiB = 2**20


def candidates(optax):
    fns = {}
    if optax is not None:
        fns["optax"] = lambda h, w, y: optax.softmax_cross_entropy_with_integer_labels(
            h @ w, y
        ).mean()
    fns["fused"] = lambda h, w, y: fused_linear_softmax_cross_entropy(h, w, y).mean()
    fns["chunked"] = lambda h, w, y: chunked_softmax_cross_entropy_with_integer_labels(
        h @ w, y
    ).mean()
    return {
        name: jax.jit(jax.value_and_grad(fn, argnums=(0, 1)))
        for name, fn in fns.items()
    }


def available_bytes() -> int:
    """MemAvailable from /proc/meminfo (what ``free`` calls available)."""
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def memory(fns, tokens, dim, vocab, dtype):
    """Compile-time memory of each candidate, in bytes."""
    shapes = (
        jax.ShapeDtypeStruct((tokens, dim), dtype),
        jax.ShapeDtypeStruct((dim, vocab), dtype),
        jax.ShapeDtypeStruct((tokens,), jnp.int32),
    )
    out = {}
    for name, fn in fns.items():
        stats = fn.lower(*shapes).compile().memory_analysis()
        temp = stats.temp_size_in_bytes
        total = (
            temp
            + stats.argument_size_in_bytes
            + stats.output_size_in_bytes
            - stats.alias_size_in_bytes
        )
        out[name] = {"temp": temp, "total": total}
    return out


def timing(fns, tokens, dim, vocab, dtype, repeats):
    rng = np.random.default_rng(0)
    h = jnp.asarray(rng.standard_normal((tokens, dim), np.float32), dtype)
    w = jnp.asarray(0.02 * rng.standard_normal((dim, vocab), np.float32), dtype)
    y = jnp.asarray(rng.integers(0, vocab, tokens), jnp.int32)
    calls = {name: (lambda fn=fn: fn(h, w, y)) for name, fn in fns.items()}
    return time_interleaved(calls, repeats=repeats, inner=1)


def run(args) -> dict:
    optax = optional_optax()
    fns = candidates(optax)
    dtype = jnp.dtype(args.dtype)
    results = []
    for vocab in args.sizes:
        entry = {
            "vocab": vocab,
            "memory_bytes": memory(fns, args.tokens, args.dim, vocab, dtype),
        }
        mem = entry["memory_bytes"]
        if optax is not None:
            entry["memory_ratio_to_optax"] = {
                name: {k: mem[name][k] / mem["optax"][k] for k in ("temp", "total")}
                for name in fns
            }
        timed = (
            vocab in args.time_sizes
            if args.time_sizes is not None
            else max(m["total"] for m in mem.values()) < available_bytes() // 2
        )
        if timed:
            seconds = timing(fns, args.tokens, args.dim, vocab, dtype, args.repeats)
            entry["seconds"] = seconds
            if optax is not None:
                entry["time_ratio_to_optax"] = {
                    name: s / seconds["optax"] for name, s in seconds.items()
                }
        else:
            entry["seconds"] = None
            entry["note"] = "not timed: memory (see the module docstring)"
        results.append(entry)
    return {
        "benchmark": "value_and_grad of mean softmax cross-entropy of h @ w",
        "tokens": args.tokens,
        "dim": args.dim,
        "dtype": str(dtype),
        "device": str(jax.devices()[0]),
        "results": results,
    }


def report(result: dict) -> None:
    print(
        f"{result['benchmark']}: tokens={result['tokens']} dim={result['dim']} "
        f"{result['dtype']} on {result['device']}"
    )
    for entry in result["results"]:
        print(f"  vocab {entry['vocab']}:")
        ratios = entry.get("memory_ratio_to_optax", {})
        times = entry["seconds"] or {}
        time_ratios = entry.get("time_ratio_to_optax", {})
        for name, mem in entry["memory_bytes"].items():
            line = (
                f"    {name:8s} temp {mem['temp'] / MiB:8.0f} MiB"
                f"  total {mem['total'] / MiB:8.0f} MiB"
            )
            if name in ratios:
                r = ratios[name]
                line += f"  (x{r['temp']:.3f} / x{r['total']:.3f} of optax)"
            if name in times:
                line += f"  {times[name]:8.3f} s"
                if name in time_ratios:
                    line += f" (x{time_ratios[name]:.2f})"
            print(line)
        if "note" in entry:
            print(f"    {entry['note']}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )

    def sizes(text):
        return [int(s) for s in text.split(",") if s]

    parser.add_argument("--quick", action="store_true", help="2048 tokens, 32k")
    parser.add_argument("--sizes", type=sizes, default=None, help="vocab sizes")
    parser.add_argument("--time-sizes", type=sizes, default=None)
    parser.add_argument("--tokens", type=int, default=None)
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.sizes is None:
        args.sizes = [32768] if args.quick else [32768, 131072]
    if args.tokens is None:
        args.tokens = 2048 if args.quick else 8192
    if args.repeats is None:
        args.repeats = 2 if args.quick else 3
    result = run(args)
    report(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
