"""Muon's compile time beside its run time: leaves, and GPT-shaped trees.

Issue 46: one compile of the Muon step took 3.0x optax's on a 17M-parameter
GPT tree and 7x on GPT-2 small, because ``method="auto"`` picked the
symmetric products, then written as one ``dot`` per block pair and step
(882 dots for three leaves). This script measures, side by side in one run:

- leaves (1024x1024, 1024x4096, 2048x2048, float32): Newton-Schulz alone
  (``gradax.orthogonalize``) with the plain products (``"ns"``, or
  ``"gram"`` for the rectangular leaf), every Hermitian product blocked
  (``"symmetric"`` / ``"gram_symmetric"``) and ``"auto"`` (``X X^T``
  blocked alone): compile CPU seconds, run time (wall) and CPU seconds per
  call;
- trees (``--trees``): the training step ``tx.update`` then
  ``apply_updates``, jitted with params and state donated, for
  ``gradax.muon`` (default ``"auto"``, ``method="gram"``: the plain
  products, and ``method="gram_symmetric"``: every product blocked) and
  ``optax.contrib.muon``, on the 17M tree (4 layers, d 512, vocab 8192)
  and GPT-2 small's 124M (12 layers, d 768, vocab 50257). Compile uses
  ShapeDtypeStructs (nothing allocated); run time allocates the tree, for
  all but the every-product-blocked candidate (``--no-run-124m`` skips
  the big tree's). ``--medium`` adds GPT-2 medium's 355M tree, compiled only.

Compile time is CPU seconds (``time.process_time``) of ``lower`` and
``compile``, each sample a fresh function, the candidates interleaved, the
median reported: CPU seconds move less with the machine's load than wall
seconds. Run times are medians of interleaved rounds. ``--one-core`` pins
the process to one core, so that CPU seconds per call are the work done,
not time spent waiting for a busy second core. The machine's load
(``os.getloadavg``) is printed before and after: on a shared machine read
the ratios, not the absolute times.

Run: python benchmarks/bench_muon_compile.py [--trees] [--no-leaves]
[--quick] [--no-run-124m] [--medium] [--one-core] [--repeats N]
[--json FILE]
"""

from __future__ import annotations

import os
import sys

if "--one-core" in sys.argv and hasattr(os, "sched_setaffinity"):
    # Before JAX makes its CPU client, which sizes its threads by this.
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from common import optional_optax, time_interleaved  # noqa: E402

import gradax  # noqa: E402
from gradax_cli.benchmarks.common import gpt_like_shapes  # noqa: E402

LEAVES = ((1024, 1024), (1024, 4096), (2048, 2048))
TREES = {
    "gpt 17M (4 x d512, vocab 8192)": dict(d=512, layers=4, vocab=8192),
    "gpt2-small 124M (12 x d768, vocab 50257)": dict(d=768, layers=12, vocab=50257),
}
# --medium: GPT-2 medium's shapes too, compiled only (355M parameters).
MEDIUM = {
    "gpt2-medium 355M (24 x d1024, vocab 50257)": dict(d=1024, layers=24, vocab=50257)
}


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min), {os.cpu_count()} cores"


def gpt_shapes(d: int, layers: int, vocab: int) -> dict[str, tuple[int, ...]]:
    """`gpt_like_params`' tree (benchmarks/common.py), as shapes."""
    return gpt_like_shapes(d, layers, vocab)


def compile_seconds(build: Callable[[], Any], args: tuple, donate: tuple) -> float:
    """CPU seconds to lower and compile a fresh jitted function."""
    start = time.process_time()
    jax.jit(build(), donate_argnums=donate).lower(*args).compile()
    return time.process_time() - start


