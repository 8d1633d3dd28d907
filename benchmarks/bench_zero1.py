"""ZeRO-1 (``gradax.shard_state``) against plain data parallelism, 8 devices.

For AdamW and Muon on a small transformer-shaped tree, one compiled training
step (gradients of a batch split over the ``data`` axis, optimizer update,
apply) with replicated parameters, the state replicated (data parallel) or
wrapped in ``shard_state(tx, axis="data")`` (ZeRO-1), the gradients computed
three ways:

- ``jax.grad``: a plain ``jax.grad(loss)(params, batch)`` under ``jit``,
  what users write; the compiler places the gradients' reduction. With
  ``--explicit`` also with the parameters reduced over ``data``
  (``P(reduced={"data"})``): their gradients come back unreduced and
  ``shard_state`` reduce-scatters them;
- ``pmean``: each device's gradient inside ``shard_map``, averaged;
- ``data_parallel_value_and_grad``: each device receives only the summed
  slice it updates (a reduce-scatter), then the updates are all-gathered.

Printed per form: the optimizer state's bytes on each device, and the
collectives in the compiled step's HLO (count of each kind, and bytes each
device receives, estimated as gradax's distributed benchmark does). The
inputs are abstract (nothing runs): the counts and bytes are the compiler's
plan, not timings. ``--explicit`` uses an Explicit mesh axis (the plain
``jax.grad`` forms only). ``--tpu v5e:2x4`` compiles for a TPU topology
ahead of time instead of for 8 simulated CPU devices; it needs the
``libtpu`` package importable (no TPU), e.g. ``pip install --target DIR
libtpu`` and ``PYTHONPATH=DIR``. XLA:TPU forms a reduce-scatter as a fusion
of an all-reduce and a slice, counted here as a reduce-scatter.

Run: python benchmarks/bench_zero1.py [--explicit] [--tpu TOPOLOGY] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re

SIMULATED = "--xla_force_host_platform_device_count=8"
if SIMULATED not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {SIMULATED}".strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import gradax  # noqa: E402
from gradax_cli.benchmarks.distributed import collective_bytes  # noqa: E402

P = jax.sharding.PartitionSpec
KINDS = (
    "all-reduce",
    "all-gather",
    "reduce-scatter",
    "collective-permute",
    "all-to-all",
)
VOCAB, WIDTH, LAYERS, BATCH = 1024, 256, 8, 16384


def make_params() -> dict:
    keys = jax.random.split(jax.random.key(0), 4)
    return {
        "embed": jax.random.normal(keys[0], (VOCAB, WIDTH)) / 16,
        "layers": jax.random.normal(keys[1], (LAYERS, WIDTH, WIDTH)) / 16,
        "head": jax.random.normal(keys[2], (WIDTH, VOCAB)) / 16,
        "bias": jnp.zeros(WIDTH),
    }


def loss_fn(p: dict, tokens: jax.Array) -> jax.Array:
    bias = p["bias"]
    if jax.typeof(tokens).sharding.spec[0] is not None:
        # Explicit axes: the rows of a replicated table gathered by split
        # tokens are split like the tokens (JAX asks which), and a vector
        # added to split activations must be an ordinary replicated value
        # (jax refuses a reduced one there).
        rows = p["embed"].at[tokens].get(out_sharding=P("data"))
        bias = jax.sharding.reshard(bias, P())
    else:
        rows = p["embed"][tokens]
    h = rows + bias
    for i in range(LAYERS):
        h = h + jnp.tanh(h @ p["layers"][i])
    log_p = jax.nn.log_softmax(h @ p["head"])
    return -jnp.mean(jnp.take_along_axis(log_p, tokens[:, None], axis=1))


def optimizers() -> dict:
    return {
        "adamw": gradax.adamw(1e-3, weight_decay=0.1),
        "muon": gradax.muon(0.02, muon_weight_dimension_numbers="auto"),
    }


def count(hlo: str) -> dict[str, int]:
    return {k: len(re.findall(rf"\s{k}(?:-start)?\(", hlo)) for k in KINDS}


def all_reduced_grads(p, t):
    """Plain data parallelism's gradient: each device's own, averaged."""

    def local(p, t):
        # Differentiate a varying copy: the gradient with respect to a
        # replicated input would come back already summed over the axis.
        p = jax.tree.map(lambda x: jax.lax.pcast(x, "data", to="varying"), p)
        return jax.lax.pmean(jax.grad(loss_fn)(p, t), "data")

    return jax.shard_map(local, in_specs=(P(), P("data")), out_specs=P())(p, t)


def reduce_scattered_grads(p, t):
    return gradax.sharding.data_parallel_value_and_grad(loss_fn)(p, t)[1]


def plain_grads(p, t):
    """What users write: `jax.grad` under `jit`, the batch split over "data"."""
    return jax.grad(loss_fn)(p, t)


def abstract(tree, sharding):
    return jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), tree
    )


def measure(tx, mesh, grads_fn=all_reduced_grads, reduced=False) -> dict:
    """One compiled step's collectives, from abstract inputs (nothing runs).

    The mesh's devices may be simulated CPU devices or a TPU topology's
    (ahead-of-time compilation: `--tpu`). `reduced`: the parameters are
    replicated and reduced over "data" (Explicit axes), so that a plain
    `jax.grad` returns their gradients unreduced.
    """
    sums = {"reduced": {"data"}} if reduced else {}
    params = abstract(jax.eval_shape(make_params), jax.NamedSharding(mesh, P(**sums)))
    tokens = jax.ShapeDtypeStruct(
        (BATCH,), jnp.int32, sharding=jax.NamedSharding(mesh, P("data"))
    )
    init = jax.jit(tx.init).lower(params).compile()
    state = jax.tree.map(
        lambda x, sharding: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding),
        jax.eval_shape(tx.init, params),
        init.output_shardings,
    )

    @jax.jit
    def step(p, s, t):
        grads = grads_fn(p, t)
        updates, s = tx.update(grads, s, p)
        return gradax.apply_updates(p, updates), s

    hlo = step.lower(params, state, tokens).compile().as_text()
    leaves = jax.tree.leaves(state)
    whole = sum(x.size * x.dtype.itemsize for x in leaves)
    per_device = sum(
        math.prod(x.sharding.shard_shape(x.shape)) * x.dtype.itemsize for x in leaves
    )
    counts, received = collectives(hlo, mesh.size)
    return {
        "state_bytes_whole": int(whole),
        "state_bytes_per_device": int(per_device),
        "collectives": counts,
        "received_bytes": {k: int(v) for k, v in received.items()},
    }


def tpu_reduce_scatters(hlo: str) -> tuple[str, list[str]]:
    """`hlo` without the all-reduces XLA:TPU turns into reduce-scatters, and
    those all-reduces' lines.

    XLA:TPU forms a reduce-scatter as a fusion (`calls=%all-reduce-scatter`)
    of an all-reduce and the slice each device keeps: each device receives
    the other devices' parts of its slice, (n - 1)/n of the all-reduce's
    result, once (an all-reduce moves it twice). Other platforms' text has
    none.
    """
    rest, formed, inside = [], [], False
    for line in hlo.splitlines():
        if line.lstrip("%").startswith("all-reduce-scatter"):
            inside = True
        elif line.startswith("}"):
            inside = False
        (formed if inside and " all-reduce(" in line else rest).append(line)
    return "\n".join(rest), formed


def tpu_async_pieces(hlo: str) -> str:
    """`hlo` with each of XLA:TPU's async collective fusions counted once.

    XLA:TPU splits one collective into pieces that overlap computation
    (`async_collective_fusion_config` in their backend config): each piece
    writes part of the same output and carries the whole output's shape and
    the collective's channel id. Counting each piece would count the
    collective as many times; the first piece of each channel stands for
    them all. Other platforms' text has none.
    """
    seen, kept = set(), []
    for line in hlo.splitlines():
        channel = re.search(r"channel_id=(\d+)", line)
        if channel and "async_collective_fusion_config" in line:
            kind = re.search(rf"\s({'|'.join(KINDS)})\(", line)
            key = (kind.group(1) if kind else "", channel.group(1))
            if key in seen:
                continue
            seen.add(key)
        kept.append(line)
    return "\n".join(kept)


def collectives(hlo: str, devices: int) -> tuple[dict, dict]:
    """Counts of each kind of collective, and bytes each device receives."""
    rest, formed = tpu_reduce_scatters(tpu_async_pieces(hlo))
    counts = count(rest)
    received = collective_bytes(rest, devices)
    if formed:
        counts["reduce-scatter"] += len(formed)
        # collective_bytes counts an all-reduce twice: a reduce-scatter once.
        once = collective_bytes("\n".join(formed), devices)["all-reduce"] / 2
        received["reduce-scatter"] = received.get("reduce-scatter", 0.0) + once
    return counts, received


FORMS = {  # name: (shard_state, gradients, parameters reduced over "data")
    "data parallel, jax.grad": (False, plain_grads, False),
    "zero-1, jax.grad": (True, plain_grads, False),
    "zero-1, jax.grad, reduced parameters": (True, plain_grads, True),
    "data parallel, pmean": (False, all_reduced_grads, False),
    "zero-1, pmean": (True, all_reduced_grads, False),
    "zero-1, data_parallel_value_and_grad": (True, reduce_scattered_grads, False),
}


def run(tpu: str | None = None, explicit: bool = False) -> dict:
    types = jax.sharding.AxisType
    axis_type = types.Explicit if explicit else types.Auto
    if tpu:
        from jax.experimental import topologies

        devices = np.asarray(topologies.get_topology_desc(tpu, "tpu").devices)
        mesh = jax.sharding.Mesh(
            devices.reshape(-1), ("data",), axis_types=(axis_type,)
        )
    else:
        mesh = jax.make_mesh((8,), ("data",), axis_types=(axis_type,))
    results = {}
    with jax.set_mesh(mesh):
        for name, tx in optimizers().items():
            results[name] = {}
            for form, (zero, grads_fn, reduced) in FORMS.items():
                if explicit and grads_fn is not plain_grads:
                    continue  # the shard_map forms need Auto axes' pcast
                if reduced and not explicit:
                    continue  # reduced types exist on Explicit axes only
                wrapped = gradax.shard_state(tx, axis="data") if zero else tx
                results[name][form] = measure(wrapped, mesh, grads_fn, reduced)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument(
        "--tpu",
        metavar="TOPOLOGY",
        help="compile ahead of time for a TPU topology (e.g. v5e:2x4; needs "
        "the libtpu package importable, no TPU) instead of 8 CPU devices",
    )
    parser.add_argument("--explicit", action="store_true", help="Explicit mesh axes")
    args = parser.parse_args()
    params = sum(x.size for x in jax.tree.leaves(make_params()))
    where = f"TPU {args.tpu} (ahead of time)" if args.tpu else "8 simulated CPU devices"
    kind = "Explicit" if args.explicit else "Auto"
    print(f"{params} parameters (float32), {where}, one {kind} 'data' axis")
    results = run(args.tpu, args.explicit)
    for name, forms in results.items():
        for form, r in forms.items():
            ops = ", ".join(f"{k} {v}" for k, v in r["collectives"].items() if v)
            total = sum(r["received_bytes"].values())
            print(
                f"{name:6s} {form:37s} state/device "
                f"{r['state_bytes_per_device'] / 2**20:5.2f} MiB | {ops} "
                f"| received/device {total / 2**20:.2f} MiB"
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
