"""Time one Muon update: gradax against optax, torch and the matmul floor.

The tree is GPT-like: d=256, 6 layers of qkv/proj/up/down, a 512x256
embedding. Every library routes the same leaves (every 2-D leaf) to Muon.
The floor is the plain Newton–Schulz FLOPs of all matrices divided by the
machine's measured matmul throughput (a 1024^3 float32 matmul, timed in the
same run); Gram Newton–Schulz needs fewer FLOPs, so gradax can beat it.

Where torch is installed, ``torch.optim.Muon`` joins on the same tensors with
as many threads as JAX, twice: as shipped (Newton–Schulz in bfloat16, slow
on CPUs without bfloat16 matrix units) and with the same iteration in
float32, gradax's precision.
Its ``step()`` also writes the parameters (cheap beside Newton–Schulz).
Being slow, each torch variant is timed alone: the median of 3 calls after a
warm-up (one call with ``--quick``), not in the interleaved rounds.
``--quick`` uses 1 layer and leaves out gradax's plain Newton–Schulz variant
and the "before" row (``method="gram"``: what ``"auto"`` chose on this tree
before the symmetric products, issue 35).

``--newton-schulz`` adds Newton–Schulz alone on 1024x1024, 1024x4096 and
4096x4096 float32: each method side by side in the same rounds as the
1024^3 matmul that sets that shape's floor (the plain iteration's FLOPs at
the measured rate). Minutes on a small CPU: 4096x4096 is 2 TFLOP a call.

Run: python benchmarks/bench_muon.py [--quick] [--newton-schulz] [--json FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

import gradax
from gradax.orthogonal.newton_schulz import newton_schulz_flops

from .common import (
    comparisons_against,
    cpu_threads,
    fake_grads,
    normal_tree,
    optional_optax,
    optional_torch,
    time_interleaved,
    to_torch,
)

TORCH = "torch"
TORCH_F32 = "torch (f32 NS)"


def muon_tree(d: int = 256, layers: int = 6, vocab: int = 512) -> dict:
    """The embedding and each layer's qkv/proj/up/down matrices."""
    shapes: dict[str, tuple[int, ...]] = {"embed": (vocab, d)}
    for i in range(layers):
        shapes |= {
            f"layer{i}/qkv": (d, 3 * d),
            f"layer{i}/proj": (d, d),
            f"layer{i}/up": (d, 4 * d),
            f"layer{i}/down": (4 * d, d),
        }
    return normal_tree(shapes)


# Issue 35's target shapes, Newton–Schulz alone in float32.
NS_SHAPES = ((1024, 1024), (1024, 4096), (4096, 4096))
NS_METHODS = ("ns", "symmetric", "gram", "gram_symmetric")


def newton_schulz_rows(shapes=NS_SHAPES) -> list[dict]:
    """Each method's time on each shape, and its ratio to plain and floor.

    The methods and a 1024^3 matmul run in the same interleaved rounds, so
    the ratios hold under the machine's load at the time; the Gram methods
    only where the matrix is rectangular (on a square one they are the
    plain ones). ``auto`` names the method ``"auto"`` picks.
    """
    from gradax.orthogonal.newton_schulz import auto_method

    size = 1024
    a = jnp.ones((size, size), jnp.float32)
    matmul = jax.jit(lambda a: a @ a)
    rows = []
    for m, n in shapes:
        x = jax.random.normal(jax.random.key(0), (m, n), jnp.float32)
        fns: dict[str, Callable[[], Any]] = {"matmul_1024": lambda: matmul(a)}
        for method in NS_METHODS:
            if method.startswith("gram") and m == n:
                continue
            step = jax.jit(
                lambda x, method=method: gradax.orthogonalize(x, method=method)
            )
            fns[method] = lambda step=step, x=x: step(x)
        big = m * n >= 4096 * 4096
        times = time_interleaved(fns, repeats=3 if big else 7, inner=1)
        floor = newton_schulz_flops(m, n, 5) / (2 * size**3 / times.pop("matmul_1024"))
        rows.append(
            {
                "shape": [m, n],
                "auto": auto_method(min(m, n), max(m, n), jnp.float32, "cpu"),
                "seconds": times,
                "floor_seconds": floor,
                "over_plain": {k: t / times["ns"] for k, t in times.items()},
                "over_floor": {k: t / floor for k, t in times.items()},
            }
        )
    return rows


