"""Learning-rate transfer across width, measured side by side (issue 33).

A char-level transformer (one block, two heads, context 32) is trained on
gradax's own docs at 4 widths spanning 8x, for a grid of learning rates in
factors of 2, two seeds, five rows:

- adamw-standard: AdamW, standard initialization (head 1/sqrt(fan_in));
- adamw-gradax: AdamW under gradax.width_transfer, µP initialization;
- muon-moonlight: Muon with consistent_rms=0.2 (Moonlight: AdamW's rate),
  standard initialization;
- muon-gradax: Muon under gradax.width_transfer, µP initialization;
- muonh: gradax.muonh (the matrices on their initial sphere), µP init.

For each row it prints the best rate at each width and, at the widest, the
loss with the narrowest's best rate against the widest's own best (both the
mean over seeds of the final training loss, averaged over the last 10
steps). Each (row, width) is one compiled program: the rates and seeds are
vmapped (gradax hyperparameters are pytree leaves).

    python benchmarks/bench_width_transfer.py            # full: 4 widths x 8 rates
    python benchmarks/bench_width_transfer.py --quick    # reduced, for a shared machine

Not wired to `gradax demo --transfer` (gradax_cli is another part's).

Measured with --quick (60 steps, batch 8x32, 6 rates, widths 32-256, two
seeds; 2 shared CPU cores, load 5-12; 703 s for the five rows): best rate at
32 / 64 / 128 / 256, and the widest's loss at the narrowest's best rate
against its own best:

    adamw-standard  0.016 0.008 0.004 0.001   +20.1%  (moved 4 grid steps)
    adamw-gradax    0.016 0.016 0.016 0.016   +0.00%  (grid centred at 1.6e-2)
    muon-moonlight  0.016 0.016 0.004 0.002   +6.7%   (moved 3)
    muon-gradax     0.08  0.08  0.08  0.08    +0.00%
    muonh           0.16  0.08  0.04  0.02    +3.5%   (moved 3; its AdamW
                    group, the head included, is not width-scaled)

60 steps is far from the issue's runs: a reduced check, not the final table.
"""

from __future__ import annotations

import argparse
import functools
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

import gradax

HEADS, CONTEXT = 2, 32


def corpus() -> np.ndarray:
    docs = pathlib.Path(__file__).resolve().parent.parent / "docs"
    text = "".join(p.read_text() for p in sorted(docs.glob("*.md")))
    data = np.frombuffer(text.encode("utf-8", "ignore"), np.uint8)
    return np.minimum(data, 127).astype(np.int32)  # 128 symbols


VOCAB = 128


def init(key, width: int, mup: bool):
    ks = jax.random.split(key, 6)

    def normal(k, shape, std):
        return std * jax.random.normal(k, shape)

    head_std = 0.0 if mup else width**-0.5
    return {
        "embed": normal(ks[0], (VOCAB, width), 1.0),
        "block": {
            "ln1": jnp.ones(width),
            "qkv": normal(ks[1], (width, 3 * width), width**-0.5),
            "out": normal(ks[2], (width, width), width**-0.5),
            "ln2": jnp.ones(width),
            "up": normal(ks[3], (width, 4 * width), width**-0.5),
            "down": normal(ks[4], (4 * width, width), (4 * width) ** -0.5),
        },
        "ln_f": jnp.ones(width),
        "head": normal(ks[5], (width, VOCAB), head_std),
    }


def _ln(x, g):
    x = x - x.mean(-1, keepdims=True)
    return g * x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6)


