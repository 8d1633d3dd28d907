"""Update time of the elementwise optimizers: gradax, optax and the bandwidth floor.

For adam, adamw, lion, adafactor and sgd+momentum on the ~5M-parameter
GPT-like tree, one jitted ``update`` of each library is timed side by side,
with the optimizer state donated and threaded from call to call as in a
training loop (a fresh state buffer each call would time page faults, not
bandwidth). The floor is the bytes the update must read and write
(gradients, params where used, and every state buffer read and written, plus
the updates written) divided by the machine's copy bandwidth, measured in the
same run.

Each row also says whether the two compiled programs are the same (the HLO
text with names' numeric suffixes and metadata left out), and the bytes
XLA's cost analysis counts for each: where the programs are the same, a
time ratio away from 1 is noise of the machine, not a difference of the
libraries.

``--quick`` times adamw, lion and sgd+momentum only, on a 1-layer tree
(about 0.9M parameters), with fewer rounds.

Run: python benchmarks/bench_optimizers.py [--quick] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import jax
import jax.numpy as jnp

import gradax

from .common import (
    comparison,
    count_params,
    fake_grads,
    gpt_like_params,
    time_interleaved,
)

# A name's numeric suffix ("%add.17", "param_0.2"), not a number ("0.001").
_SUFFIX = re.compile(r"\b([A-Za-z_][\w-]*)\.\d+\b")
_METADATA = re.compile(r", metadata=\{[^}]*\}")


# Quick mode leaves out adam (adamw's program less the decay) and adafactor
# (the slowest to compile).
QUICK = ("adamw", "lion", "sgd_momentum")


def _state_bytes(state) -> int:
    return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state))


def program_text(compiled) -> str:
    """Compiled HLO without metadata, numeric name suffixes or line order.

    The text before the first computation (the module header and the
    FileNames/FunctionNames/StackFrames tables of source locations) is left
    out with the metadata: it names the Python files, not the program.
    """
    lines = compiled.as_text().splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith(("%", "ENTRY")))
    kept = (
        _SUFFIX.sub(r"\1", _METADATA.sub("", line)).strip() for line in lines[first:]
    )
    return "\n".join(sorted(line for line in kept if line))


def bytes_accessed(compiled) -> float:
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    return float(cost.get("bytes accessed", 0.0))


def donating_update(tx, grads, params):
    """A no-argument call of ``tx.update`` that threads a donated state.

    Returns the call and its compiled program.
    """
    state = tx.init(params)

    # The new state comes first among the outputs: JAX hands donated buffers
    # to outputs of the same shape in output order, and with the updates
    # first, the updates would take the first moment's buffers, the new first
    # moment the second's, and so on, each costing XLA a copy.
    def update(grads, state, params):
        updates, state = tx.update(grads, state, params)
        return state, updates

    compiled = jax.jit(update, donate_argnums=1).lower(grads, state, params).compile()
    box = [state]

    def call():
        box[0], updates = compiled(grads, box[0], params)
        return updates

    return call, compiled


def run(quick: bool = False) -> dict:
    import optax

    params = gpt_like_params(layers=1 if quick else 6)
    grads = fake_grads(params)
    param_bytes = sum(p.size * p.dtype.itemsize for p in jax.tree.leaves(params))
    pairs = {
        "adam": (gradax.adam(1e-3), optax.adam(1e-3), False),
        "adamw": (gradax.adamw(1e-3), optax.adamw(1e-3), True),
        # Lion's default weight decay (1e-3) reads the params.
        "lion": (gradax.lion(1e-4), optax.lion(1e-4), True),
        "adafactor": (gradax.adafactor(1e-3), optax.adafactor(1e-3), True),
        "sgd_momentum": (
            gradax.sgd(1e-2, momentum=0.9),
            optax.sgd(1e-2, momentum=0.9),
            False,
        ),
    }
    if quick:  # each program costs about a second to compile, adafactor two
        pairs = {name: pairs[name] for name in QUICK}
    # Read and write 128 MiB, writing back into the input's buffer (a fresh
    # output buffer each call would time page faults, not bandwidth).
    copy = jax.jit(lambda x: x + 1.0, donate_argnums=0)
    holder = {"big": jnp.ones((32 * 1024 * 1024,), jnp.float32)}
    big_size = holder["big"].size

    def copy_once():
        holder["big"] = copy(holder["big"])
        return holder["big"]

    fns = {"copy_128MiB": copy_once}
    floors_bytes = {}
    structure = {}
    for name, (ours, theirs, reads_params) in pairs.items():
        programs = {}
        for lib, tx in (("gradax", ours), ("optax", theirs)):
            fns[f"{name}/{lib}"], programs[lib] = donating_update(tx, grads, params)
        structure[name] = {
            "same_program": program_text(programs["gradax"])
            == program_text(programs["optax"]),
            "gradax_mb_accessed": bytes_accessed(programs["gradax"]) / 1e6,
            "optax_mb_accessed": bytes_accessed(programs["optax"]) / 1e6,
        }
        state = ours.init(params)
        # grads read + updates written (+ params read) + state read and written.
        floors_bytes[name] = (
            2 * param_bytes
            + (param_bytes if reads_params else 0)
            + 2 * _state_bytes(state)
        )
    times = time_interleaved(fns, repeats=5 if quick else 20, inner=3)
    bandwidth = 2 * big_size * 4 / times.pop("copy_128MiB")
    rows = {}
    for name in pairs:
        floor = floors_bytes[name] / bandwidth
        rows[name] = {
            "gradax_ms": times[f"{name}/gradax"] * 1e3,
            "optax_ms": times[f"{name}/optax"] * 1e3,
            "floor_ms": floor * 1e3,
            "gradax_over_optax": times[f"{name}/gradax"] / times[f"{name}/optax"],
            "gradax_over_floor": times[f"{name}/gradax"] / floor,
            "floor_mb": floors_bytes[name] / 1e6,
            **structure[name],
        }
    n = count_params(params)
    same = [name for name in pairs if structure[name]["same_program"]]
    notes = [
        f"optimizers floor: the bytes each update must move at "
        f"{bandwidth / 1e9:.1f} GB/s"
    ]
    if same:
        notes.append(
            f"{', '.join(same)}: gradax and optax compile to the same program; "
            "a ratio away from 1 there is the machine's noise"
        )
    return {
        "benchmark": "optimizer update, GPT-like tree",
        "params": n,
        "device": str(jax.devices()[0]),
        "copy_bandwidth_gb_s": bandwidth / 1e9,
        "rows": rows,
        "comparisons": [
            comparison(
                f"{name.replace('_momentum', '+mom')} {n / 1e6:.1f}M",
                times[f"{name}/gradax"],
                "optax",
                times[f"{name}/optax"],
                "bandwidth",
                floors_bytes[name] / bandwidth,
            )
            for name in pairs
        ],
        "notes": notes,
    }


def main() -> None:
    """Print the table (``--json FILE`` writes the figures too)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    r = run(args.quick)
    print(
        f"{r['benchmark']} ({r['params']:,} params) on {r['device']}, "
        f"copy bandwidth {r['copy_bandwidth_gb_s']:.1f} GB/s"
    )
    print(
        f"  {'optimizer':14s} {'gradax ms':>10s} {'optax ms':>10s} {'floor ms':>9s} "
        f"{'g/optax':>8s} {'g/floor':>8s} {'same HLO':>8s} "
        f"{'MB: floor':>9s} {'gradax':>7s} {'optax':>7s}"
    )
    for name, row in r["rows"].items():
        print(
            f"  {name:14s} {row['gradax_ms']:10.2f} {row['optax_ms']:10.2f} "
            f"{row['floor_ms']:9.2f} {row['gradax_over_optax']:8.3f} "
            f"{row['gradax_over_floor']:8.2f} {str(row['same_program']):>8s} "
            f"{row['floor_mb']:9.1f} {row['gradax_mb_accessed']:7.1f} "
            f"{row['optax_mb_accessed']:7.1f}"
        )
    if args.json:
        args.json.write_text(json.dumps(r, indent=2))
