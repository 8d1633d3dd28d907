"""``gradax demo --transfer`` on a tiny configuration: the table and the plot.

One row (AdamW under width_transfer), two widths, two rates, two steps: the
point is the command's plumbing (flags, table, JSON, PNG), not the figures,
which the full sweep reports (docs/width-transfer.md).
"""

from __future__ import annotations

import json
import textwrap

import pytest

from gradax_cli import main
from gradax_cli.transfer import ROWS, format_table

TEXT = (
    textwrap.dedent(
        """\
    def fibonacci(n):
        a, b = 0, 1
        for _ in range(n):
            a, b = b, a + b
        return a
    """
    )
    * 40
)

TINY = [
    "--widths", "4,8", "--points", "2", "--steps", "2", "--batch-size", "2",
    "--context", "8", "--rows", "adamw-gradax",
]  # fmt: skip


def test_transfer_writes_table_json_and_plot(tmp_path, capsys):
    data = tmp_path / "text.txt"
    data.write_text(TEXT)
    out = tmp_path / "out"
    assert (
        main(["demo", "--transfer", "--data", str(data), "--out", str(out), *TINY]) == 0
    )
    lines = capsys.readouterr().out.splitlines()
    # Header, one row per sweep row, then the wall line.
    header = lines[0].split()
    assert header[:5] == ["row", "d_model", "4", "d_model", "8"]
    row = lines[1].split()
    assert row[0] == "adamw-gradax"
    low = ROWS["adamw-gradax"].low
    assert {float(row[1]), float(row[2])} <= {low, 2 * low}
    assert lines[-1].startswith("wall ")
    results = json.loads((out / "transfer.json").read_text())
    assert len(results) == 1 and results[0]["config"]["axis"] == "width"
    summary = results[0]["rows"]["adamw-gradax"]
    # Two rates x two seeds per width; the best rate is the lowest mean.
    assert [len(x) for x in summary["loss"]["8"]] == [2, 2]
    mean8 = summary["mean"]["8"]
    assert summary["largest_best"] == min(mean8)
    assert format_table(results[0]).splitlines()[1].split()[0] == "adamw-gradax"
    pytest.importorskip("matplotlib", reason="the plot needs the demo extra")
    png = (out / "transfer.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--transfer", "--widths", "8"], "--widths must be two or more"),
        (["--transfer", "--widths", "3,8"], "multiples of 2"),
        (["--transfer", "--rows", "sgd"], "--rows: unknown sgd"),
        (["--widths", "8,16"], "--widths needs --transfer"),
        (["--transfer", "--heads", "4"], "the sweep's model has 2 heads"),
    ],
)
def test_transfer_bad_input_is_one_line(args, match, capsys):
    assert main(["demo", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert match in err and "\n" not in err