def loss_fn(params, tokens, mup: bool, base_width: int):
    x = params["embed"][tokens[:, :-1]]
    b = params["block"]
    width = x.shape[-1]
    d_head = width // HEADS
    q, k, v = jnp.split(_ln(x, b["ln1"]) @ b["qkv"], 3, axis=-1)
    shape = (*q.shape[:-1], HEADS, d_head)
    q, k, v = q.reshape(shape), k.reshape(shape), v.reshape(shape)
    scale = d_head**-0.5
    if mup:
        scale *= ((base_width // HEADS) / d_head) ** 0.5
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) * scale
    mask = jnp.tril(jnp.ones((CONTEXT, CONTEXT), bool))
    att = jax.nn.softmax(jnp.where(mask, logits, -1e30), -1)
    x = x + jnp.einsum("bhqk,bkhd->bqhd", att, v).reshape(x.shape) @ b["out"]
    x = x + jax.nn.gelu(_ln(x, b["ln2"]) @ b["up"]) @ b["down"]
    out = _ln(x, params["ln_f"]) @ params["head"]
    logp = jax.nn.log_softmax(out)
    return -jnp.mean(jnp.take_along_axis(logp, tokens[:, 1:, None], -1))


def _routing(params):
    return gradax.muon_labels(params, exclude="embed|head", print_report=False)[1]


def make_tx(row: str, lr, base):
    if row == "adamw-standard":
        return gradax.adamw(lr, weight_decay=0.0)
    if row == "adamw-gradax":
        return gradax.width_transfer(gradax.adamw(lr), base)
    if row == "muon-moonlight":
        return gradax.muon(
            lr, consistent_rms=0.2, muon_weight_dimension_numbers=_routing
        )
    if row == "muon-gradax":
        # Muon's rate; the AdamW group at a tenth of it (their usual ratio).
        return gradax.width_transfer(
            gradax.muon(
                lr, adam_learning_rate=lr / 10, muon_weight_dimension_numbers=_routing
            ),
            base,
        )
    if row == "muonh":
        return gradax.muonh(
            lr, adam_learning_rate=lr / 10, muon_weight_dimension_numbers=_routing
        )
    raise ValueError(row)


ROWS = ("adamw-standard", "adamw-gradax", "muon-moonlight", "muon-gradax", "muonh")
# The grid's centre per row (the base width's optimum region), factors of 2.
CENTRE = {
    "adamw-standard": 4e-3,
    "adamw-gradax": 1.6e-2,  # its optimum sat at 4e-3 * 4, the top of that grid
    "muon-moonlight": 4e-3,
    "muon-gradax": 4e-2,
    "muonh": 4e-2,
}


def run_row(row, width, base_width, lrs, seeds, steps, batch, data):
    mup = row != "adamw-standard" and row != "muon-moonlight"
    base = init(jax.random.key(0), base_width, mup)
    loss = functools.partial(loss_fn, mup=mup, base_width=base_width)
    n = len(data) - CONTEXT - 1
    starts = jax.random.randint(jax.random.key(99), (steps, batch), 0, n)
    data = jnp.asarray(data)
    idx = starts[..., None] + jnp.arange(CONTEXT + 1)

    def one(lr, seed):
        params = init(jax.random.key(seed), width, mup)
        tx = make_tx(row, lr, base)
        state = tx.init(params)

        def step(carry, i):
            params, state = carry
            value, grads = jax.value_and_grad(loss)(params, data[idx[i]])
            updates, state = tx.update(grads, state, params)
            return (gradax.apply_updates(params, updates), state), value

        _, losses = jax.lax.scan(step, (params, state), jnp.arange(steps))
        return jnp.mean(losses[-10:])

    lr_grid = jnp.asarray(lrs)[:, None] * jnp.ones((1, len(seeds)))
    seed_grid = jnp.asarray(seeds)[None, :] * jnp.ones((len(lrs), 1), jnp.int32)
    out = jax.jit(jax.vmap(jax.vmap(one)))(lr_grid, seed_grid)
    out = np.asarray(out)
    return np.where(np.isfinite(out), out, np.inf)  # (lrs, seeds)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rows", default=",".join(ROWS))
    args = parser.parse_args()
    widths = (32, 64, 128, 256)
    points = 6 if args.quick else 8
    steps = 60 if args.quick else 300
    batch = 8 if args.quick else 16
    seeds = (0, 1)
    data = corpus()
    start = time.time()
    print(f"widths {widths}, {points} rates, {steps} steps, batch {batch}x{CONTEXT}")
    for row in args.rows.split(","):
        lrs = CENTRE[row] * 2.0 ** (np.arange(points) - points // 2)
        table = {}
        for width in widths:
            table[width] = run_row(
                row, width, widths[0], lrs, seeds, steps, batch, data
            )
        mean = {w: table[w].mean(axis=1) for w in widths}
        best = {w: lrs[int(np.argmin(mean[w]))] for w in widths}
        narrow_at_wide = mean[widths[-1]][int(np.argmin(mean[widths[0]]))]
        wide_best = mean[widths[-1]].min()
        print(
            f"{row:15s} best lr "
            + " ".join(f"{w}:{best[w]:.3g}" for w in widths)
            + f" | widest: loss at narrow's lr {narrow_at_wide:.4f} vs best "
            f"{wide_best:.4f} ({100 * (narrow_at_wide / wide_best - 1):+.2f}%)"
            + f" | grid steps moved {np.log2(best[widths[-1]] / best[widths[0]]):+.0f}"
        )
        for w in widths:
            print("   ", w, " ".join(f"{x:.3f}" for x in mean[w]))
    print(f"wall {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