def interleaved_compiles(
    builders: dict, args: dict, repeats: int, donate: tuple = ()
) -> dict[str, float]:
    """Median compile CPU seconds of each candidate, in alternating rounds."""
    samples: dict[str, list[float]] = {name: [] for name in builders}
    names = list(builders)
    for round_ in range(repeats):
        for name in names if round_ % 2 == 0 else reversed(names):
            samples[name].append(compile_seconds(builders[name], args[name], donate))
    return {name: statistics.median(s) for name, s in samples.items()}


def cpu_per_call(fns: dict[str, Callable[[], Any]], repeats: int) -> dict[str, float]:
    """Median CPU seconds of one call of each (already compiled) function."""
    samples: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    for round_ in range(repeats):
        for name in names if round_ % 2 == 0 else reversed(names):
            start = time.process_time()
            jax.block_until_ready(fns[name]())
            samples[name].append(time.process_time() - start)
    return {name: statistics.median(s) for name, s in samples.items()}


def leaf_rows(repeats: int, compiles: int) -> list[dict]:
    """Newton-Schulz alone on each leaf, by method."""
    rows = []
    for m, n in LEAVES:
        plain = "gram" if max(m, n) >= 2 * min(m, n) else "ns"
        methods = (plain, "symmetric" if plain == "ns" else "gram_symmetric", "auto")
        x = jnp.asarray(
            np.random.default_rng(0).standard_normal((m, n), np.float32) / np.sqrt(n)
        )

        def build(method):
            return lambda: lambda a: gradax.orthogonalize(a, method=method)

        spec = jax.ShapeDtypeStruct((m, n), jnp.float32)
        compile_s = interleaved_compiles(
            {k: build(k) for k in methods}, {k: (spec,) for k in methods}, compiles
        )
        compiled = {k: jax.jit(build(k)()).lower(x).compile() for k in methods}
        calls = {k: (lambda c=c, x=x: c(x)) for k, c in compiled.items()}
        wall = time_interleaved(calls, repeats=repeats, inner=1)
        cpu = cpu_per_call(calls, repeats)
        for k in methods:
            rows.append(
                {
                    "leaf": f"{m}x{n}",
                    "method": k,
                    "compile_cpu_s": compile_s[k],
                    "compile_vs_plain": compile_s[k] / compile_s[plain],
                    "run_s": wall[k],
                    "run_vs_plain": wall[k] / wall[plain],
                    "run_cpu_s": cpu[k],
                    "run_cpu_vs_plain": cpu[k] / cpu[plain],
                }
            )
    return rows


# The step's candidates: gradax's default, its plain products ("gram" is
# "ns" on square leaves), every Hermitian product blocked, and optax's.
MUON = {
    "gradax muon (auto)": dict(),
    "gradax muon (gram)": dict(method="gram"),
    "gradax muon (gram_symmetric)": dict(method="gram_symmetric"),
}
# Timed as well as compiled (the big tree's steps take seconds each).
TIMED = ("gradax muon (auto)", "gradax muon (gram)", "optax.contrib.muon")


def muon_candidates(optax: Any) -> dict[str, Callable[[], Any]]:
    candidates: dict[str, Callable[[], Any]] = {
        name: (lambda options=options: gradax.muon(0.02, **options))
        for name, options in MUON.items()
    }
    if optax is not None:
        candidates["optax.contrib.muon"] = lambda: optax.contrib.muon(0.02)
    return candidates


def step_builder(make_tx: Callable[[], Any]) -> Callable[[], Callable]:
    def build():
        tx = make_tx()

        def step(params, state, grads):
            updates, state = tx.update(grads, state, params)
            return gradax.apply_updates(params, updates), state

        return step

    return build


