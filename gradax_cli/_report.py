"""What ``gradax demo`` shows: the progress bar, the results table, the plot."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any


def describe(labels: list[str], steps: int, header: dict[str, Any]) -> str:
    """One line saying what is about to be trained on what."""
    train_files, val_files = header["files"]
    files = f"{train_files} files, " if train_files else ""
    held = f"{val_files} files, " if val_files else ""
    return (
        f"Training a {header['params']:,}-parameter character transformer on "
        f"{header['corpus']} ({files}{header['train_chars']:,} characters; "
        f"validation: {held}{header['val_chars']:,}) with {', '.join(labels)}, "
        f"{steps} steps each"
    )


class _PlainProgress:
    """Progress as occasional lines on stderr, when rich is not installed."""

    def __init__(self, labels, steps, header):
        self.steps = steps
        self.every = max(1, steps // 10)
        self.line = describe(labels, steps, header)
        self.printed = {label: 0 for label in labels}  # the last step printed

    def __enter__(self):
        print(self.line, file=sys.stderr)
        return self

    def __exit__(self, *exc):
        return False

    def __call__(self, label, step, loss, val_loss):
        # Called after each stretch of steps between evaluations, not each
        # step: a line once at least a tenth of the run has passed.
        if step and (step - self.printed[label] >= self.every or step == self.steps):
            self.printed[label] = step
            print(
                f"{label:>10s} step {step:5d}/{self.steps}  loss {loss:.3f}  "
                f"val {val_loss:.3f}",
                file=sys.stderr,
            )


class _RichProgress:
    def __init__(self, labels, steps, header):
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.progress = Progress(
            TextColumn("{task.description:>10s}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[losses]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
        )
        self.line = describe(labels, steps, header)
        self.tasks = {
            label: self.progress.add_task(label, total=steps, losses="", start=False)
            for label in labels
        }

    def __enter__(self):
        self.progress.console.print(self.line, highlight=False)
        self.progress.start()
        return self

    def __exit__(self, *exc):
        self.progress.stop()
        return False

    def __call__(self, label, step, loss, val_loss):
        if step == 0:  # this optimizer starts now: start its clock
            self.progress.start_task(self.tasks[label])
            self.progress.update(self.tasks[label], losses=f"val {val_loss:.3f}")
            return
        self.progress.update(
            self.tasks[label],
            completed=step,
            losses=f"loss {loss:.3f} val {val_loss:.3f}",
        )


def make_progress(labels, steps, header):
    try:
        import rich  # noqa: F401
    except ImportError:
        return _PlainProgress(labels, steps, header)
    return _RichProgress(labels, steps, header)


def format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def table_rows(results: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    reference = results["reference"]
    head = [
        "optimizer",
        "lr",
        "train loss",
        "val loss",
        f"steps to {reference}",
        "ms per step",
        "state",
    ]
    rows = []
    for label, r in results["optimizers"].items():
        reached = r["steps_to_reference"]
        seconds = r["seconds_per_step"]
        rows.append(
            [
                label,
                f"{r['learning_rate']:g}",
                f"{r['final_train_loss']:.3f}",
                f"{r['final_val_loss']:.3f}",
                "-" if reached is None else str(reached),
                "-" if seconds is None else f"{seconds * 1e3:.1f}",
                format_bytes(r["state_bytes"]),
            ]
        )
    return head, rows


def print_table(results: dict[str, Any]) -> None:
    head, rows = table_rows(results)
    cfg = results["config"]
    title = (
        f"{cfg['params']:,} parameters, {cfg['steps']} steps of "
        f"{cfg['batch_size']}x{cfg['context']} characters"
    )
    caption = (
        f"steps to {results['reference']}: the first evaluated step with a "
        f"validation loss <= {results['reference_val_loss']:.3f}, "
        f"{results['reference']}'s final one"
    )
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        widths = [max(len(x) for x in col) for col in zip(head, *rows, strict=True)]
        print(title)
        for row in [head, *rows]:
            print("  ".join(x.rjust(w) for x, w in zip(row, widths, strict=True)))
        print(caption)
        return
    table = Table(title=title, caption=caption)
    for i, name in enumerate(head):
        # Names ("adamw8bit-bf16-master") and sizes ("916.5 KiB") are never
        # cut or folded: the headers of the other columns wrap instead.
        table.add_column(
            name,
            justify="left" if i == 0 else "right",
            no_wrap=i in (0, len(head) - 1),
        )
    for row in rows:
        table.add_row(*row)
    Console().print(table)


def summary_line(results: dict[str, Any]) -> str | None:
    """E.g. "muon reached adamw's final validation loss in 40% of the steps"."""
    reference = results["reference"]
    steps = results["config"]["steps"]
    parts = []
    for label, r in results["optimizers"].items():
        reached = r["steps_to_reference"]
        if label == reference:
            continue
        if reached is None:
            parts.append(f"{label} did not reach it")
        else:
            parts.append(f"{label} reached it in {reached / steps:.0%} of the steps")
    if not parts:
        return None
    return f"{reference}'s final validation loss after {steps} steps: " + "; ".join(
        parts
    )


def plot(results: dict[str, Any], path: Path) -> bool:
    """Plot validation loss against steps; False if matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, r in results["optimizers"].items():
        ax.plot(r["eval_steps"], r["val_loss"], marker=".", label=label)
    ax.axhline(
        results["reference_val_loss"],
        color="gray",
        linestyle="--",
        linewidth=0.8,
        label=f"{results['reference']} final",
    )
    cfg = results["config"]
    ax.set_xlabel("step")
    ax.set_ylabel("validation loss (nats per character)")
    finals = [r["val_loss"][-1] for r in results["optimizers"].values()]
    starts = [
        r["val_loss"][min(1, len(r["val_loss"]) - 1)]
        for r in results["optimizers"].values()
    ]
    ax.set_ylim(min(finals) - 0.1, max(starts) + 0.2)
    ax.set_title(f"gradax demo: {cfg['params']:,}-parameter character transformer")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
