"""What gradax.with_metrics adds to a step: time, and reads of each leaf.

For AdamW and Muon (alone, and behind ``clip_by_global_norm``, as
bench_state_memory.py runs AdamW), each step is compiled twice: as it is,
and wrapped in ``gradax.with_metrics`` with the default metrics (per-group
gradient, update and parameter norms, learning rates, the clip). Both are
jitted with the state donated and timed side by side in one run
(``time_interleaved``: alternating rounds, medians), on two trees:

- ``w256``: bench_state_memory.py's tree at its default width, 256 (6
  layers, about 4.9M parameters in leaves of 65K to 262K elements);
- ``t434``: bench_overhead.py's 434-leaf transformer-shaped tree (width 16:
  tiny leaves, where the cost of a step is the number of kernels).

The issue's target is a ratio of at most 1.05. Next to the times, the table
counts, in each compiled program's HLO, the instructions that read each
gradient leaf and each parameter leaf (fusions and other operations that
take the leaf as an operand, bitcasts followed): the metrics need one sum
of squares of each, which adds a read wherever XLA does not fuse the sum
into an operation that already reads the leaf. On the CPU backend no
reduction joins another fusion (XLA:CPU has no multi-output fusion), so
each metric sum of a large leaf is a kernel of its own that reads it once
more; the small leaves of a group are joined as they are (by dtype and
shape past the first axis) and squared inside one sum, so the optimizer's
own kernels stay as they were; behind a clip the gradients' sums are the
clip's own (the same operations, computed once).

``--quick`` times the 434-leaf tree and a 1-layer w256 tree, with fewer
rounds. ``--tpu v5e:2x4`` compiles the same steps for one chip of a TPU
topology ahead of time (the ``libtpu`` package importable, no TPU) and
prints the bytes each accesses (XLA's cost analysis) and its fusions,
without and with the metrics.

Run: python benchmarks/bench_monitor.py [--quick] [--tpu TOPOLOGY] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

import jax

sys.path.insert(0, str(Path(__file__).parent))
from bench_overhead import _transformer_params  # noqa: E402
from common import fake_grads, gpt_like_params, time_interleaved  # noqa: E402

import gradax  # noqa: E402
from gradax_cli.benchmarks.optimizers import donating_update  # noqa: E402


def optimizers(params) -> dict:
    """The steps compared, each as it is (the metrics wrap it)."""
    # The embedding (and the output head, where the tree has one) on AdamW.
    exclude = "embed|head" if "head" in params else "embed"
    _, dims = gradax.muon_labels(params, exclude=exclude, print_report=False)
    clip = gradax.clip_by_global_norm(1.0)

    def muon():
        return gradax.muon(
            0.02, adam_learning_rate=1e-3, muon_weight_dimension_numbers=dims
        )

    return {
        "adamw": gradax.adamw(1e-3, weight_decay=0.01),
        "clip+adamw": gradax.chain(clip, gradax.adamw(1e-3, weight_decay=0.01)),
        "muon": muon(),
        "clip+muon": gradax.chain(clip, muon()),
    }


_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?(%[\w.\-]+) = (.*)$")
_OPERAND = re.compile(r"%[\w.\-]+")
_ARGUMENT = re.compile(r'op_name="(\w+)')


def _entry_instructions(compiled) -> list[tuple[str, str, str, str]]:
    """`(name, opcode, operands, argument)` of each instruction of the
    entry computation; `argument` names the step's argument a parameter
    instruction comes from ("grads", "state", "params"), else ""."""
    text = compiled.as_text()
    out = []
    for line in text[text.index("\nENTRY") :].splitlines()[1:]:
        match = _INSTRUCTION.match(line)
        if not match:
            continue
        name, body = match.groups()
        if body.startswith("("):  # a tuple type: skip to its closing parenthesis
            depth, end = 0, 0
            while True:
                depth += {"(": 1, ")": -1}.get(body[end], 0)
                if depth == 0:
                    break
                end += 1
            rest = body[end + 2 :]
        else:
            rest = body.split(" ", 1)[1]
        opcode, _, arguments = rest.partition("(")
        argument = ""
        if opcode == "parameter":
            found = _ARGUMENT.search(body)
            argument = found.group(1) if found else ""
        out.append((name, opcode, arguments.split(")", 1)[0], argument))
    return out


def leaf_reads(compiled, argument: str) -> int:
    """How many instructions of the compiled step read a leaf of `argument`
    ("grads" or "params"); a bitcast is a view, its readers count."""
    instructions = _entry_instructions(compiled)
    readers: dict[str, list[tuple[str, str]]] = {}
    for name, opcode, operands, _ in instructions:
        for operand in _OPERAND.findall(operands):
            readers.setdefault(operand, []).append((name, opcode))

    def reads(name: str) -> int:
        return sum(
            reads(reader) if opcode == "bitcast" else 1
            for reader, opcode in readers.get(name, [])
        )

    return sum(
        reads(name)
        for name, opcode, _, source in instructions
        if opcode == "parameter" and source == argument
    )


def run(quick: bool = False, repeats: int | None = None) -> dict:
    trees = {
        "w256": gpt_like_params(d_model=256, layers=1 if quick else 6),
        "t434": _transformer_params(),
    }
    repeats = repeats or (5 if quick else 15)
    fns, reads, programs = {}, {}, {}
    for tree_name, params in trees.items():
        grads = fake_grads(params)
        n = len(jax.tree.leaves(params))
        for name, tx in optimizers(params).items():
            for watched in (False, True):
                candidate = gradax.with_metrics(tx) if watched else tx
                key = f"{tree_name} {name}{' +metrics' if watched else ''}"
                fns[key], compiled = donating_update(candidate, grads, params)
                reads[key] = {
                    "grads": leaf_reads(compiled, "grads") / n,
                    "params": leaf_reads(compiled, "params") / n,
                }
                programs[key] = compiled.as_text().count(" fusion(")
    times = time_interleaved(fns, repeats=repeats, inner=2 if quick else 3)
    ratios = {
        key: times[key] / times[key.removesuffix(" +metrics")]
        for key in times
        if key.endswith(" +metrics")
    }
    return {
        "benchmark": "with_metrics: step time and leaf reads",
        "device": str(jax.devices()[0]),
        "jax": jax.__version__,
        "load": os.getloadavg(),
        "leaves": {k: len(jax.tree.leaves(v)) for k, v in trees.items()},
        "seconds": times,
        "ratio_with_metrics": ratios,
        "reads_per_leaf": reads,
        "fusions": programs,
    }


def run_tpu(topology: str) -> dict:
    """Bytes each step accesses and its fusions, with and without the
    metrics, compiled ahead of time for one chip of a TPU `topology`.

    Nothing runs, so nothing is timed: XLA's cost analysis counts the bytes
    the compiled program reads and writes, which bound a memory-bound
    optimizer step's time. gradax chooses its formulations for the TPU (as
    a process on one traces them).
    """
    from jax.experimental import topologies

    device = topologies.get_topology_desc(topology, "tpu").devices[0]
    jax.default_backend = lambda: "tpu"
    one = jax.sharding.NamedSharding(
        jax.sharding.Mesh([device], ("one",)), jax.sharding.PartitionSpec()
    )

    def placed(tree):
        return jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=one), tree
        )

    trees = {
        "w256": gpt_like_params(d_model=256, layers=6),
        "t434": _transformer_params(),
    }
    rows = {}
    for tree_name, params in trees.items():
        for name, tx in optimizers(params).items():
            for watched in (False, True):
                candidate = gradax.with_metrics(tx) if watched else tx

                def update(grads, state, params, candidate=candidate):
                    updates, state = candidate.update(grads, state, params)
                    return state, updates

                state = placed(jax.eval_shape(candidate.init, params))
                compiled = (
                    jax.jit(update, donate_argnums=1)
                    .lower(placed(params), state, placed(params))
                    .compile()
                )
                cost = compiled.cost_analysis()
                cost = cost[0] if isinstance(cost, list) else cost
                key = f"{tree_name} {name}{' +metrics' if watched else ''}"
                rows[key] = {
                    "bytes": float(cost["bytes accessed"]),
                    "fusions": compiled.as_text().count(" fusion("),
                }
    return {"device": f"{device.device_kind} (ahead of time)", "steps": rows}


def print_report(result: dict) -> None:
    """`run`'s result as a table: times, their ratio, and the leaf reads."""
    print(
        f"{result['benchmark']} ({result['device']}, jax {result['jax']}, "
        f"load {result['load'][0]:.2f}; leaves {result['leaves']})"
    )
    head = ("step", "ms", "ms +metrics", "ratio", "grad reads", "param reads")
    print("  {:16s} {:>9s} {:>12s} {:>6s} {:>12s} {:>12s}".format(*head))
    for key, ratio in result["ratio_with_metrics"].items():
        base = key.removesuffix(" +metrics")
        r0, r1 = result["reads_per_leaf"][base], result["reads_per_leaf"][key]
        print(
            f"  {base:16s} {result['seconds'][base] * 1e3:9.2f} "
            f"{result['seconds'][key] * 1e3:12.2f} {ratio:6.2f} "
            f"{r0['grads']:5.2f} ->{r1['grads']:5.2f} "
            f"{r0['params']:5.2f} ->{r1['params']:5.2f}"
        )
    print("  (reads: instructions reading each gradient / parameter leaf, on average)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--tpu",
        metavar="TOPOLOGY",
        help="bytes accessed, compiled for one chip of a TPU topology ahead of "
        "time (e.g. v5e:2x4; the libtpu package importable, no TPU)",
    )
    args = parser.parse_args()
    if args.tpu:
        result = run_tpu(args.tpu)
        print(f"bytes each step accesses, {result['device']}")
        for key, row in result["steps"].items():
            if key.endswith(" +metrics"):
                base = result["steps"][key.removesuffix(" +metrics")]
                print(
                    f"  {key.removesuffix(' +metrics'):16s} "
                    f"{base['bytes'] / 2**20:9.2f} MiB -> {row['bytes'] / 2**20:9.2f}"
                    f" MiB ({row['bytes'] / base['bytes']:.3f}x), fusions "
                    f"{base['fusions']} -> {row['fusions']}"
                )
        if args.json:
            args.json.write_text(json.dumps(result, indent=2))
        return
    result = run(args.quick, args.repeats)
    print_report(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
