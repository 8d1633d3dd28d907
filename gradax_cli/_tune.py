"""``gradax demo --tune``: a small learning-rate sweep per optimizer.

Each optimizer trains once per rate of its grid, for fewer steps than the
final comparison, from the same initialization on the same batches; the rate
with the lowest final validation loss is kept for the final run. A grid is
the optimizer's default rate (or the ``name:lr`` given) times the
multipliers of its family, or of ``--grid``:

- adaptive (adam, adamw and any optimizer not named below): per-coordinate
  normalized steps, good over about a decade around the default:
  ``0.3x, 1x, 3x``;
- orthogonal (the Muon family): steps of spectral norm about one, the same
  decade around the default: ``0.3x, 1x, 3x``;
- sign (lion): steps of +-1 per coordinate, larger than Adam's at the same
  rate; the Lion paper advises 3-10x below AdamW's rate, so the grid reaches
  down from the default (AdamW's rate): ``0.1x, 0.3x, 1x``;
- sgd: momentum SGD's stable range ends abruptly above, so the grid
  reaches down from the default: ``0.1x, 0.3x, 1x``.

A shorter run favours higher rates (its schedule decays sooner), so the best
rate of the sweep is a guide, not a proof; a best rate at the edge of its
grid is flagged.

References:
    Chen et al., "Symbolic Discovery of Optimization Algorithms" (Lion),
    arXiv:2302.06675.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

FAMILY_GRIDS: dict[str, tuple[float, ...]] = {
    "adaptive": (0.3, 1.0, 3.0),
    "orthogonal": (0.3, 1.0, 3.0),
    "sign": (0.1, 0.3, 1.0),
    "sgd": (0.1, 0.3, 1.0),
}


class GridError(Exception):
    """Bad ``--grid`` text, explained in one line."""


def family(name: str) -> str:
    """The family of an optimizer of the demo, by its name."""
    if name.startswith("sgd"):
        return "sgd"
    if "lion" in name or name.startswith("sign"):
        return "sign"
    if any(word in name for word in ("muon", "dion", "scion")):
        return "orthogonal"
    return "adaptive"


def parse_grid(text: str) -> tuple[float, ...]:
    """``"0.3,1,3"`` -> sorted distinct positive multipliers."""
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts:
        raise GridError(f"--grid {text!r} is empty; e.g. --grid 0.3,1,3")
    values = []
    for part in parts:
        try:
            value = float(part)
        except ValueError:
            raise GridError(f"--grid: {part!r} is not a number") from None
        if not (math.isfinite(value) and value > 0):
            raise GridError(f"--grid: {part!r} must be a positive multiplier")
        values.append(value)
    return tuple(sorted(set(values)))


def grid_for(name: str, learning_rate: float, multipliers=None) -> list[float]:
    """The rates to try: ``learning_rate`` times the multipliers."""
    chosen = multipliers or FAMILY_GRIDS[family(name)]
    return [float(f"{learning_rate * m:.3g}") for m in chosen]


def sweep(
    specs: Sequence[Any],
    steps: int,
    multipliers: Sequence[float] | None,
    train: Callable[[Any, Any], dict[str, Any]],
    make_progress: Callable[[list[str]], Any],
    diverged: type[Exception],
) -> dict[str, dict[str, Any]]:
    """Train every spec at every rate of its grid; the losses and the best rate.

    ``train(spec, progress)`` trains one spec for ``steps`` and returns the
    demo's result dict; it raises ``diverged`` when the loss stops being
    finite, which the sweep records as a missing loss.
    """
    grids = {s.label: grid_for(s.name, s.learning_rate, multipliers) for s in specs}
    labels = [f"{s.label} lr={lr:g}" for s in specs for lr in grids[s.label]]
    tuning: dict[str, dict[str, Any]] = {}
    with make_progress(labels) as bar:
        for spec in specs:
            losses: list[float | None] = []
            for lr in grids[spec.label]:
                run = dataclasses.replace(
                    spec, label=f"{spec.label} lr={lr:g}", learning_rate=lr
                )
                try:
                    losses.append(train(run, bar)["final_val_loss"])
                except diverged:
                    losses.append(None)
            tuning[spec.label] = _summary(spec, grids[spec.label], losses, steps)
    return tuning


def _summary(spec, grid, losses, steps) -> dict[str, Any]:
    finite = [
        (loss, lr) for loss, lr in zip(losses, grid, strict=True) if loss is not None
    ]
    best = min(finite)[1] if finite else None
    return {
        "optimizer": spec.name,
        "family": family(spec.name),
        "steps": steps,
        "grid": grid,
        "val_loss": losses,
        "best_learning_rate": best,
        "best_at_edge": len(grid) > 1 and best in (grid[0], grid[-1]),
    }


def tuned(
    specs: Sequence[Any],
    tuning: dict[str, dict[str, Any]],
    error: type[Exception] = ValueError,
) -> list[Any]:
    """The specs with each one's best rate; ``error`` if one never trained."""
    out = []
    for spec in specs:
        best = tuning[spec.label]["best_learning_rate"]
        if best is None:
            grid = ", ".join(f"{lr:g}" for lr in tuning[spec.label]["grid"])
            raise error(
                f"{spec.label}: the loss diverged at every rate of the grid "
                f"({grid}); give a smaller rate (--optimizers {spec.name}:LR)"
            )
        out.append(dataclasses.replace(spec, learning_rate=best))
    return out


def table_rows(tuning: dict[str, dict[str, Any]]) -> list[list[str]]:
    rows = []
    for label, t in tuning.items():
        for i, (lr, loss) in enumerate(zip(t["grid"], t["val_loss"], strict=True)):
            mark = ""
            if lr == t["best_learning_rate"]:
                mark = "best, at the grid's edge" if t["best_at_edge"] else "best"
            rows.append(
                [
                    label if i == 0 else "",
                    f"{lr:g}",
                    "diverged" if loss is None else f"{loss:.3f}",
                    mark,
                ]
            )
    return rows


def print_table(tuning: dict[str, dict[str, Any]]) -> None:
    """The sweep as a table: one row per optimizer and rate."""
    head = ["optimizer", "learning rate", "val loss", ""]
    rows = table_rows(tuning)
    steps = next(iter(tuning.values()))["steps"]
    title = f"learning-rate sweep: {steps} steps per run, the best rate kept"
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        widths = [max(len(x) for x in col) for col in zip(head, *rows, strict=True)]
        print(title)
        for row in [head, *rows]:
            print("  ".join(x.rjust(w) for x, w in zip(row, widths, strict=True)))
        return
    table = Table(title=title)
    for i, name in enumerate(head):
        table.add_column(name, justify="left" if i in (0, 3) else "right")
    for row in rows:
        table.add_row(*row)
    Console().print(table)


def plot(tuning: dict[str, dict[str, Any]], path: Path) -> bool:
    """Validation loss against learning rate, one line per optimizer."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, t in tuning.items():
        points = [
            (lr, loss)
            for lr, loss in zip(t["grid"], t["val_loss"], strict=True)
            if loss is not None
        ]
        if not points:
            continue
        (line,) = ax.plot(*zip(*points, strict=True), marker="o", label=label)
        best = t["best_learning_rate"]
        loss = dict(points)[best]
        ax.plot([best], [loss], marker="*", markersize=14, color=line.get_color())
    steps = next(iter(tuning.values()))["steps"]
    ax.set_xscale("log")
    ax.set_xlabel("peak learning rate")
    ax.set_ylabel(f"validation loss after {steps} steps (nats per character)")
    ax.set_title("gradax demo --tune: learning-rate sweep (star: kept)")
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
