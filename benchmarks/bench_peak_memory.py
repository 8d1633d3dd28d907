"""Peak memory of one training step, in bytes per parameter (issue 46).

A run fails with out-of-memory at the step's peak, not at rest. For each
configuration this compiles one training step, ``tx.update`` then
``apply_updates`` with the parameters and the state donated (as a training
loop does), and reads XLA's compiled memory analysis:

- ``params``: the parameters' bytes (inputs, donated, reused for the new
  parameters);
- ``grads``: the gradients' bytes (inputs);
- ``state``: the optimizer state's bytes at rest (donated, reused);
- ``temps``: ``temp_size_in_bytes`` of the compiled step, everything XLA
  allocates besides its inputs and outputs: float32 copies of a whole leaf,
  copies of donated buffers it could not update in place, work space;
- ``peak``: their sum, what the step needs at once (outputs that do not
  alias a donated input would come on top: the column ``extra out`` shows
  them, 0 when every output reuses an input's buffer).

All divided by the parameter count. Nothing is allocated: the trees are
``jax.ShapeDtypeStruct``s, so a 124M-parameter step compiles on a laptop.
Two GPT-shaped trees (embedding, per layer qkv/proj/up/down and norms):

- ``17m``: 4 layers of width 512, vocabulary 8192 (17.0M parameters);
- ``124m``: GPT-2 small's shapes, 12 layers of width 768, vocabulary
  50257 (124M parameters; compiling its steps takes minutes on 2 cores).

``--time`` times the training steps instead, on the width-256 bench tree of
``bench_state_memory.py`` (6 layers, 4.9M parameters, real arrays; or
``--time-tree 17m``, the 17m tree above, whose larger leaves are stored
from recomputed passes): each
memory feature as it is, and as it was before issue 46 (``before``: one
pass of the update rule, the 8-bit leaves stored from the float32 moments
it wrote out, the master's halves split apart; compiled with those
formulations switched back in), interleaved in one run, as ratios to
float32 AdamW's step.

``--recompute-all`` stores every 8-bit leaf from recomputed passes
(``gradax.int8_blockwise.recompute_min_size = 0``; by default leaves under
2**20 elements are stored in one pass).

``--tpu v5e:2x4`` compiles each step for one chip of that TPU topology
ahead of time (XLA:TPU's fusion, not XLA:CPU's), with the ``libtpu`` package
importable (``pip install --target DIR libtpu``, ``PYTHONPATH=DIR``); no TPU
is needed.

Run: python benchmarks/bench_peak_memory.py [--tree 17m|124m|both] [--tpu TOPOLOGY]
[--only SUBSTRING] [--markdown] [--json FILE] [--time] [--recompute-all]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import gradax  # noqa: E402
from gradax_cli.benchmarks.common import gpt_like_shapes  # noqa: E402

# Trees timed with real arrays: bench_state_memory.py's width-256 tree
# (leaves of 65K to 262K elements) and the 17m tree above.
TIME_TREES = {
    "w256": dict(d_model=256, layers=6, vocab=512),
    "17m": dict(d_model=512, layers=4, vocab=8192),
}
TREES = {
    "17m": dict(d_model=512, layers=4, vocab=8192),
    "124m": dict(d_model=768, layers=12, vocab=50257),
}


def gpt_shapes(d_model: int, layers: int, vocab: int, dtype: Any) -> dict[str, Any]:
    """The bench tree of `benchmarks/common.py`'s `gpt_like_params`, as shapes."""
    shapes = gpt_like_shapes(d_model, layers, vocab)
    return {k: jax.ShapeDtypeStruct(s, dtype) for k, s in shapes.items()}


