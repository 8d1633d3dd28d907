"""What ``gradax bench`` shows: one table row per comparison, notes, a plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

HEAD = [
    "benchmark",
    "gradax",
    "reference",
    "time",
    "ratio",
    "floor",
    "floor time",
    "of floor",
    "reading",
]
# Columns of text, aligned left; the others are numbers.
_LEFT = (0, 2, 5, 8)


def comparison_rows(outcomes: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Every benchmark's comparisons, each with ``"benchmark"``: its name.

    A result without ``"comparisons"`` (a ``bench_*.py`` file of an older
    form) gives one row per time in its ``"seconds"`` against ``"gradax"``.
    """
    rows = []
    for name, outcome in outcomes.items():
        if outcome["status"] != "ok":
            continue
        result = outcome["result"]
        found = result.get("comparisons")
        if found is None:
            found = _rows_from_seconds(result)
        rows += [{"benchmark": name, **row} for row in found]
    return rows


def _rows_from_seconds(result: dict[str, Any]) -> list[dict[str, Any]]:
    seconds = result.get("seconds") or {}
    if "gradax" not in seconds:
        return []
    label = str(result.get("benchmark", ""))
    others = [name for name in seconds if name != "gradax"] or [None]
    return [
        {
            "label": label,
            "gradax_seconds": seconds["gradax"],
            "reference": other,
            "reference_seconds": seconds.get(other),
            "ratio": seconds["gradax"] / seconds[other] if other else None,
            "floor": None,
            "floor_seconds": None,
            "fraction_of_floor": None,
            "floor_note": None,
        }
        for other in others
    ]


def format_seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 1:
        return f"{value:.2f} s"
    if abs(value) >= 1e-3:
        return f"{value * 1e3:.2f} ms"
    return f"{value * 1e6:.1f} us"


def reading(row: dict[str, Any]) -> str:
    """The row in words: who is faster, by how much; why "of floor" passes 100%."""
    parts = []
    ratio, fraction = row["ratio"], row["fraction_of_floor"]
    if ratio is not None and ratio > 0:
        if ratio < 1:
            parts.append(f"gradax {1 / ratio:.2f}x faster")
        elif ratio > 1:
            parts.append(f"gradax {ratio:.2f}x slower")
        else:
            parts.append("the same time")
    if fraction is not None and fraction > 1:
        why = row.get("floor_note") or (
            "faster than the floor's estimate, a rate measured once on this "
            "machine (small problems can run from the CPU's caches)"
        )
        parts.append(f"of floor over 100%: {why}")
    return "; ".join(parts) or "-"


def verdict(rows: list[dict[str, Any]], quick: bool) -> str:
    """One line under the table: in how many comparisons gradax was faster."""
    ratios = [row["ratio"] for row in rows if row["ratio"] is not None]
    if not ratios:
        return "verdict: no comparisons (no reference installed)"
    faster = sum(r < 1 for r in ratios)
    line = (
        f"verdict: gradax faster in {faster} of {len(ratios)} comparisons "
        f"(ratio below 1)"
    )
    slower = [row for row in rows if row["ratio"] is not None and row["ratio"] > 1]
    if slower:
        line += "; slower: " + ", ".join(
            f"{row['label']} vs {row['reference']}" for row in slower
        )
    if quick:
        line += " (--quick: noisy, rerun without it to confirm)"
    return line


def cells(rows: list[dict[str, Any]]) -> list[list[str]]:
    """The table's text, a benchmark's label shown once for its rows."""
    out, previous = [], None
    for row in rows:
        ratio, fraction = row["ratio"], row["fraction_of_floor"]
        out.append(
            [
                "" if row["label"] == previous else row["label"],
                format_seconds(row["gradax_seconds"]),
                row["reference"] or "-",
                format_seconds(row["reference_seconds"]),
                "-" if ratio is None else f"{ratio:.2f}",
                row["floor"] or "-",
                format_seconds(row["floor_seconds"]),
                "-" if fraction is None else f"{fraction:.0%}",
                reading(row),
            ]
        )
        previous = row["label"]
    return out


def notes(
    outcomes: dict[str, dict[str, Any]], quick: bool, installed: dict[str, bool]
) -> list[str]:
    """The lines under the table: how to read it, what was left out, why."""
    lines = []
    if quick:
        lines.append("quick mode: small problems, few repeats: ratios are noisy")
    lines.append(
        "ratio: gradax's time over the reference's (below 1: gradax is "
        "faster); floor: the least time this machine allows (bandwidth: bytes "
        "moved over the measured bandwidth; matmul: FLOPs over the measured "
        "matmul rate); of floor: floor time over gradax's time"
    )
    for library, hint in (("optax", "optax"), ("torch", "torch"), ("scipy", "scipy")):
        if not installed.get(library, True):
            lines.append(
                f"{library} is not installed: no {library} rows (pip install {hint})"
            )
    threads = {
        o["result"]["threads"]
        for o in outcomes.values()
        if o["status"] == "ok" and "threads" in o["result"]
    }
    if threads:
        same = " (torch set to the same)" if installed.get("torch", False) else ""
        lines.append(f"CPU threads: {', '.join(map(str, sorted(threads)))}{same}")
    for name, outcome in outcomes.items():
        if outcome["status"] != "ok":
            lines.append(f"{name}: {outcome['status']}: {outcome['note']}")
            continue
        lines += [str(line) for line in outcome["result"].get("notes", [])]
    return lines


