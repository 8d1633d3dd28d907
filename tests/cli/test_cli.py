"""The ``gradax`` command: ``demo`` on tiny settings, bad input, ``bench``."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import sysconfig
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from gradax_cli import _bench_report as bench_report
from gradax_cli import _data as data_lib
from gradax_cli import _tune as tune
from gradax_cli import main
from gradax_cli._bench import run_one
from gradax_cli._demo import OPTIMIZERS, RunSpec, eval_steps
from gradax_cli.benchmarks.common import comparison

TINY = ["--context", "16", "--d-model", "16", "--layers", "1", "--heads", "2"]
TEXT = textwrap.dedent(
    """\
    def fibonacci(n):
        a, b = 0, 1
        for _ in range(n):
            a, b = b, a + b
        return a
    """
)
RESULT_KEYS = {
    "optimizer",
    "learning_rate",
    "final_train_loss",
    "final_val_loss",
    "eval_steps",
    "val_loss",
    "train_loss",
    "steps_to_reference",
    "seconds_per_step",
    "state_bytes",
}


@pytest.fixture(scope="module")
def text_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("data") / "code.txt"
    path.write_text(TEXT * 40)
    return path


def demo(out: Path, *args: str) -> dict:
    code = main(["demo", "--out", str(out), "--batch-size", "4", *TINY, *args])
    assert code == 0
    return json.loads((out / "results.json").read_text())


@pytest.fixture(scope="module")
def file_run(text_file, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("demo")
    args = ["--data", str(text_file), "--steps", "6", "--optimizers", "adamw,muon"]
    return out, demo(out, *args)


def test_demo_writes_results_and_plot(file_run):
    out, results = file_run
    assert set(results) >= {"config", "reference", "reference_val_loss", "optimizers"}
    assert results["reference"] == "adamw"
    assert list(results["optimizers"]) == ["adamw", "muon"]
    for r in results["optimizers"].values():
        assert set(r) >= RESULT_KEYS
        assert len(r["train_loss"]) == 6
        assert r["eval_steps"][0] == 0 and r["eval_steps"][-1] == 6
        assert len(r["val_loss"]) == len(r["eval_steps"])
        assert r["val_loss"][-1] < r["val_loss"][0]  # it learns
        assert r["state_bytes"] > 0 and r["seconds_per_step"] > 0
    # AdamW reaches its own final loss; its steps_to_reference is a step count.
    assert results["optimizers"]["adamw"]["steps_to_reference"] in range(7)
    png = (out / "loss.png").read_bytes()
    assert png.startswith(b"\x89PNG")
    # The second figure: each step's metrics (gradax.with_metrics), by group.
    assert (out / "metrics.png").read_bytes().startswith(b"\x89PNG")
    for r in results["optimizers"].values():
        assert len(r["metrics"]["grad_norm"]) == len(r["metrics"]["clip/fired"]) == 6
    muon = results["optimizers"]["muon"]["metrics"]
    assert {"muon/update_rms", "adam/lr"} <= set(muon)


def test_demo_prints_table(text_file, tmp_path, capsys):
    demo(tmp_path, "--data", str(text_file), "--steps", "2", "--optimizers", "sgd")
    out = capsys.readouterr().out
    # Headers may wrap onto several lines on a narrow terminal: check words.
    words = set(out.replace("┃", " ").replace("│", " ").split())
    for word in ("optimizer", "train", "val", "loss", "ms", "per", "step", "state"):
        assert word in words, word
    assert "sgd" in out
    assert "results.json" in out and "loss.png" in out


def test_demo_without_rich_or_matplotlib(text_file, tmp_path, monkeypatch, capsys):
    for name in list(sys.modules):
        if name.split(".")[0] in ("rich", "matplotlib"):
            monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "rich", None)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    demo(tmp_path, "--data", str(text_file), "--steps", "6", "--optimizers", "adamw")
    captured = capsys.readouterr()
    assert not (tmp_path / "loss.png").exists()
    assert "matplotlib is not installed" in captured.err
    assert "step     6/6" in captured.err  # the plain progress lines
    assert "train loss" in captured.out and "adamw" in captured.out


def test_demo_is_deterministic(file_run, text_file, tmp_path):
    _, first = file_run
    args = ["--data", str(text_file), "--steps", "6", "--optimizers", "adamw,muon"]
    again = demo(tmp_path / "again", *args)
    other = demo(tmp_path / "other", *args, "--seed", "1")
    for name in ("adamw", "muon"):
        a, b = first["optimizers"][name], again["optimizers"][name]
        assert a["train_loss"] == b["train_loss"]
        assert a["val_loss"] == b["val_loss"]
        assert a["train_loss"] != other["optimizers"][name]["train_loss"]


def test_full_is_the_longer_run_and_flags_override_it(text_file, tmp_path):
    # The run's length comes from --full or the default; --steps and
    # --batch-size given explicitly win over either. A train of 2 steps
    # keeps this fast; the recorded config shows what the flags chose.
    args = ["--data", str(text_file), "--optimizers", "sgd", *TINY]

    def config(out, *extra):
        assert main(["demo", "--out", str(tmp_path / out), *args, *extra]) == 0
        return json.loads((tmp_path / out / "results.json").read_text())["config"]

    full = config("full", "--full", "--steps", "2")
    assert (full["full"], full["steps"], full["batch_size"]) == (True, 2, 32)
    assert full["eval_every"] == 15
    quick = config("quick", "--steps", "2")
    assert (quick["full"], quick["steps"], quick["batch_size"]) == (False, 2, 16)
    assert quick["eval_every"] == 10
    both = config("both", "--full", "--steps", "2", "--batch-size", "3")
    assert both["batch_size"] == 3


def test_eval_steps_split_the_run_into_equal_stretches():
    # Equal stretches share one compile; a short run is still evaluated
    # twice after step 0, so its second stretch is timed without the compile.
    assert eval_steps(150, 10) == list(range(0, 151, 10))
    assert eval_steps(300, 15) == list(range(0, 301, 15))
    assert eval_steps(6, 10) == [0, 3, 6]
    assert eval_steps(1, 10) == [0, 1]
    assert eval_steps(25, 10) == [0, 10, 20, 25]


def test_demo_default_corpus(tmp_path):
    results = demo(tmp_path, "--steps", "2", "--optimizers", "adamw")
    config = results["config"]
    assert config["data"] is None
    assert "standard library" in config["corpus"]
    train_files, val_files = config["files"]
    assert train_files > 5 * val_files > 0
    assert config["val_chars"] > 10_000


def test_stdlib_split_is_by_file_and_stable():
    files = data_lib.stdlib_files()
    assert files == data_lib.stdlib_files()
    assert not any("site-packages" in f.parts for f in files)
    root = Path(sysconfig.get_paths()["stdlib"])
    names = [f.relative_to(root).as_posix() for f in files]
    held = [name for name in names if data_lib.is_validation_file(name)]
    assert 0 < len(held) < len(files) / 4
    assert data_lib.is_validation_file("os.py") == data_lib.is_validation_file("os.py")


def test_encode_maps_unknown_to_zero():
    alphabet = data_lib.build_alphabet("aab")
    assert alphabet == "\0ab"
    ids = data_lib.encode("abz\0", alphabet)
    assert ids.tolist() == [1, 2, 0, 0]


def test_optimizer_lr_suffix(text_file, tmp_path):
    results = demo(
        tmp_path,
        "--data",
        str(text_file),
        "--steps",
        "6",
        "--optimizers",
        "muon:0.01,adamw:1e-3",
    )
    runs = results["optimizers"]
    assert list(runs) == ["muon:0.01", "adamw:1e-3"]
    assert runs["muon:0.01"]["learning_rate"] == 0.01
    assert results["reference"] == "adamw:1e-3"


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_every_optimizer_has_a_grid_of_three_spanning_ten(name):
    grid = tune.grid_for(name, OPTIMIZERS[name].learning_rate)
    assert len(grid) >= 3 and grid == sorted(grid)
    assert grid[-1] / grid[0] >= 10 * (1 - 1e-9)  # the rounding to 3 digits
    assert OPTIMIZERS[name].learning_rate in grid  # the default is tried too


def test_families_choose_their_grids():
    assert tune.family("adamw") == "adaptive"
    assert tune.family("muon") == tune.family("dion") == "orthogonal"
    assert tune.family("lion") == "sign" and tune.family("sgd") == "sgd"
    assert tune.grid_for("lion", 3e-3) == [3e-4, 9e-4, 3e-3]  # below AdamW's
    assert tune.grid_for("adamw", 3e-3) == [9e-4, 3e-3, 9e-3]
    assert tune.grid_for("adamw", 1e-3, (0.5, 2.0)) == [5e-4, 2e-3]


def test_parse_grid():
    assert tune.parse_grid(" 3, 1,0.3,1 ") == (0.3, 1.0, 3.0)
    for text, word in (("", "empty"), (" , ", "empty"), ("1,x", "number")):
        with pytest.raises(tune.GridError, match=word):
            tune.parse_grid(text)
    for text in ("0,1", "-1", "nan", "inf"):
        with pytest.raises(tune.GridError, match="positive"):
            tune.parse_grid(text)


def test_demo_tune(text_file, tmp_path, capsys):
    results = demo(
        tmp_path,
        "--data",
        str(text_file),
        "--steps",
        "6",
        "--tune",
        "--tune-steps",
        "3",
        "--optimizers",
        "adamw,sgd:0.1",
        "--grid",
        "0.3,1",
    )
    tuning = results["tuning"]
    assert list(tuning) == ["adamw", "sgd:0.1"]
    assert tuning["sgd:0.1"]["grid"] == [0.03, 0.1]  # around the rate given
    for label, t in tuning.items():
        assert t["steps"] == 3 and None not in t["val_loss"]
        finite = [
            (loss, lr)
            for loss, lr in zip(t["val_loss"], t["grid"], strict=True)
            if loss is not None
        ]
        assert t["best_learning_rate"] == min(finite)[1]
        # The final comparison trains with the kept rate.
        assert results["optimizers"][label]["learning_rate"] == t["best_learning_rate"]
        assert len(results["optimizers"][label]["train_loss"]) == 6
    out = capsys.readouterr().out
    assert "learning-rate sweep: 3 steps per run" in out
    assert "with each optimizer at its best rate of the sweep" in out
    assert (tmp_path / "tune.png").read_bytes().startswith(b"\x89PNG")


def test_sweep_records_divergence_and_keeps_the_best():
    class Diverged(Exception):
        pass

    losses = {0.9: 2.0, 3.0: 1.5, 9.0: None}  # a None loss: diverged

    def train(spec, progress):
        loss = losses[spec.learning_rate]
        if loss is None:
            raise Diverged
        return {"final_val_loss": loss}

    specs = [RunSpec("sgd", "sgd", 3.0)]
    no_bar = lambda labels: contextlib.nullcontext(lambda *a: None)  # noqa: E731
    tuning = tune.sweep(specs, 5, (0.3, 1, 3), train, no_bar, Diverged)
    assert tuning["sgd"] == {
        "optimizer": "sgd",
        "family": "sgd",
        "steps": 5,
        "grid": [0.9, 3.0, 9.0],
        "val_loss": [2.0, 1.5, None],
        "best_learning_rate": 3.0,
        "best_at_edge": False,
    }
    assert tune.tuned(specs, tuning)[0].learning_rate == 3.0
    losses[3.0] = losses[0.9] = None  # every rate diverges: one clear error
    tuning = tune.sweep(specs, 5, (0.3, 1, 3), train, no_bar, Diverged)
    with pytest.raises(ValueError, match="diverged at every rate"):
        tune.tuned(specs, tuning)


def test_demo_without_tune_has_no_sweep(file_run):
    out, results = file_run
    assert results["tuning"] is None and not (out / "tune.png").exists()


# ----------------------------------------------------------------------------
# Bad input: one line on stderr, exit status 2, no traceback.


def bad_cases(tmp: Path, text_file: Path) -> dict[str, tuple[list[str], str]]:
    """Arguments and a word the error line must contain, by case name."""
    empty, short, a_file = tmp / "empty.txt", tmp / "short.txt", tmp / "a_file"
    data = ["--data", str(text_file)]
    return {
        "missing data": (["--data", str(tmp / "nope.txt")], "not found"),
        "empty data": (["--data", str(empty)], "empty"),
        "directory as data": (["--data", str(tmp)], "directory"),
        "short data": (["--data", str(short)], "at least"),
        "unknown optimizer": ([*data, "--optimizers", "adamw,nosuch"], "nosuch"),
        "empty optimizer": ([*data, "--optimizers", "adamw,"], "empty name"),
        "bad learning rate": ([*data, "--optimizers", "muon:fast"], "learning rate"),
        "negative learning rate": ([*data, "--optimizers", "muon:-1"], "positive"),
        "repeated optimizer": ([*data, "--optimizers", "sgd,sgd"], "twice"),
        "zero steps": ([*data, "--steps", "0"], "positive"),
        "negative steps": ([*data, "--steps", "-3"], "positive"),
        "text steps": ([*data, "--steps", "many"], "integer"),
        "zero batch": ([*data, "--batch-size", "0"], "positive"),
        "heads": ([*data, "--d-model", "30", "--heads", "4"], "multiple"),
        "out is a file": ([*data, "--out", str(a_file)], "not a directory"),
        "out under a file": ([*data, "--out", str(a_file / "sub")], "cannot write"),
        "empty grid": ([*data, "--tune", "--grid", ""], "--grid '' is empty"),
        "grid of commas": ([*data, "--tune", "--grid", ",,"], "is empty"),
        "zero in grid": ([*data, "--tune", "--grid", "0,1"], "positive"),
        "grid without tune": ([*data, "--grid", "1,3"], "needs --tune"),
        "tune steps without tune": ([*data, "--tune-steps", "3"], "needs --tune"),
        "zero tune steps": ([*data, "--tune", "--tune-steps", "0"], "positive"),
    }


CASE_NAMES = list(bad_cases(Path("tmp"), Path("data")))


@pytest.mark.parametrize("case", CASE_NAMES)
def test_demo_bad_input(case, text_file, tmp_path, capsys):
    (tmp_path / "empty.txt").write_text("  \n")
    (tmp_path / "short.txt").write_text("x = 1\n")
    (tmp_path / "a_file").write_text("")
    args, expected = bad_cases(tmp_path, text_file)[case]
    if "--out" not in args:
        args = [*args, "--out", str(tmp_path / "out")]
    code = main(["demo", "--steps", "2", *TINY, *args])
    captured = capsys.readouterr()
    assert code == 2
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert expected in lines[0]
    assert "Traceback" not in captured.err + captured.out


def test_bad_input_in_a_real_process(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "gradax_cli", "demo", "--data", str(tmp_path / "no")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"gradax demo: data file not found: {tmp_path / 'no'}"
    ]


def test_console_script_is_declared():
    scripts = entry_points(group="console_scripts")
    assert any(ep.name == "gradax" and ep.value == "gradax_cli:main" for ep in scripts)


def test_no_command_is_one_line(capsys):
    assert main([]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


# ----------------------------------------------------------------------------
# Bench.


def write_bench(folder: Path, name: str, body: str) -> Path:
    path = folder / f"bench_{name}.py"
    path.write_text(textwrap.dedent(body))
    return path


def test_bench_runner_outcomes(tmp_path):
    ok = write_bench(
        tmp_path,
        "ok",
        """
        def run(quick):
            return {"benchmark": "b", "seconds": {"gradax": 0.002, "optax": 0.004}}
        """,
    )
    needs = write_bench(
        tmp_path,
        "optax",
        "raise ModuleNotFoundError(\"No module named 'optax'\", name='optax')\n",
    )
    broken = write_bench(tmp_path, "broken", "def run(quick):\n    1 / 0\n")
    outcome = run_one(ok, quick=True)
    assert outcome["status"] == "ok"
    # A result without "comparisons" gives a row per reference in "seconds".
    (row,) = bench_report.comparison_rows({"ok": outcome})
    assert (row["benchmark"], row["reference"], row["ratio"]) == ("ok", "optax", 0.5)
    assert run_one(needs, quick=True)["status"] == "skipped"
    failed = run_one(broken, quick=False)
    assert failed["status"] == "failed" and "ZeroDivisionError" in failed["note"]


def fake_outcomes() -> dict:
    """Two benchmarks' results as a benchmark module returns them."""
    muon = [
        comparison("muon x1", 0.05, "optax", 0.1, "matmul", 0.04),
        comparison("muon x1", 0.05, "torch", 2.5, "matmul", 0.04),
    ]
    lbfgs = [comparison("lbfgs", 0.2, "scipy", 1.0)]
    return {
        "muon": {
            "status": "ok",
            "result": {"comparisons": muon, "notes": ["a muon note"], "threads": 2},
        },
        "lbfgs": {"status": "ok", "result": {"comparisons": lbfgs, "notes": []}},
        "gone": {"status": "skipped", "note": "needs optax"},
    }


