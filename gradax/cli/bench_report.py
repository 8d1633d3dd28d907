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
]


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
        lines.append(
            f"CPU threads: {', '.join(map(str, sorted(threads)))} "
            "(torch set to the same)"
        )
    for name, outcome in outcomes.items():
        if outcome["status"] != "ok":
            lines.append(f"{name}: {outcome['status']}: {outcome['note']}")
            continue
        lines += [str(line) for line in outcome["result"].get("notes", [])]
    return lines


def print_table(rows: list[dict[str, Any]], lines: list[str], quick: bool) -> None:
    """The table on stdout (rich where installed), the notes under it."""
    body = cells(rows)
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
                    x.ljust(w) if i in (0, 2, 5) else x.rjust(w)
                    for i, (x, w) in enumerate(zip(row, widths, strict=True))
                ).rstrip()
            )
        for line in lines:
            print(f"- {line}")
        return
    table = Table(title=title, box=box.SIMPLE_HEAD)
    for i, name in enumerate(HEAD):
        table.add_column(
            name, justify="left" if i in (0, 2, 5) else "right", no_wrap=True
        )
    for row in body:
        table.add_row(*row)
    console = Console()
    if not console.is_terminal:  # a log or a file: no need to squeeze
        console = Console(width=120)
    console.print(table)
    for line in lines:
        console.print(f"- {line}", highlight=False, markup=False)


def plot(rows: list[dict[str, Any]], path: Path, quick: bool) -> bool:
    """Bars of gradax/ref per comparison, the floor marked; False without matplotlib.

    The floor is drawn in the same unit: floor time over the reference's
    time, the ratio gradax would have at the machine's floor.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    shown = [row for row in rows if row["ratio"] is not None]
    fig, ax = plt.subplots(figsize=(8, 1.8 + 0.42 * max(1, len(shown))))
    names = [f"{row['label']}\nvs {row['reference']}" for row in shown]
    positions = list(range(len(shown)))[::-1]
    ratios = [row["ratio"] for row in shown]
    # Bars grow from parity (1): left, gradax is faster; right, slower.
    ax.barh(
        positions,
        [r - 1.0 for r in ratios],
        left=1.0,
        height=0.6,
        color=["tab:blue" if r <= 1 else "tab:orange" for r in ratios],
        label="gradax / reference",
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
            label="floor / reference (the best possible ratio)",
        )
    ax.axvline(1.0, color="gray", linestyle="--", linewidth=0.8)
    ax.set_yticks(positions, names, fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel("time relative to the reference (below 1: gradax is faster)")
    title = "gradax bench" + (" --quick (noisy)" if quick else "")
    ax.set_title(title)
    if shown:
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncols=2)
    else:
        ax.text(0.5, 0.5, "no comparisons", transform=ax.transAxes, ha="center")
    ax.grid(axis="x", alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
