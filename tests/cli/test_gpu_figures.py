"""benchmarks/gpu_figures.py, the script a lent GPU runs: its peak-memory
section compiles every memory feature's step and reports bytes per
parameter that add up; the report prints what a partial run measured; bad
section names are refused before anything runs. (On a CPU only its smoke
sizes run: the figures themselves need a GPU.)"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gpu_figures():
    path = ROOT / "benchmarks" / "gpu_figures.py"
    spec = importlib.util.spec_from_file_location("gpu_figures", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def smoke_peak(gpu_figures):
    saved = []
    peak = gpu_figures.peak_memory(["17m"], smoke=True, save=saved.append)
    assert saved and saved[-1] is peak  # written after each tree
    return peak


def test_peak_memory_rows_add_up_and_follow_the_shapes(smoke_peak):
    table = smoke_peak["trees"]["smoke"]
    rows = table["rows"]
    assert "adamw (reference)" in rows and "bf16: master_weights(adamw)" in rows
    for name, row in rows.items():
        parts = row["params"] + row["grads"] + row["state"] + row["temps"]
        assert row["peak"] == pytest.approx(parts + row["extra out"]), name
        assert row["temps"] >= 0, name
        # The tree's own bytes: float32 or bfloat16 parameters and gradients.
        width = 2.0 if name.startswith("bf16") else 4.0
        assert row["params"] == row["grads"] == width, name
    # Two float32 moments (and a 4-byte step count over the whole tree).
    assert rows["adamw (reference)"]["state"] == pytest.approx(8.0, abs=1e-4)
    # Two int8 moments: a byte each, and a float32 scale per 256-block.
    assert rows["adamw, int8 moments"]["state"] == pytest.approx(2 + 8 / 256, 0.05)


def test_report_prints_the_sections_a_run_measured(gpu_figures, smoke_peak, capsys):
    gpu_figures.print_report(
        {"device": "cpu:0", "smoke": True, "peak_memory": smoke_peak, "wall_seconds": 1}
    )
    text = capsys.readouterr().out
    assert "(smoke sizes: not figures)" in text
    assert "peak memory of a step, smoke tree" in text
    assert "bf16: stochastic_rounding(muon int8)" in text
    assert "matmul peak" not in text  # a section that did not run


@pytest.mark.parametrize(
    "argv, named",
    [
        (["--sections", "peak,bogus"], "--sections: unknown ['bogus']"),
        (["--peak-trees", "17m,7b"], "--peak-trees"),
    ],
)
def test_bad_arguments_are_refused_naming_them(
    gpu_figures, monkeypatch, capsys, argv, named
):
    monkeypatch.setattr(sys, "argv", ["gpu_figures.py", "--smoke", *argv])
    with pytest.raises(SystemExit):
        gpu_figures.main()
    assert named in capsys.readouterr().err