def test_bench_table_rows_and_notes():
    outcomes = fake_outcomes()
    rows = bench_report.comparison_rows(outcomes)
    assert [(r["benchmark"], r["reference"]) for r in rows] == [
        ("muon", "optax"),
        ("muon", "torch"),
        ("lbfgs", "scipy"),
    ]
    table = bench_report.cells(rows)
    assert table[0] == [
        "muon x1",
        "50.00 ms",
        "optax",
        "100.00 ms",
        "0.50",
        "matmul",
        "40.00 ms",
        "80%",
        "gradax 2.00x faster",
    ]
    assert table[1][0] == ""  # the label is shown once per benchmark
    # No floor for a whole solve.
    assert table[2][4:] == ["0.20", "-", "-", "-", "gradax 5.00x faster"]
    notes = bench_report.notes(outcomes, True, {"optax": True, "torch": False})
    assert notes[0].startswith("quick mode") and "noisy" in notes[0]
    assert any("torch is not installed" in line for line in notes)
    assert "a muon note" in notes and "gone: skipped: needs optax" in notes
    assert not any("optax is not installed" in line for line in notes)


def test_bench_rows_read_in_words_and_end_with_a_verdict(capsys):
    above = comparison("muon", 0.5, "optax", 0.4, "matmul", 0.6, "Gram needs less")
    assert bench_report.reading(above) == (
        "gradax 1.25x slower; of floor over 100%: Gram needs less"
    )
    unexplained = comparison("muon", 0.5, "optax", 1.0, "matmul", 0.6)
    assert (
        "of floor over 100%: faster than the floor's estimate"
        in bench_report.reading(unexplained)
    )
    outcomes = fake_outcomes()
    rows = bench_report.comparison_rows(outcomes)
    assert bench_report.verdict(rows, quick=False) == (
        "verdict: gradax faster in 3 of 3 comparisons (ratio below 1)"
    )
    slower = [*rows, {**above, "benchmark": "muon"}]
    line = bench_report.verdict(slower, quick=True)
    assert line.startswith("verdict: gradax faster in 3 of 4 comparisons")
    assert "slower: muon vs optax" in line and "--quick" in line
    # Threads are said to be matched with torch only where torch ran.
    without = bench_report.notes(outcomes, False, {"optax": True, "torch": False})
    assert "CPU threads: 2" in without
    with_torch = bench_report.notes(outcomes, False, {"optax": True, "torch": True})
    assert "CPU threads: 2 (torch set to the same)" in with_torch
    bench_report.print_table(rows, without, quick=False)
    out = capsys.readouterr().out
    assert "verdict: gradax faster in 3 of 3" in out and "reading" in out


