"""``gradax bench``: run the ``benchmarks/bench_*.py`` comparisons and tabulate them.

Each benchmark module exposes ``run(quick: bool) -> dict``. It runs in its
own Python process, because benchmark modules set process-wide JAX options at
import (float64, simulated devices) that must not leak into the next one. A
benchmark that needs optax when optax is not installed is reported as
skipped; benchmarks that treat optax as optional leave its columns out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

_MARKER = "@@gradax-bench-result@@"
_NEEDS_OPTAX = "@@gradax-bench-needs-optax@@"

# Runs in the child process: load the file as a module, call run(quick), print
# the result as one JSON line after a marker.
_RUNNER = f"""
import importlib.util, json, sys
path, quick = sys.argv[1], sys.argv[2] == "1"
spec = importlib.util.spec_from_file_location("gradax_bench_module", path)
module = importlib.util.module_from_spec(spec)
try:
    spec.loader.exec_module(module)
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


def find_benchmarks(explicit: Path | None = None) -> Path:
    """The benchmarks folder: ``explicit``, ./benchmarks, or the checkout's."""
    if explicit is not None:
        if not explicit.is_dir():
            raise BenchError(f"not a directory: {explicit}")
        return explicit
    checkout = Path(__file__).resolve().parents[2] / "benchmarks"
    for candidate in (Path.cwd() / "benchmarks", checkout):
        if candidate.is_dir() and any(candidate.glob("bench_*.py")):
            return candidate
    raise BenchError(
        "no benchmarks/ folder found; run from a gradax checkout or pass --dir"
    )


def discover(folder: Path) -> dict[str, Path]:
    """``{"adamw": .../bench_adamw.py, ...}`` in name order."""
    files = sorted(folder.glob("bench_*.py"))
    if not files:
        raise BenchError(f"no bench_*.py files in {folder}")
    return {path.stem.removeprefix("bench_"): path for path in files}


def optax_available() -> bool:
    try:
        import optax  # noqa: F401
    except ModuleNotFoundError as error:
        if error.name != "optax":
            raise
        return False
    return True


def run_one(path: Path, quick: bool, timeout: float | None = None) -> dict[str, Any]:
    """Run one benchmark file in a fresh process.

    Returns ``{"status": "ok", "result": ...}``, ``{"status": "skipped",
    "note": ...}`` or ``{"status": "failed", "note": <last error line>}``,
    with ``"wall_seconds"``.
    """
    start = time.perf_counter()
    env = dict(os.environ)
    try:
        done = subprocess.run(
            [sys.executable, "-c", _RUNNER, str(path), "1" if quick else "0"],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            cwd=path.parent,
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


def _format_value(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if "seconds" in key:
        if abs(value) >= 1:
            return f"{value:.3f} s"
        if abs(value) >= 1e-3:
            return f"{value * 1e3:.2f} ms"
        return f"{value * 1e6:.1f} us"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:.4g}"


def figures(result: dict[str, Any]) -> list[tuple[str, str]]:
    """Flatten a benchmark's result into (measure, formatted value) rows.

    Times under ``"seconds"`` come first, as "<candidate> time"; other numbers
    follow, with nested dictionaries joined by "/". Text fields other than
    "benchmark" and "device" (shown in the heading) are kept as notes.
    """
    rows = [
        (f"{name} time", _format_value("seconds", value))
        for name, value in result.get("seconds", {}).items()
    ]

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, sub in value.items():
                walk(f"{prefix}/{key}" if prefix else key, sub)
        else:
            rows.append((prefix, _format_value(prefix, value)))

    for key, value in result.items():
        if key in ("seconds", "benchmark", "device"):
            continue
        walk(key, value)
    return rows


def print_table(outcomes: dict[str, dict[str, Any]], quick: bool) -> None:
    rows: list[tuple[str, str, str]] = []
    for name, outcome in outcomes.items():
        if outcome["status"] != "ok":
            rows.append((name, outcome["status"], outcome["note"]))
            continue
        result = outcome["result"]
        rows.append((name, str(result.get("benchmark", "")), ""))
        rows += [("", measure, value) for measure, value in figures(result)]
    title = "gradax bench" + (" --quick" if quick else "")
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(title)
        width = max((len(r[1]) for r in rows), default=0)
        for name, measure, value in rows:
            print(f"{name:10s} {measure:{width}s}  {value}")
        return
    table = Table(title=title)
    table.add_column("benchmark")
    table.add_column("measure", overflow="fold")
    table.add_column("value", justify="right")
    for row in rows:
        table.add_row(*row)
    Console().print(table)


def main(args) -> int:
    folder = find_benchmarks(args.dir)
    available = discover(folder)
    names = list(available)
    if args.only:
        names = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in names if n not in available]
        if unknown or not names:
            raise BenchError(
                f"unknown benchmark {', '.join(unknown) or repr(args.only)}; "
                f"choose from: {', '.join(available)}"
            )
    if args.json is not None:
        _check_writable(args.json)
    have_optax = optax_available()
    if not have_optax:
        print(
            "optax is not installed: comparisons with optax are left out",
            file=sys.stderr,
        )
    outcomes = {}
    for name in names:
        print(f"running {name} ...", file=sys.stderr, flush=True)
        outcomes[name] = run_one(available[name], args.quick)
    print_table(outcomes, args.quick)
    if args.json is not None:
        payload = {
            "quick": args.quick,
            "optax_installed": have_optax,
            "benchmarks": outcomes,
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
        print(f"wrote {args.json}")
    failed = [name for name, o in outcomes.items() if o["status"] == "failed"]
    return 1 if failed else 0


def _check_writable(path: Path) -> None:
    if path.is_dir():
        raise BenchError(f"--json {path} is a directory")
    if not path.parent.is_dir():
        raise BenchError(f"--json {path}: folder {path.parent} does not exist")
    existed = path.exists()
    try:
        with path.open("a"):
            pass
    except OSError as error:
        raise BenchError(f"cannot write {path}: {error.strerror}") from None
    if not existed:
        path.unlink()