def configurations(params: Any) -> dict[str, tuple[Any, Any]]:
    """``name -> (transformation, parameter dtype)``: each memory feature."""
    q8 = gradax.int8_blockwise()
    f8 = gradax.int8_blockwise(code="float")
    _, dims = gradax.muon_labels(params, exclude="embed", print_report=False)
    master, rounding = gradax.master_weights, gradax.stochastic_rounding
    f32, bf16 = jnp.float32, jnp.bfloat16

    def adamw(spec=None):
        if spec is None:
            return gradax.adamw(1e-3)
        return gradax.adamw(1e-3, mu_dtype=spec, nu_dtype=spec)

    def muon(spec=None):
        kwargs = {} if spec is None else {"mu_dtype": spec}
        return gradax.muon(
            0.02, adam_learning_rate=1e-3, muon_weight_dimension_numbers=dims, **kwargs
        )

    return {
        "adamw (reference)": (adamw(), f32),
        "adamw, int8 moments": (adamw(q8), f32),
        "adamw, int8 moments (float code)": (adamw(f8), f32),
        "sgd momentum (reference)": (gradax.sgd(0.1, momentum=0.9), f32),
        "sgd momentum, int8 accumulator": (
            gradax.sgd(0.1, momentum=0.9, accumulator_dtype=q8),
            f32,
        ),
        "muon (reference)": (muon(), f32),
        "muon, int8 momentum": (muon(q8), f32),
        "bf16: adamw, round to nearest": (adamw(), bf16),
        "bf16: adamw int8, round to nearest": (adamw(q8), bf16),
        "bf16: master_weights(adamw)": (master(adamw()), bf16),
        "bf16: master_weights(adamw int8)": (master(adamw(q8)), bf16),
        "bf16: master_weights(adamw int8 float code)": (master(adamw(f8)), bf16),
        "bf16: stochastic_rounding(adamw)": (rounding(adamw()), bf16),
        "bf16: stochastic_rounding(adamw int8)": (rounding(adamw(q8)), bf16),
        "bf16: stochastic_rounding(adamw int8 float code)": (rounding(adamw(f8)), bf16),
        "bf16: master_weights(muon int8)": (master(muon(q8)), bf16),
        "bf16: stochastic_rounding(muon int8)": (rounding(muon(q8)), bf16),
    }


def _itemsize(dtype: Any) -> int:
    if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        return 8  # a threefry key's data: two uint32 words
    return jnp.dtype(dtype).itemsize


def _bytes(tree: Any) -> int:
    leaves = jax.tree.leaves(tree)
    return sum(math.prod(x.shape) * _itemsize(x.dtype) for x in leaves)


# Where the step is compiled: None, this process's default device; with
# --tpu, one device of a TPU topology, compiled ahead of time (no TPU needed).
PLACE: Any = None


def place_on_tpu(topology: str) -> None:
    """Compile the steps for one chip of `topology` (needs `libtpu` importable)."""
    global PLACE
    from jax.experimental import topologies

    device = topologies.get_topology_desc(topology, "tpu").devices[0]
    # What gradax asks to choose a formulation per backend (`one_loop`, the
    # Newton-Schulz method): the TPU's, as a process on a TPU would trace.
    jax.default_backend = lambda: "tpu"
    mesh = jax.sharding.Mesh([device], ("one",))
    PLACE = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())


def where() -> str:
    """The platform the steps are compiled for."""
    if PLACE is None:
        return jax.devices()[0].platform
    device = next(iter(PLACE.device_set))
    return f"one {device.device_kind} chip, compiled ahead of time"


def compile_step(tx: Any, params: Any):
    """The compiled training step: update + apply_updates, params and state donated."""
    state = jax.eval_shape(tx.init, params)
    if PLACE is not None:  # --tpu: every input on one device of the topology
        params, state = (
            jax.tree.map(
                lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=PLACE), tree
            )
            for tree in (params, state)
        )
    grads = params  # same shapes and dtypes

    def step(params, state, grads):
        updates, state = tx.update(grads, state, params)
        return gradax.apply_updates(params, updates), state

    lowered = jax.jit(step, donate_argnums=(0, 1)).lower(params, state, grads)
    return lowered.compile(), state


def measure(tx: Any, params: Any) -> dict[str, float]:
    n = sum(math.prod(p.shape) for p in jax.tree.leaves(params))
    start = time.perf_counter()
    compiled, state = compile_step(tx, params)
    seconds = time.perf_counter() - start
    analysis = compiled.memory_analysis()
    extra_out = analysis.output_size_in_bytes - analysis.alias_size_in_bytes
    row = {
        "params": _bytes(params) / n,
        "grads": _bytes(params) / n,
        "state": _bytes(state) / n,
        "temps": analysis.temp_size_in_bytes / n,
        "extra out": extra_out / n,
    }
    row["peak"] = row["params"] + row["grads"] + row["state"] + row["temps"]
    row["peak"] += row["extra out"]
    row["compile_s"] = seconds
    return row