def test_bench_plot(tmp_path):
    rows = bench_report.comparison_rows(fake_outcomes())
    path = tmp_path / "ratios.png"
    assert bench_report.plot(rows, path, quick=False)
    assert path.read_bytes().startswith(b"\x89PNG")


def test_bench_cli_on_a_folder(tmp_path, capsys, monkeypatch):
    write_bench(
        tmp_path,
        "ok",
        """
        def run(quick):
            rows = [{"label": "fake row", "gradax_seconds": 0.5,
                     "reference": "ref", "reference_seconds": 1.0, "ratio": 0.5,
                     "floor": None, "floor_seconds": None,
                     "fraction_of_floor": None}]
            return {"comparisons": rows, "notes": ["fake note"]}
        """,
    )
    out = tmp_path / "figures.json"
    monkeypatch.chdir(tmp_path.parent)  # a relative --dir
    assert main(["bench", "--dir", tmp_path.name, "--quick", "--json", str(out)]) == 0
    figures_json = json.loads(out.read_text())
    assert figures_json["comparisons"][0]["ratio"] == 0.5
    assert figures_json["benchmarks"]["ok"]["status"] == "ok"
    printed = capsys.readouterr().out
    assert "fake row" in printed and "- fake note" in printed
    assert printed.index("fake row") < printed.index("fake note")  # notes below


