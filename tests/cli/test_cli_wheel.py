"""``gradax bench --quick`` from a wheel installed in a fresh virtual environment.

The wheel is built from this checkout and installed, without dependencies,
into a new venv; the venv then sees this environment's packages (JAX, optax,
...) through a ``.pth`` file, after its own, so nothing is downloaded but
``gradax`` itself comes from the wheel. The command runs from an empty
folder, so no checkout is on its path. It costs about a minute of CPU time
(62 s measured on the 2-core development machine): a few seconds to build and
install, the rest is ``gradax bench --quick`` (each benchmark in a process of
its own).
"""

from __future__ import annotations

import importlib.util
import json
import os
import site
import subprocess
import sys
from pathlib import Path

from subprocess_env import without_device_count

ROOT = Path(__file__).resolve().parents[2]


def run(*args, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(args, capture_output=True, text=True, **kwargs)
    assert done.returncode == 0, f"{args}:\n{done.stdout}\n{done.stderr}"
    return done


def build_wheel(out: Path) -> Path:
    isolation = []
    if importlib.util.find_spec("hatchling") is not None:
        isolation = ["--no-build-isolation"]  # the backend is here already
    pip = [sys.executable, "-m", "pip"]
    run(*pip, "wheel", str(ROOT), "--no-deps", *isolation, "-w", str(out), "-q")
    (wheel,) = out.glob("gradax-*.whl")
    return wheel


def fresh_venv(folder: Path, wheel: Path) -> Path:
    """A venv with the wheel installed; this environment's packages behind it."""
    run(sys.executable, "-m", "venv", "--without-pip", str(folder))
    bin_dir = folder / ("Scripts" if os.name == "nt" else "bin")
    python = bin_dir / ("python.exe" if os.name == "nt" else "python")
    # Installed before the .pth exists, so pip sees an empty environment (and
    # not this checkout's editable gradax).
    run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        str(python),
        "install",
        "--no-deps",
        "--no-index",
        "-q",
        str(wheel),
    )
    purelib = run(
        str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    ).stdout.strip()
    # Plain paths, appended after the venv's own site-packages; .pth files in
    # them (an editable gradax) are not run.
    outer = [p for p in site.getsitepackages() if Path(p).is_dir()]
    (Path(purelib) / "_outer_environment.pth").write_text("\n".join(outer) + "\n")
    return bin_dir


def test_bench_quick_from_an_installed_wheel(tmp_path):
    bin_dir = fresh_venv(tmp_path / "venv", build_wheel(tmp_path / "dist"))
    work = tmp_path / "work"  # no checkout here or above
    work.mkdir()
    # One CPU device, as a user has; the suite's compile options, which
    # decide how long it compiles, not what runs.
    env = without_device_count(drop=("PYTHONPATH",))
    where = run(
        str(bin_dir / "python"),
        "-c",
        "import gradax, gradax_cli.benchmarks as b; print(gradax.__file__); "
        "print(b.__file__)",
        cwd=work,
        env=env,
    ).stdout.split()
    for path in where:
        assert Path(path).is_relative_to(tmp_path / "venv"), where
    done = run(
        str(bin_dir / "gradax"),
        "bench",
        "--quick",
        "--json",
        "bench.json",
        "--plot",
        "bench.png",
        cwd=work,
        env=env,
        timeout=600,
    )
    figures = json.loads((work / "bench.json").read_text())
    outcomes = figures["benchmarks"]
    assert list(outcomes) == ["adamw", "muon", "optimizers", "lbfgs", "distributed"]
    assert all(o["status"] == "ok" for o in outcomes.values()), outcomes
    rows = figures["comparisons"]
    assert {row["benchmark"] for row in rows} >= {"adamw", "muon", "lbfgs"}
    for row in rows:
        assert row["gradax_seconds"] > 0
        assert row["ratio"] is None or row["ratio"] > 0
    assert "quick mode" in done.stdout and "ratio" in done.stdout
    assert (work / "bench.png").read_bytes().startswith(b"\x89PNG")