def tree_rows(
    repeats: int, compiles: int, run_124m: bool, quick: bool, medium: bool = False
) -> list[dict]:
    optax = optional_optax()
    rows = []
    trees = dict(list(TREES.items())[:1]) if quick else dict(TREES)
    if medium:
        trees |= MEDIUM
    for name, config in trees.items():
        shapes = gpt_shapes(**config)
        spec = {k: jax.ShapeDtypeStruct(s, jnp.float32) for k, s in shapes.items()}
        count = sum(int(np.prod(s)) for s in shapes.values())
        candidates = muon_candidates(optax)
        args = {
            k: (spec, jax.eval_shape(make().init, spec), spec)
            for k, make in candidates.items()
        }
        builders = {k: step_builder(make) for k, make in candidates.items()}
        compile_s = interleaved_compiles(builders, args, compiles, donate=(0, 1))
        run_s: dict[str, float] = {}
        if name not in MEDIUM and (run_124m or config["layers"] < 12):
            timed = {k: v for k, v in candidates.items() if k in TIMED}
            run_s = run_steps(timed, shapes, repeats)
        base = "optax.contrib.muon" if optax is not None else "gradax muon (gram)"
        for k in candidates:
            row = {
                "tree": name,
                "params_m": count / 1e6,
                "candidate": k,
                "compile_cpu_s": compile_s[k],
                "compile_vs_optax": compile_s[k] / compile_s[base],
            }
            if k in run_s:
                row |= {"run_s": run_s[k], "run_vs_optax": run_s[k] / run_s[base]}
            rows.append(row)
    return rows


def run_steps(candidates: dict, shapes: dict, repeats: int) -> dict[str, float]:
    """Median wall seconds of one step of each candidate, interleaved.

    Each candidate's params and state are donated and replaced by the step's
    outputs, as in training; the gradients are fixed.
    """
    rng = np.random.default_rng(0)
    grads = {
        k: jnp.asarray(0.02 * rng.standard_normal(s, dtype=np.float32))
        for k, s in shapes.items()
    }
    live: dict[str, list] = {}
    fns = {}
    for k, make in candidates.items():
        tx = make()
        params = jax.tree.map(jnp.copy, grads)
        live[k] = [params, tx.init(params)]
        step = jax.jit(step_builder(lambda tx=tx: tx)(), donate_argnums=(0, 1))

        def call(k=k, step=step):
            live[k][0], live[k][1] = step(live[k][0], live[k][1], grads)
            return live[k][0]

        fns[k] = call
    return time_interleaved(fns, repeats=repeats, inner=1)


def print_table(rows: list[dict]) -> None:
    if not rows:
        return
    keys = list(rows[0])
    for row in rows:
        keys += [k for k in row if k not in keys]
    print(" | ".join(keys))
    for row in rows:
        cells = []
        for k in keys:
            v = row.get(k, "")
            cells.append(f"{v:.3f}" if isinstance(v, float) else str(v))
        print(" | ".join(cells))
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", action="store_true", help="the Muon step on trees")
    parser.add_argument("--no-leaves", action="store_true", help="skip the leaves")
    parser.add_argument("--quick", action="store_true", help="fewer rounds, 17M only")
    parser.add_argument("--no-run-124m", action="store_true", help="compile only")
    parser.add_argument("--medium", action="store_true", help="GPT-2 medium too")
    parser.add_argument("--repeats", type=int, default=None, help="run rounds")
    parser.add_argument(
        "--one-core",
        action="store_true",
        help="run on one core: CPU seconds per call are then the work done",
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    repeats = args.repeats or (3 if args.quick else 7)
    compiles = 3 if args.quick else 5
    warnings.filterwarnings("ignore", category=gradax.MuonRoutingWarning)
    result: dict[str, Any] = {
        "load_before": load(),
        "jax": jax.__version__,
        "threads": len(os.sched_getaffinity(0)) if args.one_core else os.cpu_count(),
    }
    print(result["load_before"])
    if not args.no_leaves:
        result["leaves"] = leaf_rows(repeats, compiles)
        print_table(result["leaves"])
    if args.trees:
        result["trees"] = tree_rows(
            max(3, repeats // 2), 3, not args.no_run_124m, args.quick, args.medium
        )
        print_table(result["trees"])
    result["load_after"] = load()
    print(result["load_after"])
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
