"""Optimizer state bytes per parameter and step time: 8-bit, Adam-mini, float32.

On the GPT-like bench tree, for chain(clip_by_global_norm, adamw) with
float32 moments (gradax and optax), with both moments 8-bit blockwise
(``gradax.int8_blockwise()``), for Adam-mini (float32 and 8-bit first
moment; embedding full, other matrices one value per output neuron), and
for float32 and 8-bit AdamW with the state in host memory
(``gradax.offload_state``; on a CPU host and device memory are the same
RAM, so those rows show the copies' overhead, not a link's). State bytes
count every array of the state (codes, scales, step counts), wherever it is.

Each step is jitted with its state donated, as a training loop does, and the
candidates are timed side by side in one run (``time_interleaved``): the
ratio to float32 gradax is the figure to read, not the absolute times.

A column and two rows explain the 8-bit ratio on a given machine:

- ``flops/param``: XLA's count of arithmetic operations in the compiled step,
  per parameter (before fusion). Quantizing adds integer and select
  operations to decode and encode each moment; float32 AdamW has few.
- the row ``8-bit load+store only``: decoding and re-encoding both 8-bit
  moments with no update at all. Its ratio is a floor for the 8-bit step on
  this machine: where it exceeds 1.3, no fusion of the update can bring
  the 8-bit step within 1.3x of float32. On an accelerator AdamW is bound
  by memory traffic, where the 8-bit state moves a quarter of the bytes.
- the row ``8-bit load+store, scales held``: the same, but each block is
  encoded with the scale it already has, so no block maximum of the new
  values is taken. The difference to the row above is what the block
  maximum costs: XLA's CPU backend writes the new float32 values to memory
  for the reduction and reads them again to encode them; what remains is
  the map's arithmetic.
- the rows ``gradax adamw 8-bit float code`` and its ``float code`` load+store
  rows: the same with ``int8_blockwise(code="float")``, a small float whose
  exponent is relative to a power-of-two scale. Its codes are bit patterns
  shifted and added. A parameter's two moments take their block maxima in
  one fused reduction and, on a CPU, are encoded in one loop
  (``gradax/precision/int8.py``, ``store_all``).

``--stages`` prints instead the 8-bit step taken apart (issue 35, item 3):
decoding both moments, the block maximum, encoding with the scales held,
the whole store, for each code, next to float32 AdamW's step and plain
copies of the same bytes, all timed side by side in one run.
A second table counts what a training step keeps between steps, the
parameters *and* the optimizer state, for 16-bit parameters (issue 26):
float32 AdamW (12 bytes a parameter), bfloat16 parameters with an exact
float32 master (``gradax.master_weights``: 2 bytes of parameter, 2 of low
bits) or with stochastic rounding (``gradax.stochastic_rounding``: 2 bytes,
no master), each around 8-bit AdamW, plus round-to-nearest bfloat16 for
reference, and the same for Muon (8-bit momentum on the hidden matrices,
AdamW on embeddings and vectors). These rows time the whole step,
``update`` and ``apply_updates``, with parameters and state donated, and
give the ratio to float32 AdamW's step, measured side by side.
Stochastic rounding is also timed around float32 AdamW, and with
``keep_key_on_zero_steps=True`` (a pass over the updates to find a step
that moved nothing, whose key is then held), each against
round-to-nearest around the same inner transformation: the table's last
lines give those ratios (issue 35's target for the rounding: at most 1.2).
The row ``... scales held (floor)`` is the float-code AdamW training step
with every block re-encoded with the scale it already has: no block maximum
is taken at all, so it is a floor for any 8-bit step that XLA:CPU computes
in the same passes (the update's loop and the encoding's), whatever its
scales (issue 35, item 3).

``--quick`` uses a 1-layer tree and fewer rounds; ``--layers`` picks the depth
(the ratio depends on whether the state fits in the caches) and ``--d-model``
the width, 256 by default: leaves of 65K to 262K elements. The 8-bit step
costs XLA about nine programs a leaf against float32's three (copies of the
donated codes and scales among them), so on a CPU its ratio falls as the
leaves grow (``--d-model 1024``: 1M to 4M elements a matrix).

Run: python benchmarks/bench_state_memory.py [--quick] [--layers N]
[--d-model D] [--stages] [--json FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import sys
from pathlib import Path

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).parent))
from common import (  # noqa: E402
    count_params,
    fake_grads,
    gpt_like_params,
    optional_optax,
    time_interleaved,
)

import gradax  # noqa: E402
from gradax.precision import _float_code  # noqa: E402
from gradax.precision.int8 import (  # noqa: E402
    QuantizedArray,
    _to_blocks,
    encode_with_scales,
    is_quantized,
)
from gradax_cli.benchmarks.optimizers import donating_update  # noqa: E402


def _bytes(state) -> int:
    return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state))


def candidates(optax):
    q8 = gradax.int8_blockwise()
    f8 = gradax.int8_blockwise(code="float")
    clip = gradax.clip_by_global_norm(1.0)

    def mini(**kwargs):
        def partition(params):
            return {
                k: "full" if k == "embed" else ("neuron" if p.ndim >= 2 else "tensor")
                for k, p in params.items()
            }

        return gradax.chain(clip, gradax.adam_mini(1e-3, partition=partition, **kwargs))

    out = {
        "gradax adamw f32": gradax.chain(clip, gradax.adamw(1e-3)),
        "gradax adamw 8-bit": gradax.chain(
            clip, gradax.adamw(1e-3, mu_dtype=q8, nu_dtype=q8)
        ),
        "gradax adamw 8-bit float code": gradax.chain(
            clip, gradax.adamw(1e-3, mu_dtype=f8, nu_dtype=f8)
        ),
        "gradax adam_mini f32": mini(),
        "gradax adam_mini 8-bit mu": mini(mu_dtype=q8),
    }
    # State in host memory (pinned_host), streamed through each update.
    out["gradax adamw f32, host"] = gradax.offload_state(out["gradax adamw f32"])
    out["gradax adamw 8-bit, host"] = gradax.offload_state(out["gradax adamw 8-bit"])
    if optax is not None:
        out["optax adamw f32"] = optax.chain(
            optax.clip_by_global_norm(1.0), optax.adamw(1e-3)
        )
    return out


def precision_candidates(params):
    """``name -> (transformation, parameter dtype)`` for the second table."""
    import jax.numpy as jnp

    q8 = gradax.int8_blockwise()
    f8 = gradax.int8_blockwise(code="float")
    clip = gradax.clip_by_global_norm(1.0)
    _, dims = gradax.muon_labels(params, exclude="embed", print_report=False)

    def adamw(**kwargs):
        return gradax.chain(clip, gradax.adamw(1e-3, **kwargs))

    def muon(**kwargs):
        inner = gradax.muon(
            0.02, adam_learning_rate=1e-3, muon_weight_dimension_numbers=dims, **kwargs
        )
        return gradax.chain(clip, inner)

    bf16 = jnp.bfloat16
    master, rounding = gradax.master_weights, gradax.stochastic_rounding
    return {
        "f32 adamw": (adamw(), jnp.float32),
        # The whole training step of the first table's 8-bit rows.
        "f32 + 8-bit adamw": (adamw(mu_dtype=q8, nu_dtype=q8), jnp.float32),
        "f32 + 8-bit float-code adamw": (adamw(mu_dtype=f8, nu_dtype=f8), jnp.float32),
        "bf16 master + 8-bit adamw": (master(adamw(mu_dtype=q8, nu_dtype=q8)), bf16),
        "bf16 rounding + 8-bit adamw": (
            rounding(adamw(mu_dtype=q8, nu_dtype=q8)),
            bf16,
        ),
        "bf16 nearest + 8-bit adamw": (adamw(mu_dtype=q8, nu_dtype=q8), bf16),
        "bf16 rounding (key held on zero steps) + 8-bit adamw": (
            rounding(adamw(mu_dtype=q8, nu_dtype=q8), keep_key_on_zero_steps=True),
            bf16,
        ),
        "bf16 rounding + adamw": (rounding(adamw()), bf16),
        "bf16 rounding (key held on zero steps) + adamw": (
            rounding(adamw(), keep_key_on_zero_steps=True),
            bf16,
        ),
        "bf16 nearest + adamw": (adamw(), bf16),
        "f32 muon": (muon(), jnp.float32),
        "bf16 master + 8-bit muon": (master(muon(mu_dtype=q8)), bf16),
        "bf16 rounding + 8-bit muon": (rounding(muon(mu_dtype=q8)), bf16),
    }


# Stochastic rounding's step over round-to-nearest's, around the same inner
# transformation (issue 35's target: at most 1.2).
ROUNDING_PAIRS = [
    (f"bf16 rounding{key} + {inner}", f"bf16 nearest + {inner}")
    for inner in ("8-bit adamw", "adamw")
    for key in ("", " (key held on zero steps)")
]


def _training_step(tx, grads, params):
    """A no-argument call of update + apply_updates, params and state donated."""
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


# The floor of any 8-bit step that keeps the encoding's loop and the
# update's on XLA:CPU: the same training step with every block encoded with
# the scale it already has, so no block maximum of the new values is taken.
FLOOR_ROW = "f32 + 8-bit float-code adamw, scales held (floor)"


@contextlib.contextmanager
def _scales_held():
    """Quantized moments stored again with their old scales (a diagnostic).

    While it is active, steps traced encode each pair of moments (an Adam
    state's two moments of a parameter, see `gradax.QuantizedArray.store_all`)
    with the scales their blocks already have, in the same one loop as the
    real store, so the difference to the real step is exactly what taking
    the new block maxima costs.
    """
    from gradax.precision import int8 as _quantized

    def held(values, olds, to_encode=None):
        # (to_encode: the same values recomputed, for leaves stored in passes)
        values = values if to_encode is None else to_encode
        codes = tuple(
            encode_with_scales(
                jnp.asarray(x).astype(jnp.float32),
                old.scales,
                old.block_size,
                old.signed,
                old.code,
            )
            for x, old in zip(values, olds, strict=True)
        )
        codes = _quantized._one_loop_on_cpu(codes)
        return tuple(old.with_codes(c) for c, old in zip(codes, olds, strict=True))

    real = _quantized._store_pair
    _quantized._store_pair = held
    try:
        yield
    finally:
        _quantized._store_pair = real


def run_precision(
    quick: bool = False,
    layers: int | None = None,
    d_model: int = 256,
    vocab: int = 512,
) -> dict:
    """Bytes per parameter of parameters + state, and step time over f32 AdamW."""
    import jax.numpy as jnp

    layers = layers or (1 if quick else 6)
    params32 = gpt_like_params(d_model=d_model, layers=layers, vocab=vocab)
    load = os.getloadavg()
    n = count_params(params32)
    per_param, fns = {}, {}
    rows = precision_candidates(params32)
    for name, (tx, dtype) in rows.items():
        # A copy each: the step donates its parameters.
        params = jax.tree.map(lambda p, d=dtype: jnp.array(p, dtype=d), params32)
        grads = fake_grads(params)
        per_param[name] = (_bytes(params) + _bytes(tx.init(params))) / n
        fns[name] = _training_step(tx, grads, params)
    tx, _ = rows["f32 + 8-bit float-code adamw"]
    params = jax.tree.map(jnp.array, params32)
    per_param[FLOOR_ROW] = (_bytes(params) + _bytes(tx.init(params))) / n
    with _scales_held():  # compiled (not only traced) inside
        fns[FLOOR_ROW] = _training_step(tx, fake_grads(params), params)
    times = time_interleaved(fns, repeats=6 if quick else 20)
    base = times["f32 adamw"]
    return {
        "benchmark": "parameters + optimizer state, and training step time",
        "params": n,
        "layers": layers,
        "d_model": d_model,
        "load": load,
        "device": str(jax.devices()[0]),
        "bytes_per_param": per_param,
        "seconds": times,
        "time_over_f32_adamw": {k: t / base for k, t in times.items()},
        "rounding_over_nearest": {
            rounding: times[rounding] / times[nearest]
            for rounding, nearest in ROUNDING_PAIRS
            if rounding in times and nearest in times
        },
    }


def _flops(compiled) -> float:
    analysis = compiled.cost_analysis()
    analysis = analysis[0] if isinstance(analysis, list) else analysis
    return float(analysis.get("flops", float("nan")))


def _donating_round_trip(round_trip, state):
    """A timed call of ``round_trip`` that threads its donated state."""
    compiled = jax.jit(round_trip, donate_argnums=0).lower(state).compile()
    box = [state]

    def call():
        box[0], out = compiled(box[0])
        return out

    return call, compiled


def _round_trip(state):
    """Every 8-bit leaf of ``state`` decoded and encoded again, no update."""

    def again(x):
        return x.store_like(x.load()) if is_quantized(x) else x

    leaves = jax.tree.map(again, state, is_leaf=is_quantized)
    return leaves, jax.tree.leaves(leaves)[0]


def _round_trip_held_scales(state):
    """``_round_trip`` encoding each block with its stored scale (no maximum)."""

    def again(x):
        if not is_quantized(x):
            return x
        codes = encode_with_scales(x.load(), x.scales, x.block_size, x.signed, x.code)
        return x.with_codes(codes)

    leaves = jax.tree.map(again, state, is_leaf=is_quantized)
    return leaves, jax.tree.leaves(leaves)[0]


def _stage_fns(state) -> dict:
    """The stages of an 8-bit step on every quantized leaf of ``state``."""
    qs = [x for x in jax.tree.leaves(state, is_leaf=is_quantized) if is_quantized(x)]
    values = [q.load() for q in qs]
    code = qs[0].code

    def block_max(values, qs):
        # What ``QuantizedArray.store`` reduces: |x| (dynamic map) or each
        # element's own scale exponent, one byte (float code).
        out = []
        for v, q in zip(values, qs, strict=True):
            if code == "float":
                v = _float_code.exponents(v, q.signed)
            out.append(jnp.max(abs(_to_blocks(v, q.block_size)), axis=-1))
        return out

    def encode(values, qs):
        return [
            encode_with_scales(v, q.scales, q.block_size, q.signed, q.code)
            for v, q in zip(values, qs, strict=True)
        ]

    def store(values, qs):
        return [
            QuantizedArray.store(v, q.block_size, q.signed, q.code)
            for v, q in zip(values, qs, strict=True)
        ]

    stages = {
        "decode": (lambda qs: [q.load() for q in qs], (qs,)),
        "block max": (block_max, (values, qs)),
        "encode, scales held": (encode, (values, qs)),
        "store (max + encode)": (store, (values, qs)),
    }
    fns = {}
    for name, (fn, args) in stages.items():
        compiled = jax.jit(fn).lower(*args).compile()
        fns[f"{code}: {name}"] = functools.partial(compiled, *args)
    return fns


def run_stages(quick: bool = False, layers: int | None = None) -> dict:
    """The 8-bit AdamW step taken apart, each stage timed over float32's step.

    The moments are those after three steps, so that codes and scales are
    not all zero. The copies time moving the same bytes with no arithmetic:
    every float32 moment read and written once, or every int8 code. The
    steps are also timed without donating the state, to compare like with
    like the cost of XLA's copies of donated codes.
    """
    layers = layers or (1 if quick else 6)
    params = gpt_like_params(layers=layers)
    grads = fake_grads(params)
    txs = candidates(None)
    fns = {}
    for name in ("f32", "8-bit", "8-bit float code"):
        tx = txs[f"gradax adamw {name}"]
        fns[f"adamw {name} step"], _ = donating_update(tx, grads, params)
        # Not donated: XLA then needs no copy of the old codes, which a step
        # that recomputes the new moment in several passes reads after the
        # new codes could have overwritten them.
        state = tx.init(params)
        compiled = jax.jit(tx.update).lower(grads, state, params).compile()
        kept = functools.partial(compiled, grads, state, params)
        fns[f"adamw {name} step, state not donated"] = kept
    for name in ("gradax adamw 8-bit", "gradax adamw 8-bit float code"):
        tx = txs[name]
        state, update = tx.init(params), jax.jit(tx.update)
        for _ in range(3):
            _, state = update(grads, state, params)
        fns |= _stage_fns(state)
    moments = [m for p in jax.tree.leaves(params) for m in (p, p)]
    codes = [jnp.zeros(p.shape, jnp.int8) for p in moments]
    for name, arrays in (("f32 copy", moments), ("int8 copy", codes)):
        compiled = jax.jit(lambda xs: [x + 1 for x in xs]).lower(arrays).compile()
        fns[f"{name} of both moments"] = functools.partial(compiled, arrays)
    times = time_interleaved(fns, repeats=6 if quick else 20)
    base = times["adamw f32 step"]
    return {
        "benchmark": "8-bit AdamW step by stage",
        "params": count_params(params),
        "layers": layers,
        "device": str(jax.devices()[0]),
        "load": os.getloadavg(),
        "seconds": times,
        "time_over_f32_step": {k: t / base for k, t in times.items()},
    }


def run(quick: bool = False, layers: int | None = None, d_model: int = 256) -> dict:
    optax = optional_optax()
    layers = layers or (1 if quick else 6)
    params = gpt_like_params(d_model=d_model, layers=layers)
    load = os.getloadavg()
    grads = fake_grads(params)
    n = count_params(params)
    fns, per_param, flops = {}, {}, {}
    for name, tx in candidates(optax).items():
        per_param[name] = _bytes(tx.init(params)) / n
        # The new state is the first output, so each donated buffer goes to
        # the new value of its own leaf (and host-offloaded state to the
        # host: see docs/memory.md, "State in host memory").
        fns[name], compiled = donating_update(tx, grads, params)
        flops[name] = _flops(compiled) / n
    diagnostics = {
        "8-bit load+store only": ("gradax adamw 8-bit", _round_trip),
        "8-bit load+store, scales held": (
            "gradax adamw 8-bit",
            _round_trip_held_scales,
        ),
        "float code load+store only": ("gradax adamw 8-bit float code", _round_trip),
        "float code load+store, scales held": (
            "gradax adamw 8-bit float code",
            _round_trip_held_scales,
        ),
    }
    for name, (owner, round_trip) in diagnostics.items():
        state = candidates(None)[owner].init(params)
        per_param[name] = _bytes(state) / n
        fns[name], compiled = _donating_round_trip(round_trip, state)
        flops[name] = _flops(compiled) / n
    times = time_interleaved(fns, repeats=6 if quick else 30)
    base = times["gradax adamw f32"]
    return {
        "benchmark": "optimizer state memory and step time",
        "params": n,
        "layers": layers,
        "d_model": d_model,
        "load": load,
        "device": str(jax.devices()[0]),
        "state_bytes_per_param": per_param,
        "flops_per_param": flops,
        "seconds": times,
        "time_over_gradax_f32": {k: t / base for k, t in times.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--layers", type=int, help="depth of the bench tree")
    parser.add_argument(
        "--d-model", type=int, default=256, help="width of the bench tree (leaf size)"
    )
    parser.add_argument("--stages", action="store_true", help="only the stages")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.stages:
        stages = run_stages(args.quick, args.layers)
        print(
            f"{stages['benchmark']} on {stages['params']:,} parameters "
            f"({stages['layers']} layers, {stages['device']}, "
            f"load {stages['load'][0]:.2f})"
        )
        for name, seconds in stages["seconds"].items():
            ratio = stages["time_over_f32_step"][name]
            print(f"  {name:36s} {seconds * 1e3:9.3f} ms {ratio:7.2f}")
        if args.json:
            args.json.write_text(json.dumps(stages, indent=2))
        return
    result = run(args.quick, args.layers, args.d_model)
    print(
        f"{result['benchmark']} on {result['params']:,} parameters "
        f"({result['layers']} layers of width {result['d_model']}, "
        f"{result['device']}, load {result['load'][0]:.2f})"
    )
    header = ("", "bytes/param", "flops/param", "ms/step", "x f32")
    print("  {:30s} {:>12s} {:>12s} {:>9s} {:>7s}".format(*header))
    for name, seconds in result["seconds"].items():
        print(
            f"  {name:30s} {result['state_bytes_per_param'][name]:12.3f} "
            f"{result['flops_per_param'][name]:12.1f} "
            f"{seconds * 1e3:9.3f} {result['time_over_gradax_f32'][name]:7.2f}"
        )
    precision = run_precision(args.quick, args.layers, args.d_model)
    print(
        f"\n{precision['benchmark']} ({precision['params']:,} parameters, "
        f"load {precision['load'][0]:.2f})"
    )
    header = ("", "bytes/param", "ms/step", "x f32 adamw")
    print("  {:52s} {:>12s} {:>9s} {:>12s}".format(*header))
    for name, seconds in precision["seconds"].items():
        print(
            f"  {name:52s} {precision['bytes_per_param'][name]:12.3f} "
            f"{seconds * 1e3:9.3f} {precision['time_over_f32_adamw'][name]:12.2f}"
        )
    print("  stochastic rounding's step over round-to-nearest's:")
    for name, ratio in precision["rounding_over_nearest"].items():
        print(f"    {name:52s} {ratio:6.2f}")
    if args.json:
        result["precision"] = precision
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
