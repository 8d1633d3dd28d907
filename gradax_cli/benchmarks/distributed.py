"""Distributed Muon on 8 simulated devices: collective bytes and time.

1. Bytes moved by collectives per optimizer step (read from the compiled
   HLO), for distributed Muon against ZeRO-1-style AdamW on the same tree.
   Both steps take parameters, gradients and state sharded along the first
   axis over the 8 devices and return the updated parameters replicated (the
   all-gather ZeRO-1 does before the next forward pass).
2. Time per update of distributed Muon against letting the compiler partition
   the plain iteration (``distributed=False``), side by side.

``--quick`` uses the 1-layer tree of bench_muon's quick mode and only part 1
for distributed Muon and AdamW (compiling the sharded steps is most of its
time): no compiler-partitioned step, no timings.

It needs several devices: on a CPU, ``XLA_FLAGS`` must hold
``--xla_force_host_platform_device_count=8`` before JAX starts, as
``gradax bench`` and ``benchmarks/bench_distributed.py`` arrange.

Run: python benchmarks/bench_distributed.py [--quick] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import re
import warnings
from pathlib import Path

import jax
import numpy as np

import gradax

from . import SIMULATED_DEVICES
from .common import comparison, time_interleaved
from .muon import QUICK_LAYERS, muon_tree

P = jax.sharding.PartitionSpec
_OP = re.compile(
    r"=\s*(\(?[^=]*?)\s+(all-gather|all-reduce|reduce-scatter|all-to-all|"
    r"collective-permute)(?:-start)?\("
)
_COMMENT = re.compile(r"/\*.*?\*/")
_SHAPE = re.compile(r"(f64|f32|bf16|f16|s32|u32|pred)\[([\d,]*)\]")
_BYTES = {"f64": 8, "f32": 4, "bf16": 2, "f16": 2, "s32": 4, "u32": 4, "pred": 1}


def collective_bytes(hlo: str, devices: int) -> dict[str, float]:
    """Bytes each device receives, per kind of collective, from HLO text."""
    totals: dict[str, float] = {}
    share = (devices - 1) / devices
    for line in hlo.splitlines():
        # A combined collective's tuple type numbers its elements with
        # comments (`/*index=5*/`) whose "=" the pattern would stop at.
        match = _OP.search(_COMMENT.sub("", line))
        if not match:
            continue
        out_type, kind = match.groups()
        size = 0
        for dtype, dims in _SHAPE.findall(out_type):
            count = int(np.prod([int(d) for d in dims.split(",") if d] or [1]))
            size += count * _BYTES[dtype]
        # Result bytes times the fraction that comes from other devices;
        # an all-reduce moves its data twice (reduce-scatter + all-gather);
        # a reduce-scatter's result is 1/devices of what it reduces, of
        # which each device receives the other devices' parts.
        factor = {"all-reduce": 2 * share, "reduce-scatter": devices - 1}.get(
            kind, share
        )
        totals[kind] = totals.get(kind, 0.0) + size * factor
    return totals


def compiled_step(tx, params, mesh):
    sharded = jax.NamedSharding(mesh, P("d"))
    replicated = jax.NamedSharding(mesh, P())
    params = jax.device_put(params, sharded)
    state = jax.jit(tx.init)(params)

    def step(p, g, s):
        u, s = tx.update(g, s, p)
        return gradax.apply_updates(p, u), s

    out = (jax.tree.map(lambda _: replicated, params), None)
    fn = jax.jit(step, out_shardings=out)
    compiled = fn.lower(params, params, state).compile()
    return compiled, (params, params, state)


def hlo_text(compiled) -> str:
    """The HLO text of a compiled step (``None`` only for a deserialized one)."""
    text = compiled.as_text()
    if text is None:
        raise RuntimeError("the compiled step carries no HLO text")
    return text


def run(quick: bool = False) -> dict:
    warnings.filterwarnings("ignore", message="gradax.muon routes")
    devices = jax.device_count()
    if devices < 2:
        raise RuntimeError(
            f"needs several devices, found {devices}; set "
            f"XLA_FLAGS={SIMULATED_DEVICES} before JAX starts"
        )
    mesh = jax.make_mesh((devices,), ("d",), axis_types=(jax.sharding.AxisType.Auto,))
    params = muon_tree(layers=QUICK_LAYERS if quick else 6)
    # jax.sharding.use_mesh before jax 0.7.1 added jax.set_mesh.
    set_mesh = (
        jax.set_mesh if hasattr(jax, "set_mesh") else jax.sharding.use_mesh  # type: ignore[missing-attribute]
    )
    with set_mesh(mesh):
        muon_c, muon_args = compiled_step(gradax.muon(0.02), params, mesh)
        collective = {"muon_distributed": collective_bytes(hlo_text(muon_c), devices)}
        if not quick:
            plain_c, plain_args = compiled_step(
                gradax.muon(0.02, distributed=False), params, mesh
            )
            collective["muon_compiler_partitioned"] = collective_bytes(
                hlo_text(plain_c), devices
            )
        adamw_c, _ = compiled_step(gradax.adamw(1e-3), params, mesh)
        collective["adamw_zero1"] = collective_bytes(hlo_text(adamw_c), devices)
        times: dict[str, float] | None = None  # stays None in quick mode
        if not quick:
            times = time_interleaved(
                {
                    "distributed": lambda: muon_c(*muon_args),
                    "compiler_partitioned": lambda: plain_c(*plain_args),
                },
                repeats=8,
                inner=1,
            )
    total = {name: sum(kinds.values()) for name, kinds in collective.items()}
    adamw_total = total["adamw_zero1"]
    result = {
        "benchmark": "distributed Muon vs ZeRO-1 AdamW, 8 simulated CPU devices",
        "collective_bytes_per_device": collective,
        "bytes_ratio_muon_over_adamw": total["muon_distributed"] / adamw_total,
        "comparisons": [],
        "notes": [
            "distributed: collectives move "
            f"{total['muon_distributed'] / 2**20:.2f} MiB per device per step "
            f"for Muon, {adamw_total / 2**20:.2f} MiB for ZeRO-1 AdamW"
        ],
    }
    if times is None:
        result["note"] = (
            "quick: the compiler-partitioned Muon step and the timings are left out"
        )
        result["notes"].append("distributed: no timings in quick mode")
        return result
    result |= {
        "bytes_ratio_plain_over_adamw": total["muon_compiler_partitioned"]
        / adamw_total,
        "seconds": times,
        "time_ratio_distributed_over_partitioned": times["distributed"]
        / times["compiler_partitioned"],
        "comparisons": [
            comparison(
                f"muon sharded x{devices}",
                times["distributed"],
                "gradax (distributed=False)",
                times["compiler_partitioned"],
            )
        ],
    }
    return result


def main() -> None:
    """Print the figures (``--json FILE`` writes them too)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    r = run(args.quick)
    print(r["benchmark"])
    for name, kinds in r["collective_bytes_per_device"].items():
        detail = ", ".join(f"{k} {v / 2**20:.2f} MiB" for k, v in kinds.items())
        print(f"  {name:26s} {sum(kinds.values()) / 2**20:8.2f} MiB  ({detail})")
    print(f"  muon/adamw bytes: {r['bytes_ratio_muon_over_adamw']:.3f}")
    if "note" in r:
        print(f"  {r['note']}")
    else:
        print(
            "  compiler-partitioned muon/adamw bytes: "
            f"{r['bytes_ratio_plain_over_adamw']:.3f}"
        )
        for name, seconds in r["seconds"].items():
            print(f"  {name:26s} {seconds * 1e3:8.1f} ms")
        print(
            f"  distributed/partitioned time: "
            f"{r['time_ratio_distributed_over_partitioned']:.3f}"
        )
    if args.json:
        args.json.write_text(json.dumps(r, indent=2))