# Quick mode: 1 layer instead of 6 (the compile time goes with the number of
# distinct shapes and leaves) and no plain Newton-Schulz variant.
QUICK_LAYERS = 1


def _float32_newton_schulz(torch):
    """torch's Muon iteration without its cast to bfloat16."""

    def orthogonalize(grad, ns_coefficients, ns_steps, eps):
        a, b, c = ns_coefficients
        x = grad.float()
        tall = grad.size(0) > grad.size(1)
        if tall:
            x = x.T
        x = x / x.norm().clamp(min=eps)
        for _ in range(ns_steps):
            gram = x @ x.T
            x = a * x + (b * gram + c * gram @ gram) @ x
        return x.T if tall else x

    return orthogonalize


@contextlib.contextmanager
def _patched(module, name, value):
    saved = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, saved)


def torch_steps(torch, params, grads) -> dict:
    """No-argument calls of ``torch.optim.Muon.step``: as shipped and float32."""
    calls = {}
    muon_module = getattr(torch.optim, "_muon", None)
    variants: dict[str, Callable[..., Any] | None] = {TORCH: None}
    if muon_module is not None and hasattr(muon_module, "_zeropower_via_newtonschulz"):
        variants[TORCH_F32] = _float32_newton_schulz(torch)
    for name, replacement in variants.items():
        tensors, grad_tensors = to_torch(torch, params), to_torch(torch, grads)
        for key, tensor in tensors.items():
            tensor.grad = grad_tensors[key]
        # gradax.muon's defaults: momentum 0.95, Nesterov, no weight decay.
        opt = torch.optim.Muon(
            list(tensors.values()),
            lr=0.02,
            weight_decay=0.0,
            momentum=0.95,
            nesterov=True,
        )
        if replacement is None:
            calls[name] = opt.step
        else:

            def call(opt=opt, replacement=replacement):
                with _patched(muon_module, "_zeropower_via_newtonschulz", replacement):
                    opt.step()

            calls[name] = call
    return calls


