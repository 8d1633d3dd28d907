"""``gradax bench``: run the comparisons of ``gradax_cli.benchmarks``, tabulate them.

Each benchmark module exposes ``run(quick: bool) -> dict``. It runs in its
own Python process, because benchmark modules set process-wide JAX options
(float64, simulated devices) that must not leak into the next one. A
benchmark that needs optax when optax is not installed is reported as
skipped; benchmarks that treat optax (torch, scipy) as optional leave its
rows out. ``--dir`` runs the ``bench_*.py`` files of a folder instead.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from . import _bench_report as bench_report
from .benchmarks import BENCHMARKS

PLOT_SUFFIXES = (".png", ".svg", ".pdf")
_MARKER = "@@gradax-bench-result@@"
_NEEDS_OPTAX = "@@gradax-bench-needs-optax@@"

# Runs in the child process: load the module (a name under
# gradax_cli.benchmarks, or a file), call run(quick), print the result as one
# JSON line after a marker.
_RUNNER = f"""
import importlib, importlib.util, json, sys
target, quick = sys.argv[1], sys.argv[2] == "1"
try:
    if target.endswith(".py"):
        spec = importlib.util.spec_from_file_location("gradax_bench_module", target)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module("gradax_cli.benchmarks." + target)
    result = module.run(quick)
except ModuleNotFoundError as error:
    if error.name != "optax":
        raise
    print({_NEEDS_OPTAX!r}, flush=True)
    sys.exit(0)
print({_MARKER!r} + json.dumps(result, default=str), flush=True)
"""


class BenchError(Exception):
    """Bad input, explained in one line."""


def discover(folder: Path) -> dict[str, Path]:
    """``{"adamw": .../bench_adamw.py, ...}`` of a folder, in name order."""
    if not folder.is_dir():
        raise BenchError(f"--dir {folder} is not a directory")
    files = sorted(folder.resolve().glob("bench_*.py"))
    if not files:
        raise BenchError(f"no bench_*.py files in {folder}")
    return {path.stem.removeprefix("bench_"): path for path in files}


def installed(name: str) -> bool:
    """Whether ``import name`` works.

    optax is imported (cheap beside JAX, which is loaded already); torch and
    scipy are only looked up, to keep their import time and memory out of
    this process.
    """
    if name != "optax":
        import importlib.util

        return importlib.util.find_spec(name) is not None
    try:
        import optax  # noqa: F401
    except ModuleNotFoundError as error:
        if error.name != "optax":
            raise
        return False
    return True


def _package_root() -> Path:
    """The folder holding the gradax_cli package this process imported."""
    return Path(__file__).resolve().parents[1]


def run_one(
    target: Path | str,
    quick: bool,
    timeout: float | None = None,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run one benchmark (a file, or a module name) in a fresh process.

    Returns ``{"status": "ok", "result": ...}``, ``{"status": "skipped",
    "note": ...}`` or ``{"status": "failed", "note": <last error line>}``,
    with ``"wall_seconds"``. A module runs from the folder that holds this
    gradax_cli, so the child imports the same gradax_cli as this process.
    """
    start = time.perf_counter()
    child_env = dict(os.environ)
    for key, value in (env or {}).items():
        if value not in child_env.get(key, ""):
            child_env[key] = f"{child_env.get(key, '')} {value}".strip()
    is_file = isinstance(target, Path)
    try:
        done = subprocess.run(
            [sys.executable, "-c", _RUNNER, str(target), "1" if quick else "0"],
            capture_output=True,
            text=True,
            env=child_env,
            timeout=timeout,
            cwd=target.parent if is_file else _package_root(),
        )
    except subprocess.TimeoutExpired:
        return {
            "status": "failed",
            "note": f"timed out after {timeout:.0f} s",
            "wall_seconds": time.perf_counter() - start,
        }
    wall = time.perf_counter() - start
    for line in done.stdout.splitlines():
        if line.startswith(_MARKER):
            result = json.loads(line[len(_MARKER) :])
            return {"status": "ok", "result": result, "wall_seconds": wall}
        if line.strip() == _NEEDS_OPTAX:
            return {
                "status": "skipped",
                "note": "needs optax, which is not installed",
                "wall_seconds": wall,
            }
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    note = errors[-1] if errors else f"exit status {done.returncode}, no result"
    return {"status": "failed", "note": note, "wall_seconds": wall}


def _choose(available: list[str], only: str | None) -> list[str]:
    if only is None:
        return available
    names = [n.strip() for n in only.split(",") if n.strip()]
    unknown = [n for n in names if n not in available]
    if unknown or not names:
        raise BenchError(
            f"unknown benchmark {', '.join(unknown) or repr(only)}; "
            f"choose from: {', '.join(available)}"
        )
    return names


def main(args) -> int:
    if args.dir is not None:
        files = discover(args.dir)
        targets = {name: (path, {}) for name, path in files.items()}
    else:
        targets = dict(BENCHMARKS.items())
    names = _choose(list(targets), args.only)
    if args.plot is not None and args.plot.suffix.lower() not in PLOT_SUFFIXES:
        raise BenchError(
            f"--plot {args.plot}: the name must end in {', '.join(PLOT_SUFFIXES)}"
        )
    for flag, path in (("--json", args.json), ("--plot", args.plot)):
        if path is not None:
            check_writable(flag, path)
    libraries = {name: installed(name) for name in ("optax", "torch", "scipy")}
    if not libraries["optax"]:
        print(
            "optax is not installed: comparisons with optax are left out",
            file=sys.stderr,
        )
    outcomes = {}
    for name in names:
        print(f"running {name} ...", file=sys.stderr, flush=True)
        target, env = targets[name]
        outcomes[name] = run_one(target, args.quick, env=env)
    rows = bench_report.comparison_rows(outcomes)
    notes = bench_report.notes(outcomes, args.quick, libraries)
    bench_report.print_table(rows, notes, args.quick)
    written = []
    if args.json is not None:
        payload = {
            "quick": args.quick,
            "installed": libraries,
            "optax_installed": libraries["optax"],
            "comparisons": rows,
            "verdict": bench_report.verdict(rows, args.quick),
            "notes": notes,
            "benchmarks": outcomes,
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
        written.append(str(args.json))
    if args.plot is not None:
        if bench_report.plot(rows, args.plot, args.quick):
            written.append(str(args.plot))
        else:
            print(
                "matplotlib is not installed, so no plot (pip install 'gradax[demo]')",
                file=sys.stderr,
            )
    if written:
        print("wrote " + ", ".join(written))
    failed = [name for name, o in outcomes.items() if o["status"] == "failed"]
    return 1 if failed else 0


def check_writable(flag: str, path: Path) -> None:
    """Fail now, in one line, if ``path`` cannot be written at the end."""
    if path.is_dir():
        raise BenchError(f"{flag} {path} is a directory")
    if not path.parent.is_dir():
        raise BenchError(f"{flag} {path}: folder {path.parent} does not exist")
    existed = path.exists()
    try:
        with path.open("a"):
            pass
    except OSError as error:
        raise BenchError(f"{flag} {path}: cannot write: {error.strerror}") from None
    if not existed:
        path.unlink()
