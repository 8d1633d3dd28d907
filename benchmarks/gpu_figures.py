"""Every GPU figure the docs claim, in one run.

The figures need a GPU (or another accelerator); on a CPU the script runs
with ``--smoke`` (tiny sizes, about two minutes) only to show that it works, and
its numbers mean nothing for the docs. It prints, and with ``--json`` saves:

1. **Matmul peak**: the measured rate of a large bfloat16 and float32
   matmul (the machine's own peak, not the data sheet's).
2. **bf16 Newton–Schulz**: ``gradax.orthogonalize(precision="bfloat16")``
   on a stack of matrices, its plain-iteration FLOPs per second, as a
   fraction of the bfloat16 matmul peak (Gram Newton–Schulz does fewer
   FLOPs than counted, so the fraction can exceed what a matmul reaches).
   Then ``method="ns"`` against ``method="symmetric"`` (the Pallas kernel
   for X X^T and A A) side by side, and that kernel alone against XLA's
   ``x @ x.T`` on one 2n x 2n matrix.
3. **Memory bandwidth and AdamW**: a streaming ``a + b`` gives the
   bandwidth; ``chain(clip_by_global_norm, adamw)`` (update and
   ``apply_updates``, donated) against its floor, 8 float32 arrays of the
   tree moved at that bandwidth (grads, params and two moments read; two
   moments and params written; the norm's extra read of the grads).
4. **8-bit and master-weight steps against float32**: the training step of
   8-bit AdamW, bfloat16 with an exact master (``master_weights``) and with
   stochastic rounding, each around 8-bit AdamW, and Muon, over float32
   AdamW's, with bytes per parameter of parameters + state (the second
   table of ``bench_state_memory.py``, reused here). The bandwidth-bound
   rows (AdamW's, not Muon's) are also given as a fraction of their floor,
   the bytes a step must move at the measured bandwidth
   (``precision_floor_bytes``), and stochastic rounding's step over
   round-to-nearest's (issue 35: the random bits should cost little).
5. **Host offload**: float32 AdamW with its state in pinned host memory
   (``offload_state``) over the on-device step, and the link rate it
   implies (16 bytes a parameter moved each step).
6. **ZeRO-1's collectives**: with two or more devices, the bytes each
   receives per step for data parallelism and ``shard_state`` with
   all-reduced and reduce-scattered gradients (``bench_zero1.py``'s model).
7. **Peak memory of a step** (issue 46): ``bench_peak_memory.py``'s table
   compiled for this device, every memory feature's step (``tx.update``
   then ``apply_updates``, parameters and state donated) on its GPT-shaped
   trees of ``ShapeDtypeStruct``s (17M, then GPT-2 small's 124M): params,
   gradients, state and XLA's temporaries (``memory_analysis()``), in
   bytes per parameter. XLA:CPU's fusion keeps float32 temporaries that a
   backend with multi-output loops need not (docs/memory.md).
8. **The metrics' cost** (issue 48): ``bench_monitor.py`` on this device,
   AdamW and Muon (alone and behind a clip) with and without
   ``gradax.with_metrics``, the time ratio and the reads of each gradient
   and parameter leaf in the compiled step.

Sizes: a GPT-like tree of d_model 1024 and 8 layers (about 100M parameters)
and Newton–Schulz on 16 matrices of 4096 x 4096; ``--smoke`` uses d_model
128, 1 layer and 4 matrices of 256 (and a 1-layer tree of width 128 for
sections 7 and 8). Timings are medians of rounds that alternate the
candidates (``time_interleaved``); compile time is excluded.

``--sections`` runs some of them (by the names in ``SECTIONS``); with
``--json`` the file is rewritten after each section, so a run cut short by
a time limit keeps what it measured. Sections 1 to 6 took at most 8
minutes when the script was written; 7 and 8 have not run on a GPU yet
(7 compiles 17 steps of each tree, the 124M ones the slowest). Where one
command may run 10 minutes, run ``--sections peak,metrics`` and the rest
as two commands.

Run: python benchmarks/gpu_figures.py [--smoke] [--sections NAMES] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).parent))
import bench_state_memory  # noqa: E402
from common import count_params, fake_grads, gpt_like_params, time_interleaved  # noqa: E402

import gradax  # noqa: E402
from gradax.orthogonal.newton_schulz import newton_schulz_flops  # noqa: E402


def _median_seconds(fn, repeats: int) -> float:
    return time_interleaved({"x": fn}, repeats=repeats)["x"]


def matmul_peak(n: int, dtype, repeats: int) -> float:
    """FLOP/s of an n x n x n matmul in ``dtype`` (accumulating as XLA does)."""
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32).astype(dtype)
    b = jax.random.normal(jax.random.key(1), (n, n), jnp.float32).astype(dtype)
    mm = jax.jit(lambda a, b: a @ b)
    return 2 * n**3 / _median_seconds(lambda: mm(a, b), repeats)


def newton_schulz_rate(count: int, n: int, repeats: int) -> dict:
    x = jax.random.normal(jax.random.key(2), (count, n, n), jnp.float32)
    ns = jax.jit(lambda x: gradax.orthogonalize(x, precision="bfloat16"))
    seconds = _median_seconds(lambda: ns(x), repeats)
    flops = count * newton_schulz_flops(n, n, 5)
    return {"seconds": seconds, "flops_per_second": flops / seconds}


def symmetric_newton_schulz(count: int, n: int, repeats: int) -> dict:
    """bf16 Newton–Schulz, plain against symmetric (issue 35), side by side.

    ``method="symmetric"`` takes X X^T and A A with the Pallas kernel that
    skips the lower tiles (gradax/orthogonal/_pallas_symmetric.py) on a GPU;
    ``gram_xxt`` times that kernel alone against XLA's ``x @ x.T`` on one
    2n x 2n bfloat16 matrix (Flash-Muon's figure: a gain at 8192, none at
    1024). FLOP rates count the plain iteration's FLOPs, as above.
    """
    from gradax.orthogonal._symmetric import hermitian_products

    x = jax.random.normal(jax.random.key(3), (count, n, n), jnp.float32)
    fns = {}
    for method in ("ns", "symmetric"):
        ns = jax.jit(
            lambda x, method=method: gradax.orthogonalize(
                x, method=method, precision="bfloat16"
            )
        )
        fns[method] = lambda ns=ns: ns(x)
    big = jax.random.normal(jax.random.key(4), (2 * n, 2 * n), jnp.bfloat16)
    kernel = jax.jit(hermitian_products(2 * n, jnp.bfloat16, jnp.matmul))
    xla = jax.jit(lambda a: a @ a.T)
    fns["gram_xxt_symmetric"] = lambda: kernel(big, big)
    fns["gram_xxt_xla"] = lambda: xla(big)
    times = time_interleaved(fns, repeats=repeats)
    flops = count * newton_schulz_flops(n, n, 5)
    return {
        "matrices": f"{count} x {n}x{n}",
        "seconds": times,
        "tflops": {m: flops / times[m] / 1e12 for m in ("ns", "symmetric")},
        "symmetric_over_plain": times["symmetric"] / times["ns"],
        "gram_xxt": f"{2 * n}x{2 * n}",
        "gram_kernel_over_xla": times["gram_xxt_symmetric"] / times["gram_xxt_xla"],
    }


def bandwidth(n_floats: int, repeats: int) -> float:
    """Bytes per second of a donated ``a + b`` over ``n_floats`` float32."""
    box = [jnp.ones(n_floats, jnp.float32)]
    b = jnp.full(n_floats, 2.0, jnp.float32)
    add = jax.jit(lambda a, b: a + b, donate_argnums=0)

    def stream():
        box[0] = add(box[0], b)
        return box[0]

    return 3 * b.nbytes / _median_seconds(stream, repeats)


def _step(tx, params, grads):
    state = tx.init(params)

    def step(params, state, grads):
        updates, state = tx.update(grads, state, params)
        return gradax.apply_updates(params, updates), state

    compiled = jax.jit(step, donate_argnums=(0, 1)).lower(params, state, grads)
    compiled = compiled.compile()
    box = [params, state]

    def call():
        box[0], box[1] = compiled(box[0], box[1], grads)
        return box[0]

    return call


def adamw_and_offload(d_model: int, layers: int, repeats: int) -> dict:
    params = gpt_like_params(d_model=d_model, layers=layers, vocab=4 * d_model)
    n = count_params(params)
    grads = fake_grads(params)
    adamw = gradax.chain(gradax.clip_by_global_norm(1.0), gradax.adamw(1e-3))
    copy = lambda: jax.tree.map(jnp.array, params)  # noqa: E731 (donated)
    fns = {
        "adamw": _step(adamw, copy(), grads),
        "adamw, state in host memory": _step(
            gradax.offload_state(adamw), copy(), grads
        ),
    }
    times = time_interleaved(fns, repeats=repeats)
    rate = bandwidth(4 * n, repeats)
    floor = 8 * 4 * n / rate
    link = 16 * n / max(times["adamw, state in host memory"] - times["adamw"], 1e-12)
    return {
        "params": n,
        "seconds": times,
        "bandwidth_gbps": rate / 1e9,
        "adamw_floor_seconds": floor,
        "adamw_fraction_of_floor": floor / times["adamw"],
        "offload_over_device": times["adamw, state in host memory"] / times["adamw"],
        "offload_link_gbps": link / 1e9,
    }


def precision_floor_bytes(name: str, kept_bytes: float) -> float | None:
    """Bytes per parameter a step of this ``run_precision`` row must move.

    ``kept_bytes`` is the row's bytes per parameter of parameters + state:
    each is read once and written once. The gradient is read twice
    (clip_by_global_norm's norm, then the update); it has the parameters'
    dtype (2 bytes in the 16-bit rows, 4 in "f32 adamw"). Stochastic
    rounding's random bits are computed, not loaded. Muon's rows (bound by
    Newton-Schulz's matmuls) give None.
    """
    if "muon" in name:
        return None
    grad_bytes = 2 if name.startswith("bf16") else 4
    return 2 * kept_bytes + 2 * grad_bytes


def precision_against_bandwidth(precision: dict, bytes_per_second: float) -> dict:
    """Each bandwidth-bound row's floor over its measured step time."""
    n = precision["params"]
    floors, fractions = {}, {}
    for name, seconds in precision["seconds"].items():
        floor = precision_floor_bytes(name, precision["bytes_per_param"][name])
        if floor is not None:
            floors[name] = floor
            fractions[name] = floor * n / bytes_per_second / seconds
    return {
        "floor_bytes_per_param": floors,
        "fraction_of_floor": fractions,
        "rounding_over_nearest": precision.get("rounding_over_nearest", {}),
    }


def zero1_collectives() -> dict:
    """ZeRO-1's collectives on this machine's devices (bench_zero1's plan).

    Bytes each device receives per step, from the compiled HLO, for plain
    data parallelism and ``shard_state`` with all-reduced and with
    reduce-scattered gradients. Needs two or more devices.
    """
    devices = jax.device_count()
    if devices < 2:
        return {
            "skipped": f"{devices} device: ZeRO-1 needs 2 or more (bench_zero1.py "
            "gives the plan on 8 simulated CPU devices)"
        }
    import bench_zero1

    auto = jax.sharding.AxisType.Auto
    mesh = jax.make_mesh((devices,), ("data",), axis_types=(auto,))
    out = {}
    with jax.set_mesh(mesh):
        for name, tx in bench_zero1.optimizers().items():
            zero1 = gradax.shard_state(tx, axis="data")
            forms = {
                "data parallel": bench_zero1.measure(tx, mesh),
                "zero-1": bench_zero1.measure(zero1, mesh),
                "zero-1 rs": bench_zero1.measure(
                    zero1, mesh, bench_zero1.reduce_scattered_grads
                ),
            }
            out[name] = {
                form: sum(r["received_bytes"].values()) / 2**20
                for form, r in forms.items()
            }
    return {"devices": devices, "received_mib_per_device": out}


# Section 7's tree under --smoke: compiles in seconds on a CPU.
SMOKE_PEAK_TREE = dict(d_model=128, layers=1, vocab=512)


def peak_memory(trees: list[str], smoke: bool, save=None) -> dict:
    """bench_peak_memory.py's table, compiled for this process's device.

    One row per memory feature and tree: bytes per parameter of params,
    gradients, state and temporaries (XLA's compiled memory analysis),
    and their sum. `save` is called after each tree.
    """
    import bench_peak_memory

    out: dict = {"platform": bench_peak_memory.where(), "trees": {}}
    for tree in ["smoke"] if smoke else trees:
        shape = SMOKE_PEAK_TREE if smoke else None
        out["trees"][tree] = bench_peak_memory.run(tree, shape=shape)
        if save is not None:
            save(out)
    return out


def metrics_cost(smoke: bool) -> dict:
    """bench_monitor.py on this device: with_metrics' time ratio and reads."""
    import bench_monitor

    return bench_monitor.run(quick=smoke, repeats=3 if smoke else None)


SECTIONS = (
    "matmul",
    "newton_schulz",
    "memory",
    "precision",
    "zero1",
    "peak",
    "metrics",
)


def run(smoke: bool, sections=SECTIONS, peak_trees=("17m", "124m"), save=None) -> dict:
    """Each named section in order; `save(result)` after each one."""
    start = time.perf_counter()
    repeats = 3 if smoke else 20
    n_mm, ns_count, ns_n = (256, 4, 256) if smoke else (8192, 16, 4096)
    d_model, layers = (128, 1) if smoke else (1024, 8)
    r: dict = {"device": str(jax.devices()[0]), "smoke": smoke}

    def done() -> None:
        r["wall_seconds"] = time.perf_counter() - start
        if save is not None:
            save(r)

    peaks = None
    if {"matmul", "newton_schulz"} & set(sections):
        peaks = {
            "bfloat16": matmul_peak(n_mm, jnp.bfloat16, repeats),
            "float32": matmul_peak(n_mm, jnp.float32, repeats),
        }
        r["matmul_tflops"] = {k: v / 1e12 for k, v in peaks.items()}
        done()
    if "newton_schulz" in sections and peaks is not None:
        ns = newton_schulz_rate(ns_count, ns_n, repeats)
        symmetric_ns = symmetric_newton_schulz(ns_count, ns_n, repeats)
        r["newton_schulz_bf16"] = {
            "matrices": f"{ns_count} x {ns_n}x{ns_n}",
            "seconds": ns["seconds"],
            "tflops": ns["flops_per_second"] / 1e12,
            "fraction_of_bf16_peak": ns["flops_per_second"] / peaks["bfloat16"],
        }
        r["symmetric_newton_schulz_bf16"] = symmetric_ns | {
            f"{m}_fraction_of_bf16_peak": rate * 1e12 / peaks["bfloat16"]
            for m, rate in symmetric_ns["tflops"].items()
        }
        done()
    if {"memory", "precision"} & set(sections):
        r["memory"] = adamw_and_offload(d_model, layers, repeats)
        done()
    if "precision" in sections:
        # The 8-bit / master / rounding table, on a tree of the same width.
        r["precision"] = bench_state_memory.run_precision(
            quick=smoke, layers=layers, d_model=d_model, vocab=4 * d_model
        )
        r["precision_floor"] = precision_against_bandwidth(
            r["precision"], r["memory"]["bandwidth_gbps"] * 1e9
        )
        done()
    if "zero1" in sections:
        r["zero1"] = zero1_collectives()
        done()
    if "peak" in sections:

        def partial(peak: dict) -> None:
            r["peak_memory"] = peak
            done()

        r["peak_memory"] = peak_memory(list(peak_trees), smoke, save=partial)
        done()
    if "metrics" in sections:
        r["metrics_cost"] = metrics_cost(smoke)
        done()
    r["wall_seconds"] = time.perf_counter() - start
    return r


def _print_matmul_and_newton_schulz(r: dict) -> None:
    if "matmul_tflops" in r:
        mm = r["matmul_tflops"]
        print(
            f"matmul peak: bf16 {mm['bfloat16']:.1f} TFLOP/s, f32 {mm['float32']:.1f}"
        )
    if "newton_schulz_bf16" not in r:
        return
    ns = r["newton_schulz_bf16"]
    print(
        f"bf16 Newton-Schulz ({ns['matrices']}): {ns['seconds'] * 1e3:.2f} ms, "
        f"{ns['tflops']:.1f} TFLOP/s = {ns['fraction_of_bf16_peak']:.0%} of bf16 peak"
    )
    sym = r["symmetric_newton_schulz_bf16"]
    print(
        f"bf16 Newton-Schulz ({sym['matrices']}), symmetric/plain "
        f"{sym['symmetric_over_plain']:.3f}: plain "
        f"{sym['ns_fraction_of_bf16_peak']:.0%}, symmetric "
        f"{sym['symmetric_fraction_of_bf16_peak']:.0%} of bf16 peak; "
        f"X X^T {sym['gram_xxt']} kernel/XLA {sym['gram_kernel_over_xla']:.3f}"
    )


def _print_memory_and_precision(r: dict) -> None:
    if "memory" in r:
        m = r["memory"]
        print(
            f"bandwidth {m['bandwidth_gbps']:.0f} GB/s; adamw step on {m['params']:,} "
            f"params {m['seconds']['adamw'] * 1e3:.2f} ms = "
            f"{m['adamw_fraction_of_floor']:.0%} of the bandwidth floor"
        )
        print(
            f"host offload: {m['offload_over_device']:.2f}x the on-device step "
            f"(state over the link at {m['offload_link_gbps']:.1f} GB/s)"
        )
    if "precision" not in r:
        return
    p = r["precision"]
    print("step over f32 adamw, bytes/param (params + state):")
    for name, ratio in p["time_over_f32_adamw"].items():
        print(f"  {name:44s} {ratio:6.2f}x {p['bytes_per_param'][name]:7.3f}")
    floor = r["precision_floor"]
    print("fraction of the bandwidth floor (bytes/param moved at least):")
    for name, fraction in floor["fraction_of_floor"].items():
        moved = floor["floor_bytes_per_param"][name]
        print(f"  {name:44s} {fraction:6.0%} {moved:7.2f}")
    print("stochastic rounding's step over round-to-nearest's:")
    for name, ratio in floor["rounding_over_nearest"].items():
        print(f"  {name:44s} {ratio:6.2f}")


def _print_zero1(z: dict) -> None:
    if "skipped" in z:
        print(f"ZeRO-1: skipped, {z['skipped']}")
        return
    print(f"ZeRO-1 on {z['devices']} devices, MiB received per device and step:")
    for name, forms in z["received_mib_per_device"].items():
        shown = ", ".join(f"{form} {mib:.2f}" for form, mib in forms.items())
        print(f"  {name:6s} {shown}")


PEAK_COLUMNS = ("params", "grads", "state", "temps", "peak")


def _print_peak_memory(peak: dict) -> None:
    for tree, table in peak["trees"].items():
        print(
            f"peak memory of a step, {tree} tree ({table['params']:,} parameters, "
            f"{peak['platform']}), bytes/param:"
        )
        print(f"  {'configuration':48s} {' '.join(f'{c:>6s}' for c in PEAK_COLUMNS)}")
        for name, row in table["rows"].items():
            cells = " ".join(f"{row[column]:6.2f}" for column in PEAK_COLUMNS)
            print(f"  {name:48s} {cells}")


def print_report(r: dict) -> None:
    """What `run` measured, as text (the sections it ran)."""
    print(f"device: {r['device']}{' (smoke sizes: not figures)' if r['smoke'] else ''}")
    _print_matmul_and_newton_schulz(r)
    _print_memory_and_precision(r)
    if "zero1" in r:
        _print_zero1(r["zero1"])
    if "peak_memory" in r:
        _print_peak_memory(r["peak_memory"])
    if "metrics_cost" in r:
        import bench_monitor

        bench_monitor.print_report(r["metrics_cost"])
    print(f"wall time {r['wall_seconds']:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (CPU)")
    parser.add_argument(
        "--sections",
        default=",".join(SECTIONS),
        help=f"comma-separated, of {', '.join(SECTIONS)} (default: all)",
    )
    parser.add_argument(
        "--peak-trees",
        default="17m,124m",
        help="section peak's trees, of 17m and 124m (ignored with --smoke)",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    sections = [name for name in args.sections.split(",") if name]
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        parser.error(f"--sections: unknown {unknown}; valid: {', '.join(SECTIONS)}")
    trees = [name for name in args.peak_trees.split(",") if name]
    if set(trees) - {"17m", "124m"}:
        parser.error(f"--peak-trees: {trees}; valid: 17m, 124m")
    if jax.devices()[0].platform == "cpu" and not args.smoke:
        print("no accelerator: these figures need a GPU (use --smoke to test)")

    def save(result: dict) -> None:
        if args.json:
            args.json.write_text(json.dumps(result, indent=2))

    print_report(run(args.smoke, sections, trees, save=save if args.json else None))


if __name__ == "__main__":
    main()
