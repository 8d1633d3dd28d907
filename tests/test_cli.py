"""The ``gradax`` command: ``demo`` on tiny settings, bad input, ``bench``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from gradax.cli import data as data_lib
from gradax.cli import main
from gradax.cli.bench import figures, run_one

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


def test_demo_prints_table(text_file, tmp_path, capsys):
    demo(tmp_path, "--data", str(text_file), "--steps", "2", "--optimizers", "sgd")
    out = capsys.readouterr().out
    for word in ("optimizer", "train loss", "val loss", "ms/step", "state", "sgd"):
        assert word in out
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
    assert data_lib.decode(ids[:2], alphabet) == "ab"


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
        [sys.executable, "-m", "gradax.cli", "demo", "--data", str(tmp_path / "no")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"gradax demo: data file not found: {tmp_path / 'no'}"
    ]


def test_console_script_is_declared():
    scripts = entry_points(group="console_scripts")
    assert any(ep.name == "gradax" and ep.value == "gradax.cli:main" for ep in scripts)


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
            return {"benchmark": "b", "seconds": {"a": 0.002 if quick else 1.5},
                    "ratio": 0.5, "nested": {"x": 3}}
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
    assert figures(outcome["result"]) == [
        ("a time", "2.00 ms"),
        ("ratio", "0.5"),
        ("nested/x", "3"),
    ]
    assert run_one(needs, quick=True)["status"] == "skipped"
    failed = run_one(broken, quick=False)
    assert failed["status"] == "failed" and "ZeroDivisionError" in failed["note"]


def test_bench_cli_on_a_folder(tmp_path, capsys):
    write_bench(
        tmp_path,
        "ok",
        'def run(quick):\n    return {"benchmark": "fake", "seconds": {"g": 0.5}}\n',
    )
    out = tmp_path / "figures.json"
    assert main(["bench", "--dir", str(tmp_path), "--quick", "--json", str(out)]) == 0
    figures_json = json.loads(out.read_text())
    assert figures_json["benchmarks"]["ok"]["result"]["seconds"] == {"g": 0.5}
    assert "fake" in capsys.readouterr().out
    assert main(["bench", "--dir", str(tmp_path), "--only", "nope"]) == 2
    assert "unknown benchmark nope" in capsys.readouterr().err


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
        [sys.executable, "-m", "gradax.cli", "bench", "--quick", "--only", "adamw"]
        + ["--json", str(out)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "optax is not installed" in done.stderr
    result = json.loads(out.read_text())["benchmarks"]["adamw"]["result"]
    assert set(result["seconds"]) == {"gradax"}
    assert result["ratio_gradax_over_optax"] is None
    assert result["bandwidth_floor_seconds"] > 0


@pytest.mark.slow
def test_bench_quick_all(tmp_path):
    out = tmp_path / "bench.json"
    assert main(["bench", "--quick", "--json", str(out)]) == 0
    outcomes = json.loads(out.read_text())["benchmarks"]
    assert {"adamw", "muon"} <= set(outcomes)
    assert all(o["status"] == "ok" for o in outcomes.values())
