"""What one update costs in Python, against optax: calls, constructions, trace.

Issue 45's figures, side by side with optax in one process:

- library calls per eager update: the function calls made in the library's
  own files (gradax's or optax's) during the second eager ``update`` of the
  same transformation (the first one warms caches);
- transformations built while tracing ``update`` under ``jit`` with the
  transformation as an argument (JAX unflattens it there): an optimizer that
  holds its parts builds none;
- trace time of that step, as the median of interleaved repeats, reported
  as gradax / optax: gradax's closed over as optax's is ("trace"), and
  gradax's a ``jit`` argument ("as arg"; optax's functions cannot be one).

On a small transformer-shaped tree (10 leaves) and on the 434-leaf tree of
``bench_overhead.py``. To compare two checkouts, run it with each on the
import path (``PYTHONPATH=/path/to/old python benchmarks/bench_core_cost.py``).

Run: python benchmarks/bench_core_cost.py [--repeats N] [--json FILE]
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import optax

import gradax
from gradax._core.pytree import ModuleMeta

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_overhead import _cases, _transformer_params  # noqa: E402


def _small_tree() -> dict[str, Any]:
    """10 leaves: an embedding, two attention/MLP matrices, norms, a head."""
    ones = jnp.ones
    return {
        "embed": ones((64, 32)),
        "q": ones((32, 32)),
        "k": ones((32, 32)),
        "v": ones((32, 32)),
        "o": ones((32, 32)),
        "up": ones((32, 128)),
        "down": ones((128, 32)),
        "norm1": ones(32),
        "norm2": ones(32),
        "head": ones((32, 64)),
    }


def _library_calls(tx: Any, params: Any, root: str) -> dict[str, int]:
    """Calls in files under ``root`` during the second eager update."""
    state = tx.init(params)
    _, state = tx.update(params, state, params)  # the first warms caches
    calls: collections.Counter[str] = collections.Counter()

    def profile(frame, event, arg):
        del arg
        if event == "call" and frame.f_code.co_filename.startswith(root):
            calls[f"{frame.f_code.co_filename}:{frame.f_code.co_name}"] += 1

    sys.setprofile(profile)
    try:
        tx.update(params, state, params)
    finally:
        sys.setprofile(None)
    files = {key.rsplit(":", 1)[0] for key in calls}
    return {"calls": sum(calls.values()), "functions": len(calls), "files": len(files)}


def _constructions_in_trace(tx: Any, params: Any) -> int:
    """gradax transformations built while tracing update, tx an argument."""
    state = tx.init(params)
    made = [0]
    original = ModuleMeta.__call__

    def counted(cls, *args, **kwargs):
        obj = original(cls, *args, **kwargs)
        made[0] += isinstance(obj, gradax.GradientTransformation)
        return obj

    ModuleMeta.__call__ = counted  # type: ignore[method-assign]
    try:
        jax.jit(lambda t, s, g, p: t.update(g, s, p)).trace(tx, state, params, params)
    finally:
        ModuleMeta.__call__ = original  # type: ignore[method-assign]
    return made[0]


def _trace_seconds(make: Callable[[], Any], params: Any, as_argument: bool) -> float:
    """Seconds to trace the update: the transformation closed over (all
    optax allows: its functions are not arrays), or a ``jit`` argument."""
    tx = make()
    state = tx.init(params)
    jax.clear_caches()
    start = time.perf_counter()
    if as_argument:
        jax.jit(lambda t, s, g, p: t.update(g, s, p)).trace(tx, state, params, params)
    else:
        jax.jit(lambda s, g, p: tx.update(g, s, p)).trace(state, params, params)
    return time.perf_counter() - start


def run(repeats: int = 7) -> dict[str, Any]:
    roots = {
        "gradax": str(Path(gradax.__file__).resolve().parent),
        "optax": str(Path(optax.__file__).resolve().parent),
    }
    cases = {k: v for k, v in _cases().items() if k != "sgd_momentum"}
    trees = {"small (10 leaves)": _small_tree(), "transformer (434 leaves)": None}
    results: dict[str, Any] = {}
    for tree_name in trees:
        params = trees[tree_name]
        if params is None:
            params = _transformer_params()
        for name, (make_gradax, make_optax) in cases.items():
            calls = {
                "gradax": _library_calls(make_gradax(), params, roots["gradax"]),
                "optax": _library_calls(make_optax(), params, roots["optax"]),
            }
            runs = {
                "gradax": (make_gradax, False),
                "gradax_argument": (make_gradax, True),
                "optax": (make_optax, False),
            }
            samples: dict[str, list[float]] = {lib: [] for lib in runs}
            for _ in range(repeats):
                for lib, (make, as_argument) in runs.items():
                    samples[lib].append(_trace_seconds(make, params, as_argument))
            trace = {lib: statistics.median(v) for lib, v in samples.items()}
            results[f"{name} / {tree_name}"] = {
                "calls": calls,
                "calls_ratio": calls["gradax"]["calls"] / calls["optax"]["calls"],
                "constructions_in_trace": _constructions_in_trace(
                    make_gradax(), params
                ),
                "trace_s": trace,
                "trace_ratio": trace["gradax"] / trace["optax"],
                "trace_ratio_argument": trace["gradax_argument"] / trace["optax"],
            }
    return {"jax": jax.__version__, "gradax_path": roots["gradax"], "cases": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    report = run(args.repeats)
    print(f"jax {report['jax']}, gradax from {report['gradax_path']}")
    header = (
        f"{'case':44s} {'calls g/o':>13s} {'ratio':>6s} {'built':>5s} "
        f"{'trace':>6s} {'as arg':>6s}"
    )
    print(header)
    for name, r in report["cases"].items():
        calls = f"{r['calls']['gradax']['calls']}/{r['calls']['optax']['calls']}"
        print(
            f"{name:44s} {calls:>13s} {r['calls_ratio']:6.2f} "
            f"{r['constructions_in_trace']:5d} {r['trace_ratio']:6.2f} "
            f"{r['trace_ratio_argument']:6.2f}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
