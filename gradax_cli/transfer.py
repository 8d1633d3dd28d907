"""``gradax demo --transfer``: does the best learning rate move with width or depth?

A character-level transformer (pre-LayerNorm blocks, two heads, weights
stored ``(fan_in, fan_out)``) is trained on the demo's text for a grid of
learning rates in factors of 2, two seeds, at several widths (one depth) or
several depths (one width). For each row it reports the best rate at each
size and, at the largest size, the validation loss with the smallest size's
best rate against the largest's own best (each the mean over the seeds).

Width rows (`WIDTH_ROWS`):

- ``adamw-standard``: AdamW, standard initialization (head ``1/sqrt(fan_in)``);
- ``adamw-gradax``: AdamW under ``gradax.width_transfer``, µP initialization;
- ``muon-moonlight``: Muon with ``consistent_rms=0.2`` (Moonlight: AdamW's
  rate for the matrices), standard initialization;
- ``muon-gradax``: Muon under ``width_transfer``, µP initialization;
- ``muonh-gradax``: MuonH under ``width_transfer`` (its matrices on their
  sphere keep factor 1; the AdamW group's head takes ``1/m``), µP init;
- ``muonh`` (not in the default rows): MuonH alone, µP init.

Depth rows (`DEPTH_ROWS`): AdamW, Muon and MuonH under ``width_transfer``,
each as is (``-plain``) and with depth-µP (``-depthmup``): residual branches
multiplied by ``sqrt(base_depth / depth)`` and ``width_transfer(...,
base_depth=, depth=)`` (hidden matrices' steps times ``sqrt(base_depth /
depth)``; MuonH's matrices keep their sphere's step).

Also available with ``--rows``: ``adamw-completep`` and ``muon-completep``
(CompleteP: branches times ``base_depth / depth``, the rate unchanged).

Each (row, size) is one compiled program: the rates and seeds are vmapped
(gradax's hyperparameters are pytree leaves). ``run_sweep`` is the public
entry point; ``benchmarks/bench_width_transfer.py`` calls it.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import gradax
from gradax.width.parametrization import branch_multiplier

__all__ = [
    "DEPTH_ROWS",
    "ROWS",
    "WIDTH_ROWS",
    "SweepConfig",
    "format_table",
    "plot",
    "run_sweep",
]

HEADS = 2


@dataclasses.dataclass(frozen=True)
class Row:
    """One row: its grid's lowest rate, its initialization and its optimizer."""

    low: float  # the grid is low * 2**k, k = 0 .. points - 1
    mup: bool  # µP initialization (zero head, attention scaled 1/d_head)
    optimizer: str  # "adamw", "muon-moonlight", "muon", "muonh"
    transfer: bool  # wrapped in gradax.width_transfer
    depth_mup: bool = False  # residual branches and steps scaled with depth
    depth_exponent: float = 0.5  # 0.5: Depth-µP; 1: CompleteP


ROWS = {
    "adamw-standard": Row(2.5e-4, False, "adamw", False),
    "adamw-gradax": Row(2e-3, True, "adamw", True),
    "muon-moonlight": Row(5e-4, False, "muon-moonlight", False),
    "muon-gradax": Row(1e-2, True, "muon", True),
    "muonh-gradax": Row(1e-2, True, "muonh", True),
    "muonh": Row(1e-2, True, "muonh", False),
    "adamw-plain": Row(2e-3, True, "adamw", True),
    "adamw-depthmup": Row(2e-3, True, "adamw", True, True),
    "muon-plain": Row(1e-2, True, "muon", True),
    "muon-depthmup": Row(1e-2, True, "muon", True, True),
    "muonh-plain": Row(1e-2, True, "muonh", True),
    "muonh-depthmup": Row(1e-2, True, "muonh", True, True),
    "adamw-completep": Row(2e-3, True, "adamw", True, True, 1.0),
    "muon-completep": Row(1e-2, True, "muon", True, True, 1.0),
}
WIDTH_ROWS = (
    "adamw-standard",
    "adamw-gradax",
    "muon-moonlight",
    "muon-gradax",
    "muonh-gradax",
)
DEPTH_ROWS = (
    "adamw-plain",
    "adamw-depthmup",
    "muon-plain",
    "muon-depthmup",
    "muonh-plain",
    "muonh-depthmup",
)


