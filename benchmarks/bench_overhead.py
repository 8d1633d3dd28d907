"""Trace, compile and dispatch time of gradax against optax, as ratios.

What a step costs besides its arithmetic: building the program (tracing
``update`` under ``jit``: gradax's checks, schedule resolution and state
guard run here, once), compiling it, and calling the compiled step on
parameters so small that the call is all overhead. Each figure is the median
of interleaved gradax/optax repeats in one process, and the report gives
gradax / optax, so the machine's load cancels to first order.

To compare two gradax checkouts (issue 25: "no worse"), run this once with
each on the import path, alternating, and compare the ratios:

    PYTHONPATH=/path/to/old python benchmarks/bench_overhead.py --json old.json
    python benchmarks/bench_overhead.py --json new.json

Run: python benchmarks/bench_overhead.py [--repeats N] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import optax

import gradax


def _cases() -> dict[str, tuple[Callable[[], Any], Callable[[], Any]]]:
    return {
        "adamw": (lambda: gradax.adamw(1e-3), lambda: optax.adamw(1e-3)),
        "sgd_momentum": (
            lambda: gradax.sgd(1e-2, momentum=0.9),
            lambda: optax.sgd(1e-2, momentum=0.9),
        ),
        "clip_adamw_schedule": (
            lambda: gradax.chain(
                gradax.clip_by_global_norm(1.0),
                gradax.adamw(gradax.cosine_decay_schedule(1e-3, 100)),
            ),
            lambda: optax.chain(
                optax.clip_by_global_norm(1.0),
                optax.adamw(optax.cosine_decay_schedule(1e-3, 100)),
            ),
        ),
        "muon": (
            lambda: gradax.contrib.muon(0.02),
            lambda: optax.contrib.muon(0.02),
        ),
    }


def _transformer_params(layers: int = 48, width: int = 16) -> dict[str, Any]:
    """A 434-leaf tree shaped like a transformer's: where tracing cost shows."""
    ones = jax.numpy.ones
    params: dict[str, Any] = {
        "embed": ones((64, width)),
        "head": ones((width, 64)),
    }
    for i in range(layers):
        params[f"layer{i}"] = {
            **{name: ones((width, width)) for name in ("q", "k", "v", "o")},
            "up": ones((width, 4 * width)),
            "down": ones((4 * width, width)),
            **{name: ones(width) for name in ("norm1", "norm2", "bias")},
        }
    return params


def count_entries(make: Callable[[], Any], params: Any) -> dict[str, int]:
    """Per traced step: ``update`` entries, and those that ran the tree checks."""
    from gradax._core import protocol as _protocol

    counts = {"update": 0, "checked": 0}
    update = _protocol.GradientTransformation.update
    difference = _protocol.tree_difference

    def counting_update(self, *args, **kwargs):
        counts["update"] += 1
        return update(self, *args, **kwargs)

    def counting_difference(*args, **kwargs):
        counts["checked"] += 1
        return difference(*args, **kwargs)

    tx = make()
    state = tx.init(params)
    _protocol.GradientTransformation.update = counting_update  # type: ignore[method-assign]
    _protocol.tree_difference = counting_difference
    try:
        jax.jit(tx.update).trace(params, state, params)
    finally:
        _protocol.GradientTransformation.update = update  # type: ignore[method-assign]
        _protocol.tree_difference = difference
    return counts


def _params(width: int) -> dict[str, jax.Array]:
    keys = jax.random.split(jax.random.key(0), 3)
    return {
        "w1": jax.random.normal(keys[0], (width, width)),
        "w2": jax.random.normal(keys[1], (width, width)),
        "b": jax.random.normal(keys[2], (width,)),
    }


def _measure(make: Callable[[], Any], params: Any, tiny: Any) -> dict[str, float]:
    tx = make()

    def step(p, s, g):
        updates, s = tx.update(g, s, p)
        return optax.apply_updates(p, updates), s

    state = tx.init(params)
    t0 = time.perf_counter()
    lowered = jax.jit(step).lower(params, state, params)
    t1 = time.perf_counter()
    lowered.compile()
    t2 = time.perf_counter()
    tiny_state = tx.init(tiny)
    compiled = jax.jit(step).lower(tiny, tiny_state, tiny).compile()
    p, s = tiny, tiny_state
    for _ in range(5):  # warm up
        p, s = compiled(p, s, tiny)
    jax.block_until_ready(p)
    calls = 200
    t3 = time.perf_counter()
    for _ in range(calls):
        p, s = compiled(p, s, tiny)
    jax.block_until_ready(p)
    t4 = time.perf_counter()
    return {
        "trace_s": t1 - t0,
        "compile_s": t2 - t1,
        "dispatch_us": (t4 - t3) / calls * 1e6,
    }


def run(repeats: int = 5, tree: str = "transformer") -> dict[str, Any]:
    params = _transformer_params() if tree == "transformer" else _params(256)
    tiny = _params(4)
    results: dict[str, Any] = {}
    for name, (make_gradax, make_optax) in _cases().items():
        samples: dict[str, dict[str, list[float]]] = {"gradax": {}, "optax": {}}
        for _ in range(repeats):
            for lib, make in (("gradax", make_gradax), ("optax", make_optax)):
                jax.clear_caches()  # each repeat traces and compiles afresh
                for key, value in _measure(make, params, tiny).items():
                    samples[lib].setdefault(key, []).append(value)
        medians = {
            lib: {k: statistics.median(v) for k, v in by_key.items()}
            for lib, by_key in samples.items()
        }
        ratios = {
            k: medians["gradax"][k] / medians["optax"][k] for k in medians["optax"]
        }
        results[name] = {
            "medians": medians,
            "gradax_over_optax": ratios,
            "entries": count_entries(make_gradax, params),
        }
    return {
        "leaves": len(jax.tree.leaves(params)),
        "jax": jax.__version__,
        "gradax": getattr(gradax, "__version__", "?"),
        "gradax_path": gradax.__file__,
        "repeats": repeats,
        "cases": results,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default=None)
    parser.add_argument(
        "--tree",
        choices=("transformer", "small"),
        default="transformer",
        help="trace and compile a 434-leaf transformer-shaped tree, or 3 leaves",
    )
    args = parser.parse_args()
    result = run(args.repeats, args.tree)
    print(
        f"gradax from {result['gradax_path']}, jax {result['jax']}, "
        f"{result['leaves']} leaves"
    )
    print(
        f"{'case':22} {'trace':>8} {'compile':>8} {'dispatch':>9}  (gradax / optax)"
        "  update entries (checked)"
    )
    for name, case in result["cases"].items():
        r, e = case["gradax_over_optax"], case["entries"]
        print(
            f"{name:22} {r['trace_s']:8.2f} {r['compile_s']:8.2f} "
            f"{r['dispatch_us']:9.2f}  {e['update']:>14} ({e['checked']})"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