def _time_alone(fn, calls: int) -> float:
    """Median seconds of ``calls`` calls, after a warm-up call unless just one."""
    if calls > 1:
        fn()
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def run(quick: bool = False, newton_schulz: bool = False) -> dict:
    optax, torch = optional_optax(), optional_torch()

    # Like optax and torch, route the embedding to Muon here, knowingly.
    warnings.filterwarnings("ignore", message="gradax.muon routes")

    layers = QUICK_LAYERS if quick else 6
    params = muon_tree(layers=layers)
    grads = fake_grads(params)
    candidates = {"gradax": gradax.muon(0.02)}
    if not quick:
        candidates["gradax_ns"] = gradax.muon(0.02, method="ns")
        # Every rectangular leaf here has its long side >= twice the short
        # one, so "gram" is what "auto" ran before the symmetric products.
        candidates["gradax_before"] = gradax.muon(0.02, method="gram")
    if optax is not None:
        candidates["optax"] = optax.contrib.muon(0.02)
    fns: dict[str, Callable[[], Any]] = {}
    for name, tx in candidates.items():
        step, state = jax.jit(tx.update), tx.init(params)
        fns[name] = lambda step=step, state=state: step(grads, state, params)
    # On CPUs without bfloat16 units torch's shipped step takes seconds, too
    # long for the rounds: each torch variant is timed alone, a few calls.
    torch_fns = torch_steps(torch, params, grads) if torch is not None else {}
    size = 1024
    a = jnp.ones((size, size), jnp.float32)
    matmul = jax.jit(lambda a: a @ a)
    fns["matmul_1024"] = lambda: matmul(a)
    times = time_interleaved(fns, repeats=3 if quick else 15, inner=1 if quick else 2)
    calls = 1 if quick else 3
    times |= {name: _time_alone(fn, calls) for name, fn in torch_fns.items()}
    flops_per_second = 2 * size**3 / times.pop("matmul_1024")
    shapes = [p.shape for p in params.values()]
    ns_flops = sum(newton_schulz_flops(m, n, 5) for m, n in shapes)
    floor = ns_flops / flops_per_second
    references = ["optax", TORCH, TORCH_F32]
    size_label = f"d=256, {layers} layer{'' if layers == 1 else 's'}"
    gram = (
        "Gram Newton-Schulz does fewer FLOPs than the plain iteration the floor counts"
    )
    rows = comparisons_against(
        f"muon, {size_label}", times, references, "matmul", floor, floor_note=gram
    )
    if "gradax_ns" in times:
        rows += comparisons_against(
            f"muon plain NS, {size_label}",
            times,
            references,
            "matmul",
            floor,
            "gradax_ns",
            floor_note="timing noise: the plain iteration does the FLOPs counted",
        )
    result = {
        "benchmark": (
            f"muon update, GPT-like tree (d=256, {layers} layers, 512x256 embed)"
        ),
        "device": str(jax.devices()[0]),
        "threads": cpu_threads(),
        "seconds": times,
        "matmul_gflops": flops_per_second / 1e9,
        "newton_schulz_gflop": ns_flops / 1e9,
        "matmul_floor_seconds": floor,
        "ratio_gradax_over_optax": (
            times["gradax"] / times["optax"] if optax is not None else None
        ),
        "gradax_fraction_of_floor": floor / times["gradax"],
        "comparisons": rows,
        "notes": [
            f"muon floor: plain Newton-Schulz, {ns_flops / 1e9:.1f} GFLOP at "
            f"{flops_per_second / 1e9:.0f} GFLOP/s; gradax's Gram iteration "
            "needs fewer, so it can pass 1"
        ],
    }
    if "gradax_ns" in times:
        result["gradax_ns_fraction_of_floor"] = floor / times["gradax_ns"]
    if "gradax_before" in times:
        rows += comparisons_against(
            f"muon before issue 35 (method='gram'), {size_label}",
            times,
            references,
            "matmul",
            floor,
            "gradax_before",
            floor_note=gram,
        )
        result["gradax_over_before"] = times["gradax"] / times["gradax_before"]
    if newton_schulz:
        result["newton_schulz"] = newton_schulz_rows()
    if torch is not None:
        result["notes"].append(
            "muon vs torch: torch.optim.Muon as shipped runs Newton-Schulz in "
            "bfloat16; 'torch (f32 NS)' is the same iteration in float32"
            + f"; each timed alone, median of {calls} call{'s' * (calls > 1)}"
        )
    return result


def main() -> None:
    """Print the timings (``--json FILE`` writes them too)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--newton-schulz", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    r = run(args.quick, args.newton_schulz)
    print(r["benchmark"], "on", r["device"])
    for name, seconds in r["seconds"].items():
        print(f"  {name:16s} {seconds * 1e3:9.2f} ms")
    print(
        f"  matmul floor {r['matmul_floor_seconds'] * 1e3:9.2f} ms "
        f"({r['newton_schulz_gflop']:.1f} GFLOP at {r['matmul_gflops']:.1f} GFLOP/s)"
    )
    for row in r["comparisons"]:
        if row["reference"] is not None:
            print(f"  {row['label']}: gradax/{row['reference']} {row['ratio']:.3f}")
    plain = r.get("gradax_ns_fraction_of_floor")
    print(
        f"  floor/gradax: {r['gradax_fraction_of_floor']:.2f}"
        + ("" if plain is None else f" (plain NS: {plain:.2f})")
    )
    if "gradax_over_before" in r:
        print(f"  gradax/gradax before (method='gram'): {r['gradax_over_before']:.3f}")
    for row in r.get("newton_schulz", []):
        m, n = row["shape"]
        print(
            f"  newton-schulz {m}x{n} float32: plain {row['seconds']['ns'] * 1e3:.0f} "
            f"ms, floor {row['floor_seconds'] * 1e3:.0f} ms; auto = {row['auto']}"
        )
        for name in row["seconds"]:
            print(
                f"    {name:15s} /plain {row['over_plain'][name]:.3f}  "
                f"/floor {row['over_floor'][name]:.3f}"
            )
    if args.json:
        args.json.write_text(json.dumps(r, indent=2))