@dataclasses.dataclass(frozen=True)
class SweepConfig:
    """What one sweep trains: sizes, rates, steps and batches."""

    axis: str = "width"  # "width" or "depth"
    sizes: tuple[int, ...] = (32, 64, 128, 256)  # widths, or block counts
    width: int = 64  # the depth sweep's width
    depth: int = 1  # the width sweep's block count
    rows: tuple[str, ...] = WIDTH_ROWS
    points: int = 7
    steps: int = 100
    batch_size: int = 8
    context: int = 32
    seeds: tuple[int, ...] = (0, 1)
    eval_sequences: int = 32

    def __post_init__(self):
        if self.axis not in ("width", "depth"):
            raise ValueError(f"axis must be 'width' or 'depth', got {self.axis!r}")
        if len(self.sizes) < 2 or list(self.sizes) != sorted(set(self.sizes)):
            raise ValueError(
                f"sizes must be at least two increasing numbers, got {self.sizes}"
            )
        unknown = [r for r in self.rows if r not in ROWS]
        if unknown:
            raise ValueError(f"unknown rows {unknown}; known: {', '.join(ROWS)}")
        if self.points < 2:
            raise ValueError(f"points must be >= 2, got {self.points}")
        if self.axis == "width" and any(w % HEADS for w in self.sizes):
            raise ValueError(f"widths must be multiples of {HEADS}, got {self.sizes}")


# ---------------------------------------------------------------------------
# The model.


def init(key: jax.Array, width: int, depth: int, vocab: int, mup: bool) -> dict:
    """Embedding variance 1, hidden 1/fan_in; the head 1/fan_in or zero (µP).

    The blocks' weights are stacked on a leading axis of length `depth` (one
    compiled block, scanned: compile time does not grow with depth); Muon's
    routing reads a 3-D leaf as a stack of `(fan_in, fan_out)` matrices.
    """
    ks = jax.random.split(key, 6)

    def normal(k, shape, std):
        return std * jax.random.normal(k, shape, jnp.float32)

    stack = (depth,)
    return {
        "embed": normal(ks[0], (vocab, width), 1.0),
        "blocks": {
            "ln1": jnp.ones((*stack, width)),
            "qkv": normal(ks[1], (*stack, width, 3 * width), width**-0.5),
            "out": normal(ks[2], (*stack, width, width), width**-0.5),
            "ln2": jnp.ones((*stack, width)),
            "up": normal(ks[3], (*stack, width, 4 * width), width**-0.5),
            "down": normal(ks[4], (*stack, 4 * width, width), (4 * width) ** -0.5),
        },
        "ln_f": jnp.ones(width),
        # µP: a zero head (its first step is then width-independent).
        "head": (
            jnp.zeros((width, vocab))
            if mup
            else normal(ks[5], (width, vocab), width**-0.5)
        ),
    }


def _ln(x, g):
    x = x - x.mean(-1, keepdims=True)
    return g * x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6)