def run(tree: str, only: str | None = None, shape: dict | None = None) -> dict:
    """Every configuration's row on the tree `tree` of TREES (or of `shape`,
    the keyword arguments of `gpt_shapes` under the name `tree`)."""
    shape = TREES[tree] if shape is None else shape
    rows = {}
    names = configurations(gpt_shapes(**shape, dtype=jnp.float32))
    for name, (tx, dtype) in names.items():
        if only and only not in name:
            continue
        params = gpt_shapes(**shape, dtype=dtype)
        rows[name] = measure(tx, params)
        print(
            f"  [{tree}] {name}: temps {rows[name]['temps']:.2f} B/param",
            file=sys.stderr,
        )
    n = sum(
        math.prod(p.shape)
        for p in jax.tree.leaves(gpt_shapes(**shape, dtype=jnp.float32))
    )
    return {"tree": tree, "shape": shape, "params": n, "rows": rows}


@contextlib.contextmanager
def before_issue_46():
    """Steps traced inside are formulated as before issue 46 (same numbers)."""
    from gradax.precision import int8 as quantized
    from gradax.precision import master

    def old_encode(values, scales, block_size, signed, code="dynamic"):
        if code == "float":
            per_element = quantized._per_element(scales, values.shape, block_size)
            return quantized._float_code.encode(values, per_element, signed)
        safe = jnp.where(scales > 0, scales, 1.0)
        per_element = quantized._per_element(safe, values.shape, block_size)
        return (quantized._encode(values / per_element, signed) - 128).astype(jnp.int8)

    saved = quantized._elementwise, quantized.encode_with_scales, master.one_loop
    quantized._elementwise = lambda *args: False
    quantized.encode_with_scales = old_encode
    master.one_loop = lambda arrays: arrays
    try:
        yield
    finally:
        quantized._elementwise, quantized.encode_with_scales, master.one_loop = saved


def _timed_step(tx, params, grads):
    """A no-argument training step (params and state donated), compiled now."""
    state = tx.init(params)

    def step(params, state, grads):
        updates, state = tx.update(grads, state, params)
        return gradax.apply_updates(params, updates), state

    compiled = (
        jax.jit(step, donate_argnums=(0, 1)).lower(params, state, grads).compile()
    )
    box = [params, state]

    def call():
        box[0], box[1] = compiled(box[0], box[1], grads)
        return box[0]

    return call


def run_times(repeats: int = 25, tree: str = "w256") -> dict[str, Any]:
    from common import fake_grads, gpt_like_params, time_interleaved

    shape = TIME_TREES[tree]
    params32 = gpt_like_params(**shape)
    q8 = gradax.int8_blockwise()
    f8 = gradax.int8_blockwise(code="float")
    bf16 = jnp.bfloat16
    rows = {
        "adamw f32 (reference)": (gradax.adamw(1e-3), jnp.float32),
        "adamw int8": (gradax.adamw(1e-3, mu_dtype=q8, nu_dtype=q8), jnp.float32),
        "adamw int8 float code": (
            gradax.adamw(1e-3, mu_dtype=f8, nu_dtype=f8),
            jnp.float32,
        ),
        "sgd momentum int8": (
            gradax.sgd(0.1, momentum=0.9, accumulator_dtype=q8),
            jnp.float32,
        ),
        "bf16 nearest adamw int8": (gradax.adamw(1e-3, mu_dtype=q8, nu_dtype=q8), bf16),
        "bf16 master adamw": (gradax.master_weights(gradax.adamw(1e-3)), bf16),
        "bf16 master adamw int8": (
            gradax.master_weights(gradax.adamw(1e-3, mu_dtype=q8, nu_dtype=q8)),
            bf16,
        ),
        "bf16 rounding adamw int8": (
            gradax.stochastic_rounding(gradax.adamw(1e-3, mu_dtype=q8, nu_dtype=q8)),
            bf16,
        ),
    }
    fns = {}
    for name, (tx, dtype) in rows.items():
        for version in ("before", "now"):
            if name.endswith("(reference)") and version == "before":
                continue
            params = jax.tree.map(lambda p, d=dtype: jnp.array(p, dtype=d), params32)
            grads = fake_grads(params)
            context = (
                before_issue_46() if version == "before" else contextlib.nullcontext()
            )
            with context:
                fns[f"{name}, {version}"] = _timed_step(tx, params, grads)
    load = os.getloadavg()
    seconds = time_interleaved(fns, repeats=repeats)
    base = seconds["adamw f32 (reference), now"]
    return {
        "params": sum(p.size for p in jax.tree.leaves(params32)),
        "load": load,
        "load_after": os.getloadavg(),
        "seconds": seconds,
        "over_f32_adamw": {k: t / base for k, t in seconds.items()},
    }