def bench_bad_cases(tmp: Path) -> dict[str, tuple[list[str], str]]:
    """Arguments to ``gradax bench`` and a word the error line must contain."""
    missing = tmp / "missing" / "x.png"
    return {
        "unknown name": (["--only", "nope"], "unknown benchmark nope"),
        "empty --only": (["--only", ","], "unknown benchmark"),
        "plot in a missing folder": (["--plot", str(missing)], "does not exist"),
        "plot is a folder": (["--plot", str(tmp / "a.png")], "is a directory"),
        "plot suffix": (["--plot", str(tmp / "x.txt")], ".png"),
        "json in a missing folder": (["--json", str(tmp / "no" / "x")], "does not"),
        "dir is missing": (["--dir", str(tmp / "nope")], "not a directory"),
    }


@pytest.mark.parametrize("case", list(bench_bad_cases(Path("tmp"))))
def test_bench_bad_input(case, tmp_path, capsys):
    (tmp_path / "a.png").mkdir()
    args, expected = bench_bad_cases(tmp_path)[case]
    assert main(["bench", "--quick", *args]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("gradax bench: ") and expected in lines[0]
    assert "running" not in captured.err  # nothing ran


@pytest.fixture
def no_optax(tmp_path, monkeypatch):
    """An environment in which ``import optax`` fails, for child processes."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "optax.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'optax'\", name='optax')\n"
    )
    path = os.pathsep.join(filter(None, [str(shim), os.environ.get("PYTHONPATH")]))
    monkeypatch.setenv("PYTHONPATH", path)
    return tmp_path


def test_bench_adamw_without_optax(no_optax):
    out = no_optax / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "gradax_cli", "bench", "--quick", "--only", "adamw"]
        + ["--json", str(out)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "optax is not installed" in done.stderr
    figures = json.loads(out.read_text())
    result = figures["benchmarks"]["adamw"]["result"]
    assert "optax" not in result["seconds"] and "gradax" in result["seconds"]
    assert result["ratio_gradax_over_optax"] is None
    assert result["bandwidth_floor_seconds"] > 0
    references = [row["reference"] for row in figures["comparisons"]]
    assert "optax" not in references and references  # gradax's row stays
    assert "optax is not installed" in done.stdout  # a note under the table