def loss_fn(params, tokens, *, mup: bool, base_width: int, branch: float):
    """Next-character cross-entropy; `branch` multiplies each residual branch."""
    x = params["embed"][tokens[:, :-1]]
    width, length = x.shape[-1], x.shape[1]
    d_head = width // HEADS
    scale = d_head**-0.5
    if mup:  # 1/d_head, equal to 1/sqrt(d_head) at the base width
        scale *= ((base_width // HEADS) / d_head) ** 0.5
    mask = jnp.tril(jnp.ones((length, length), bool))

    def block(x, b):
        q, k, v = jnp.split(_ln(x, b["ln1"]) @ b["qkv"], 3, axis=-1)
        shape = (*q.shape[:-1], HEADS, d_head)
        q, k, v = q.reshape(shape), k.reshape(shape), v.reshape(shape)
        logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) * scale
        att = jax.nn.softmax(jnp.where(mask, logits, -1e30), -1)
        y = jnp.einsum("bhqk,bkhd->bqhd", att, v).reshape(x.shape) @ b["out"]
        x = x + branch * y
        x = x + branch * (jax.nn.gelu(_ln(x, b["ln2"]) @ b["up"]) @ b["down"])
        return x, None

    x, _ = jax.lax.scan(block, x, params["blocks"])
    logp = jax.nn.log_softmax(_ln(x, params["ln_f"]) @ params["head"])
    return -jnp.mean(jnp.take_along_axis(logp, tokens[:, 1:, None], -1))


# ---------------------------------------------------------------------------
# The optimizers.


# The blocks' matrices are stacked (depth, fan_in, fan_out): Muon's routing
# and width_transfer's roles are said explicitly (the stacked norm gains
# would otherwise read as matrices).
_MATRICES = ("qkv", "out", "up", "down")
ROLES_OVERRIDE = {r"\['ln": "vector"}


def _routing(params):
    stacked = gradax.MuonDimensionNumbers(reduction_axis=1, output_axis=2)
    return {
        key: (
            {k: stacked if k in _MATRICES else None for k in value}
            if key == "blocks"
            else None
        )
        for key, value in params.items()
    }


def make_tx(row: Row, lr, base, depth_args: dict) -> Any:
    """The row's optimizer at rate `lr`; the AdamW group of Muon at `lr / 10`."""
    if row.optimizer == "adamw":
        tx = gradax.adamw(lr, weight_decay=0.0)
    elif row.optimizer == "muon-moonlight":
        # Moonlight: one rate for both groups (the RMS matching makes them agree).
        tx = gradax.muon(lr, consistent_rms=0.2, muon_weight_dimension_numbers=_routing)
    elif row.optimizer == "muon":
        tx = gradax.muon(
            lr, adam_learning_rate=lr / 10, muon_weight_dimension_numbers=_routing
        )
    else:
        tx = gradax.muonh(
            lr, adam_learning_rate=lr / 10, muon_weight_dimension_numbers=_routing
        )
    if row.transfer:
        tx = gradax.width_transfer(tx, base, roles=ROLES_OVERRIDE, **depth_args)
    return tx


# ---------------------------------------------------------------------------
# The sweep.


def rates(row: str, points: int) -> np.ndarray:
    """The row's grid: its lowest rate times 2**k."""
    return ROWS[row].low * 2.0 ** np.arange(points)


def _losses(name: str, size: int, config: SweepConfig, data: tuple) -> np.ndarray:
    """Validation loss after training, shape (rates, seeds); inf if diverged."""
    row = ROWS[name]
    train, val, vocab = data
    if config.axis == "width":
        width, depth = size, config.depth
        base_width, base_depth = config.sizes[0], config.depth
    else:
        width, depth = config.width, size
        base_width, base_depth = config.width, config.sizes[0]
    depth_args, branch = {}, 1.0
    if row.depth_mup:
        depth_args = {
            "base_depth": base_depth,
            "depth": depth,
            "depth_exponent": row.depth_exponent,
        }
        branch = branch_multiplier(base_depth, depth, row.depth_exponent)
    base = init(jax.random.key(0), base_width, depth, vocab, row.mup)
    loss = functools.partial(loss_fn, mup=row.mup, base_width=base_width, branch=branch)
    span = config.context + 1
    rng = np.random.default_rng(1234)
    starts = np.stack(
        [
            rng.integers(0, len(train) - span, (config.steps, config.batch_size))
            for _ in config.seeds
        ]
    )
    windows = jnp.asarray(starts[..., None] + np.arange(span), jnp.int32)
    train_ids = jnp.asarray(train, jnp.int32)
    val_starts = rng.integers(0, len(val) - span, config.eval_sequences)
    val_batch = jnp.asarray(val[val_starts[:, None] + np.arange(span)], jnp.int32)

    def one(lr, seed_index):
        seed = jnp.asarray(config.seeds)[seed_index]
        params = init(jax.random.key(seed), width, depth, vocab, row.mup)
        tx = make_tx(row, lr, base, depth_args)
        state = tx.init(params)

        def step(carry, i):
            params, state = carry
            grads = jax.grad(loss)(params, train_ids[windows[seed_index, i]])
            updates, state = tx.update(grads, state, params)
            return (gradax.apply_updates(params, updates), state), None

        (params, _), _ = jax.lax.scan(step, (params, state), jnp.arange(config.steps))
        return loss(params, val_batch)

    grid = rates(name, config.points)
    n_seeds = len(config.seeds)
    lr_grid = jnp.repeat(jnp.asarray(grid, jnp.float32)[:, None], n_seeds, 1)
    seed_grid = jnp.tile(jnp.arange(n_seeds)[None, :], (len(grid), 1))
    out = np.asarray(jax.jit(jax.vmap(jax.vmap(one)))(lr_grid, seed_grid))
    return np.where(np.isfinite(out), out, np.inf)


def summarize(name: str, losses: dict[int, np.ndarray], points: int) -> dict:
    """Best rate per size, and the largest size at the smallest's best rate."""
    grid = rates(name, points)
    sizes = sorted(losses)
    mean = {s: losses[s].mean(axis=1) for s in sizes}
    best = {s: int(np.argmin(mean[s])) for s in sizes}
    small, large = sizes[0], sizes[-1]
    at_small = float(mean[large][best[small]])
    own = float(mean[large][best[large]])
    return {
        "rates": grid.tolist(),
        "loss": {str(s): losses[s].tolist() for s in sizes},
        "mean": {str(s): mean[s].tolist() for s in sizes},
        "best_rate": {str(s): float(grid[best[s]]) for s in sizes},
        "steps_moved": best[large] - best[small],
        "largest_at_smallest_best": at_small,
        "largest_best": own,
        "cost": at_small / own - 1 if math.isfinite(own) else math.inf,
    }


def run_sweep(config: SweepConfig, data: tuple, progress=print) -> dict:
    """Train every (row, size, rate, seed); returns the summary per row.

    Args:
      config: the sweep.
      data: ``(train ids, validation ids, vocabulary size)``.
      progress: called with one line after each (row, size).
    """
    start = time.perf_counter()
    results = {}
    for name in config.rows:
        losses = {}
        for size in config.sizes:
            t0 = time.perf_counter()
            losses[size] = _losses(name, size, config, data)
            progress(
                f"  {name} {config.axis} {size}: "
                + " ".join(f"{x:.3f}" for x in losses[size].mean(axis=1))
                + f" ({time.perf_counter() - t0:.0f} s)"
            )
        results[name] = summarize(name, losses, config.points)
    return {
        "config": dataclasses.asdict(config),
        "rows": results,
        "wall_s": time.perf_counter() - start,
    }


def format_table(result: dict) -> str:
    """The table: best rate per size, and the largest size's cost."""
    config = result["config"]
    sizes = [str(s) for s in config["sizes"]]
    what = "d_model" if config["axis"] == "width" else "blocks"
    head = (
        ["row"]
        + [f"{what} {s}" for s in sizes]
        + ["steps moved", f"{what} {sizes[-1]}: loss at {sizes[0]}'s best / own best"]
    )
    lines = [head]
    for name, row in result["rows"].items():
        lines.append(
            [name]
            + [f"{row['best_rate'][s]:.3g}" for s in sizes]
            + [
                f"{row['steps_moved']:+d}",
                f"{row['largest_at_smallest_best']:.4f} / {row['largest_best']:.4f}"
                f" ({100 * row['cost']:+.2f}%)",
            ]
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def plot(results: Sequence[dict], path: Path) -> bool:
    """Loss against rate, one panel per row, one line per size; False without
    matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    panels = [(r, name) for r in results for name in r["rows"]]
    cols = min(3, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(
        rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False
    )
    for ax, (result, name) in zip(axes.flat, panels, strict=False):
        row = result["rows"][name]
        what = "d_model" if result["config"]["axis"] == "width" else "blocks"
        finite = [x for s in row["mean"] for x in row["mean"][s] if math.isfinite(x)]
        low = min(finite) if finite else 0.0
        for i, (size, mean) in enumerate(row["mean"].items()):
            y = np.asarray(mean)
            color = plt.cm.viridis(i / max(1, len(row["mean"]) - 1))
            ax.plot(
                row["rates"],
                np.where(np.isfinite(y), y, np.nan),
                "o-",
                color=color,
                label=f"{what} {size}",
                markersize=3,
            )
            k = int(np.argmin(y))
            ax.plot(row["rates"][k], y[k], "*", color=color, markersize=12)
        ax.set_xscale("log", base=2)
        ax.set_ylim(low - 0.05, low + 0.6)
        ax.set_title(f"{name} ({100 * row['cost']:+.2f}%)", fontsize=10)
        ax.set_xlabel("learning rate")
        ax.set_ylabel("validation loss")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def save(results: Sequence[dict], path: Path) -> None:
    """Every figure of the sweeps as JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(list(results), indent=1))


# ---------------------------------------------------------------------------
# The command line: ``gradax demo --transfer``.


class TransferError(Exception):
    """Bad input, explained in one line."""


# The defaults: about 30 minutes on 2 cores for both sweeps (see the docs).
DEFAULT = {
    "widths": (32, 64, 128, 256),
    "depths": (2, 4, 8),
    "steps": 100,
    "batch_size": 8,
    "context": 32,
    "d_model": 64,  # the depth sweep's width
    "layers": 1,  # the width sweep's depth
}


def add_arguments(parser: Any, positive_int: Any) -> None:
    """The ``--transfer`` group of ``gradax demo``."""
    group = parser.add_argument_group("learning-rate transfer (--transfer)")
    group.add_argument(
        "--transfer",
        nargs="?",
        const="width",
        default=None,
        choices=("width", "depth", "all"),
        help=(
            "sweep the learning rate at several widths (or depths, or both) for "
            "AdamW, Muon and MuonH with and without gradax.width_transfer; "
            "print where the best rate sits and write transfer.png and "
            "transfer.json (defaults: widths 32,64,128,256 at --layers 1, depths "
            "2,4,8 at --d-model 64, 7 rates, 2 seeds, --steps 100, "
            "--batch-size 8, --context 32)"
        ),
    )
    for flag, what in (("--widths", "widths"), ("--depths", "block counts")):
        group.add_argument(flag, default=None, help=f"comma-separated {what}")
    group.add_argument(
        "--points",
        type=positive_int,
        default=None,
        help="learning rates per row, in factors of 2 (default: 7)",
    )
    group.add_argument(
        "--rows",
        default=None,
        help=f"comma-separated rows, from: {', '.join(ROWS)}",
    )


def _sizes(text: str | None, default: tuple, flag: str) -> tuple[int, ...]:
    if text is None:
        return default
    try:
        sizes = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise TransferError(
            f"{flag} must be comma-separated integers, got {text!r}"
        ) from None
    if len(sizes) < 2 or any(s < 1 for s in sizes) or list(sizes) != sorted(set(sizes)):
        raise TransferError(
            f"{flag} must be two or more increasing positive integers, got {text!r}"
        )
    return sizes


def configs(args: Any) -> list[SweepConfig]:
    """The sweeps the command line asks for."""

    def pick(name):
        value = getattr(args, name, None)
        return DEFAULT[name] if value is None else value

    if getattr(args, "heads", None) is not None:
        raise TransferError(f"--heads: the sweep's model has {HEADS} heads")
    axes = ("width", "depth") if args.transfer == "all" else (args.transfer,)
    rows = None if args.rows is None else tuple(args.rows.split(","))
    if rows is not None:
        unknown = [r for r in rows if r not in ROWS]
        if unknown:
            raise TransferError(
                f"--rows: unknown {', '.join(unknown)}; known: {', '.join(ROWS)}"
            )
    out = []
    for axis in axes:
        sizes = (
            _sizes(args.widths, DEFAULT["widths"], "--widths")
            if axis == "width"
            else _sizes(args.depths, DEFAULT["depths"], "--depths")
        )
        if axis == "width" and any(w % HEADS for w in sizes):
            raise TransferError(f"--widths must be multiples of {HEADS}, got {sizes}")
        if axis == "depth" and pick("d_model") % HEADS:
            raise TransferError(f"--d-model must be a multiple of {HEADS}")
        default_rows = WIDTH_ROWS if axis == "width" else DEPTH_ROWS
        out.append(
            SweepConfig(
                axis=axis,
                sizes=sizes,
                width=pick("d_model"),
                depth=pick("layers"),
                rows=default_rows if rows is None else rows,
                points=args.points or 7,
                steps=pick("steps"),
                batch_size=pick("batch_size"),
                context=pick("context"),
                seeds=(args.seed, args.seed + 1),
            )
        )
    return out


def load_data(path: Path | None, context: int) -> tuple:
    """The demo's text (or ``--data``) as (train, validation, vocabulary size)."""
    from . import _data

    try:
        corpus = (
            _data.stdlib_corpus(context + 1)
            if path is None
            else _data.file_corpus(path, context + 1)
        )
    except _data.DataError as error:
        raise TransferError(str(error)) from None
    return corpus.train, corpus.validation, corpus.vocab_size


def main(args: Any) -> int:
    """``gradax demo --transfer``: run the sweeps, print, save, plot."""
    import sys

    sweeps = configs(args)
    data = load_data(args.data, max(c.context for c in sweeps))
    results = []
    start, cpu = time.perf_counter(), time.process_time()
    for config in sweeps:
        print(
            f"{config.axis} sweep: sizes {config.sizes}, {config.points} rates, "
            f"seeds {config.seeds}, {config.steps} steps of {config.batch_size}x"
            f"{config.context} characters ("
            + (
                f"{config.depth} blocks)"
                if config.axis == "width"
                else f"d_model {config.width})"
            ),
            file=sys.stderr,
        )
        result = run_sweep(
            config, data, progress=lambda line: print(line, file=sys.stderr)
        )
        results.append(result)
        print(format_table(result))
        print()
    out = args.out
    save(results, out / "transfer.json")
    written = [out / "transfer.json"]
    if plot(results, out / "transfer.png"):
        written.append(out / "transfer.png")
    else:
        print("matplotlib is not installed, so no transfer.png", file=sys.stderr)
    print(
        f"wall {time.perf_counter() - start:.0f} s, CPU "
        f"{time.process_time() - cpu:.0f} s; wrote " + ", ".join(map(str, written))
    )
    return 0