COLUMNS = ("params", "grads", "state", "temps", "extra out", "peak")


def print_table(result: dict[str, Any]) -> None:
    shape = result["shape"]
    print(
        "\nPeak of one training step, bytes per parameter: "
        f"{result['params'] / 1e6:.1f}M parameters ({shape['layers']} layers, "
        f"d {shape['d_model']}, vocab "
        f"{shape['vocab']}; {where()})"
    )
    print(f"  {'configuration':50s}" + "".join(f"{c:>10s}" for c in COLUMNS))
    for name, row in result["rows"].items():
        print(f"  {name:50s}" + "".join(f"{row[c]:10.2f}" for c in COLUMNS))


def print_markdown(result: dict[str, Any]) -> None:
    shape = result["shape"]
    print(
        f"\n{result['params'] / 1e6:.1f}M parameters ({shape['layers']} layers of "
        f"width {shape['d_model']}, vocabulary {shape['vocab']}), "
        "bytes per parameter:\n"
    )
    print("| configuration | params | gradients | state | temporaries | peak |")
    print("|---|---|---|---|---|---|")
    for name, row in result["rows"].items():
        cells = [row["params"], row["grads"], row["state"], row["temps"], row["peak"]]
        print(f"| {name} | " + " | ".join(f"{c:.2f}" for c in cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tree", choices=("17m", "124m", "both"), default="17m")
    parser.add_argument("--only", help="only configurations whose name contains this")
    parser.add_argument(
        "--markdown", action="store_true", help="tables for docs/memory.md"
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument("--time", action="store_true", help="time the steps")
    parser.add_argument(
        "--time-tree", choices=tuple(TIME_TREES), default="w256", help="with --time"
    )
    parser.add_argument(
        "--recompute-all",
        action="store_true",
        help="gradax.int8_blockwise.recompute_min_size = 0 (every 8-bit leaf)",
    )
    parser.add_argument(
        "--before",
        action="store_true",
        help="compile the steps as formulated before issue 46 (same numbers)",
    )
    parser.add_argument(
        "--tpu",
        metavar="TOPOLOGY",
        help="compile for one chip of a TPU topology ahead of time (e.g. v5e:2x4; "
        "needs the libtpu package importable, no TPU)",
    )
    args = parser.parse_args()
    if args.tpu:
        place_on_tpu(args.tpu)
    if args.time:
        times = run_times(tree=args.time_tree)
        print(
            f"training step time over float32 AdamW's, tree {args.time_tree} "
            f"({times['params'] / 1e6:.1f}M parameters), medians of 25 "
            "interleaved rounds (load "
            f"{times['load'][0]:.1f} before, {times['load_after'][0]:.1f} after)"
        )
        for name, ratio in times["over_f32_adamw"].items():
            print(f"  {name:40s} {times['seconds'][name] * 1e3:9.2f} ms {ratio:6.2f}")
        if args.json:
            args.json.write_text(json.dumps(times, indent=2))
        return
    trees = ("17m", "124m") if args.tree == "both" else (args.tree,)
    if args.recompute_all:
        gradax.int8_blockwise.recompute_min_size = 0
    print(
        f"load average {os.getloadavg()[0]:.2f}, jax {jax.__version__}", file=sys.stderr
    )
    results = []
    for tree in trees:
        with before_issue_46() if args.before else contextlib.nullcontext():
            result = run(tree, args.only)
        results.append(result)
        (print_markdown if args.markdown else print_table)(result)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