def print_table(rows: list[dict[str, Any]], lines: list[str], quick: bool) -> None:
    """The table on stdout (rich where installed), its verdict, the notes."""
    body = cells(rows)
    summary = verdict(rows, quick)
    title = "gradax bench" + (" --quick" if quick else "")
    try:
        from rich import box
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        widths = [max(len(x) for x in col) for col in zip(HEAD, *body, strict=True)]
        print(title)
        for row in [HEAD, *body]:
            print(
                "  ".join(
                    x.ljust(w) if i in _LEFT else x.rjust(w)
                    for i, (x, w) in enumerate(zip(row, widths, strict=True))
                ).rstrip()
            )
        print(summary)
        for line in lines:
            print(f"- {line}")
        return
    table = Table(title=title, box=box.SIMPLE_HEAD)
    for i, name in enumerate(HEAD):
        table.add_column(
            name, justify="left" if i in _LEFT else "right", no_wrap=i != 8
        )
    for row in body:
        table.add_row(*row)
    console = Console()
    if not console.is_terminal:  # a log or a file: no need to squeeze
        console = Console(width=160)
    console.print(table)
    console.print(summary, highlight=False, markup=False)
    for line in lines:
        console.print(f"- {line}", highlight=False, markup=False)


def plot(rows: list[dict[str, Any]], path: Path, quick: bool) -> bool:
    """Bars of gradax/ref per comparison, the floor marked; False without matplotlib.

    Each bar grows from parity (1) to its ratio, which is written at its end:
    blue where gradax is faster, orange where it is slower. The floor is
    drawn in the same unit: floor time over the reference's time, the ratio
    gradax would have at the machine's floor.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter
    except ImportError:
        return False
    shown = [row for row in rows if row["ratio"] is not None]
    fig, ax = plt.subplots(
        figsize=(9, 2.4 + 0.5 * max(1, len(shown))), layout="constrained"
    )
    title = "gradax bench" + (" --quick (noisy)" if quick else "")
    ax.set_title(title)
    if not shown:
        ax.text(0.5, 0.5, "no comparisons", transform=ax.transAxes, ha="center")
        ax.set_axis_off()
        fig.savefig(path, dpi=120)
        plt.close(fig)
        return True
    positions = list(range(len(shown)))[::-1]
    ratios = [row["ratio"] for row in shown]
    for faster, color, label in (
        (True, "tab:blue", "gradax faster (ratio below 1)"),
        (False, "tab:orange", "gradax slower (ratio above 1)"),
    ):
        chosen = [i for i, r in enumerate(ratios) if (r <= 1) == faster]
        if chosen:
            ax.barh(
                [positions[i] for i in chosen],
                [ratios[i] - 1.0 for i in chosen],
                left=1.0,
                height=0.6,
                color=color,
                label=label,
            )
    floors = [
        (pos, row["floor_seconds"] / row["reference_seconds"])
        for pos, row in zip(positions, shown, strict=True)
        if row["floor_seconds"] is not None
    ]
    if floors:
        ax.scatter(
            [f for _, f in floors],
            [p for p, _ in floors],
            marker="|",
            s=400,
            linewidths=2.5,
            color="tab:red",
            zorder=3,
            label="machine's floor (the best ratio this machine allows)",
        )
    floor_at = {pos: f for pos, f in floors}
    for pos, r in zip(positions, ratios, strict=True):
        # The label goes past the bar's end, and past the floor's mark where
        # that lies beyond the end, so the two never overlap.
        f = floor_at.get(pos)
        if r <= 1:
            anchor = r if f is None else min(r, f)
        else:
            anchor = r if f is None else max(r, f)
        ax.annotate(
            f"{r:.2f}x" if r >= 0.1 else f"{r:.3f}x",
            (anchor, pos),
            xytext=(-6 if r <= 1 else 6, 0),
            textcoords="offset points",
            ha="right" if r <= 1 else "left",
            va="center",
            fontsize=8,
        )
    ax.axvline(1.0, color="gray", linestyle="--", linewidth=0.8)
    ax.set_yticks(positions, [f"{r['label']}\nvs {r['reference']}" for r in shown])
    ax.tick_params(axis="y", labelsize=8)
    ax.set_xscale("log")
    values = ratios + [f for _, f in floors] + [1.0]
    low, high = min(values) / 2.2, max(values) * 2.2
    ax.set_xlim(low, high)
    steps = [m * 10.0**e for e in range(-4, 5) for m in (1, 2, 5)]
    ax.xaxis.set_major_locator(FixedLocator([t for t in steps if low <= t <= high]))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("gradax's time over the reference's (below 1: gradax is faster)")
    ax.grid(axis="x", alpha=0.3, which="major")
    fig.legend(loc="outside lower center", ncols=3, fontsize=8, frameon=False)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
