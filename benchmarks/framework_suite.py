"""JAX training frameworks' optimizer code, run with optax and with gradax.

Where ``client_suite.py`` runs programs and tests that import optax, this
script runs the optimizer-building code of JAX training frameworks (MaxText,
levanter, kauldron, big_vision, t5x, EasyDeL's eformer, scenic, maxdiffusion,
EasyLM, nanodo, AlgoPerf, init2winit, AXLearn, Tunix): the framework's own module,
loaded from a checkout at run time and not edited, builds its optimizer from
its own config for a few representative configurations (default AdamW, Muon
where it has one, spike/NaN skipping, gradient accumulation, frozen
parameters, multi-optimizer setups, sharpness-aware minimization), and where
practical its own trainer or step code drives it.

Each configuration runs twice, each time in a fresh Python process: once with
optax, and once with ``optax`` resolving to gradax the way a user's
``import gradax as optax`` does for code the user cannot edit: a finder on
``sys.meta_path`` serves ``gradax`` for ``optax`` and ``gradax.X.Y`` for every
``optax.X.Y`` (``optax.contrib``, ``optax._src.base``, ``optax.tree_utils``,
...), so a path gradax lacks fails with gradax's own import error. Only the
framework's heavy imports that have nothing to do with optimizers (logging
and metrics, config systems, checkpointing, TPU kernels, tensorflow) are
replaced, by do-nothing modules injected into the import system
(``frameworks/_harness.py``); what each framework needs is in its module under
``benchmarks/frameworks/``, with the configurations.

A run builds the optimizer for a small fixed parameter tree (an embedding-like
32x8 matrix, two dense kernels, a bias, a norm scale; float32), calls ``init``
and then five steps of ``update`` and ``apply_updates`` (or the framework's own
step: a flax ``TrainState``, t5x's ``Optimizer``) on fixed seeded gradients,
under ``jax.jit``. The two runs are compared on: the state tree after ``init``
and after every step, node by node, including node types (``dict`` against
``OrderedDict``, NamedTuple class names, registered classes) and keys; every
leaf's kind (jax array, numpy array, Python number), dtype, shape and value;
and the parameters after every step. Values agree within rtol 1e-5 and atol
1e-6 (the float32 rounding of a five-step trajectory: the two libraries may
order a sum or fuse a multiply differently); integer and boolean leaves agree
exactly.

What it reports
  One row per framework and configuration: "same"; "different (what)" with the
  first differences and their paths; "fails with gradax (first error line)";
  or "fails with optax (not counted)" where the baseline itself does not run.
  A markdown table on stdout, and with ``--json FILE`` every result with the
  full tracebacks and the commit of each checkout.

Checkouts
  ``--fetch-dir`` takes the git snapshots the ``fetch`` tool makes
  (``<dir>/<owner>+<name>/repo``). Fetch ``github:<owner>/<name>`` for::

    google/maxtext  stanford-crfm/levanter  stanford-crfm/haliax
    google-research/kauldron  google-research/big_vision  google-research/t5x
    erfanzar/eformer  google-research/scenic  AI-Hypercomputer/maxdiffusion
    young-geng/EasyLM  google-deepmind/nanodo
    mlcommons/algorithmic-efficiency  google/init2winit  apple/axlearn
    google/tunix

  (EasyDeL's optimizers are eformer's; haliax is levanter's named-tensor
  library, at the version levanter's snapshot expects.) The suite archives
  each framework's optimizer modules, and the trainer or step modules that
  drive them where the suite calls those (nothing else), from the snapshot's
  HEAD into a scratch folder with ``git archive`` and imports them from there;
  no framework code is kept in this repository. ``--ref NAME=REF`` archives
  REF instead, for every repository framework NAME uses. The table ends with
  the commit of each checkout.

Environment
  A virtual environment of its own beside the project's (jax, numpy, optax
  and flax at the project's versions), e.g.::

    python -m venv /work/fwenv
    /work/fwenv/bin/pip install -e . optax==0.2.8 flax chex ml_collections \\
        absl-py equinox draccus jaxtyping attrs

  (attrs for AXLearn.)

Run
  /work/fwenv/bin/python benchmarks/framework_suite.py --fetch-dir /work/.mirror
      [--only maxtext,t5x] [--json FILE] [--scratch DIR] [--jobs 2]
      [--timeout 300] [--ref NAME=REF] [--gradax DIR] [--no-jit]

  ``--gradax DIR`` runs the gradax package found in DIR (e.g. one commit's
  ``git archive HEAD gradax``) instead of the installed one; the report names
  the two ``__init__`` files the runs loaded. ``--no-jit`` runs the steps
  eagerly (a Python number where optax keeps an array then shows too); the
  steps that compile themselves (AlgoPerf's ``update_params``, init2winit's,
  Tunix's ``nnx.jit``) stay compiled. The full run (71 configurations,
  ``--jobs 2``) took 22 minutes on two CPU cores shared with other work (load
  average 6 to 15), 8.3 minutes of CPU time; the first nine frameworks' 46
  took about 2 minutes jitted, 5 eagerly, on two idle cores.
  Not part of CI.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import importlib
import io
import json
import os
import pickle
import re
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
FRAMEWORKS = (
    "maxtext",
    "levanter",
    "kauldron",
    "big_vision",
    "t5x",
    "easydel",
    "scenic",
    "maxdiffusion",
    "easylm",
    "nanodo",
    "algoperf",
    "init2winit",
    "axlearn",
    "tunix",
)
RTOL, ATOL = 1e-5, 1e-6
LIBRARIES = ("optax", "gradax")
LOADED_FROM: set[str] = set()  # the two libraries' __init__ files, as the runs saw


def framework(name: str):
    """The suite's module for one framework (its repository, stand-ins, configs)."""
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    return importlib.import_module(f"frameworks.{name}")


# ------------------------------------------------------------ checkouts


def archive(git_dir: Path, ref: str, paths, into: Path) -> str:
    """Extracts ``paths`` of ``ref`` into ``into``; returns the commit."""
    commit = subprocess.run(
        ["git", "--git-dir", str(git_dir), "rev-parse", ref + "^{commit}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    tar = subprocess.run(
        ["git", "--git-dir", str(git_dir), "archive", commit, *paths],
        check=True,
        capture_output=True,
    ).stdout
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(tar)) as tf:
        tf.extractall(into, filter="data")
    return commit


def checkout(name: str, fetch_dir: Path, scratch: Path, refs: dict) -> dict:
    """Archives every repository one framework needs; returns where and what."""
    module = framework(name)
    record = {"repos": {}, "root": str(scratch / name)}
    for repo, paths in module.SOURCES.items():
        git_dir = fetch_dir / repo.replace("/", "+") / "repo"
        if not git_dir.exists():
            raise FileNotFoundError(f"no snapshot of {repo} at {git_dir} (fetch it)")
        commit = archive(git_dir, refs.get(name, "HEAD"), paths, scratch / name)
        date = subprocess.run(
            ["git", "--git-dir", str(git_dir), "log", "-1", "--format=%cs", commit],
            capture_output=True,
            text=True,
        ).stdout.strip()
        record["repos"][repo] = {"commit": commit, "date": date}
    return record


# ------------------------------------------------------------ one child run


def child(args) -> None:
    """Runs one configuration with one library and pickles what it saw."""
    sys.path.insert(0, str(HERE))
    from frameworks import _harness

    if args.library == "gradax":
        if args.gradax:
            sys.path.insert(0, str(args.gradax))
        _harness.use_gradax_for_optax()
    module = framework(args.framework)
    module.prepare(Path(args.root))
    result = {}
    try:
        case = module.CONFIGS[args.config]()
        case.jit = case.jit and not args.no_jit
        result["record"] = _harness.run(case)
    except BaseException as error:  # noqa: B036 (report whatever stopped it)
        # The exception's own first line (JAX appends notes after it).
        message = str(error).strip().splitlines()
        result["error"] = type(error).__name__ + (f": {message[0]}" if message else "")
        result["traceback"] = traceback.format_exc()
    with open(args.out, "wb") as f:
        pickle.dump(result, f)


def run_child(name, config, library, root, scratch, args) -> dict:
    out = scratch / (re.sub(r"\W+", "_", f"{name} {config} {library}") + ".pkl")
    out.unlink(missing_ok=True)
    command = [sys.executable, __file__, "--child", name, config, library, root]
    command += ["--out", str(out)]
    if args.gradax:
        command += ["--gradax", str(args.gradax)]
    if args.no_jit:
        command += ["--no-jit"]
    timeout = args.timeout
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONHASHSEED="0")
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, env=env
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    if not out.exists():
        tail = (done.stderr or done.stdout).strip().splitlines()
        return {
            "error": f"process exited {done.returncode}: {tail[-1] if tail else ''}"
        }
    with open(out, "rb") as f:
        return pickle.load(f)


# ------------------------------------------------------------ comparing


def differences(a, b, where: str, out: list[str]) -> None:
    """Appends to ``out`` every way tree description ``b`` differs from ``a``."""
    if a[0] != b[0]:
        out.append(f"{where}: {_what(a)} with optax, {_what(b)} with gradax")
        return
    if a[0] == "node":
        if a[1] != b[1]:
            out.append(f"{where}: node {a[1]} with optax, {b[1]} with gradax")
        keys_a, keys_b = [k for k, _ in a[2]], [k for k, _ in b[2]]
        if keys_a != keys_b:
            out.append(
                f"{where or 'root'}: keys {keys_a} with optax, {keys_b} with gradax"
            )
            return
        for (key, child_a), (_, child_b) in zip(a[2], b[2], strict=True):
            differences(child_a, child_b, where + key, out)
    elif a[0] == "leaf":
        if a[1:4] != b[1:4]:
            out.append(f"{where}: {_what(a)} with optax, {_what(b)} with gradax")
            return
        x, y = a[4], b[4]
        if np.issubdtype(x.dtype, np.inexact):
            x64, y64 = x.astype(np.float64), y.astype(np.float64)
            if not np.allclose(y64, x64, rtol=RTOL, atol=ATOL, equal_nan=True):
                gap = np.nanmax(np.abs(x64 - y64)) if x.size else 0.0
                out.append(f"{where}: values differ (max abs difference {gap:.3g})")
        elif not np.array_equal(x, y):
            out.append(
                f"{where}: values {x.tolist()} with optax, {y.tolist()} with gradax"
            )
    elif a[1] != b[1]:
        out.append(f"{where}: {a[1]} with optax, {b[1]} with gradax")


def _what(d) -> str:
    if d[0] == "node":
        return f"node {d[1]}"
    if d[0] == "leaf":
        return f"{d[1]} {d[2]}{list(d[3])}"
    return f"object {d[1]}"


def compare(optax_record: dict, gradax_record: dict) -> list[str]:
    out: list[str] = []
    differences(
        optax_record["state 0"], gradax_record["state 0"], "state after init ", out
    )
    steps = zip(optax_record["steps"], gradax_record["steps"], strict=True)
    for i, (a, b) in enumerate(steps, 1):
        for part in ("params", "state", "probe"):
            if part in a or part in b:
                if part not in a or part not in b:
                    out.append(f"{part} after step {i}: recorded by one run only")
                    continue
                differences(a[part], b[part], f"{part} after step {i} ", out)
    return out


@dataclasses.dataclass
class Result:
    framework: str
    config: str
    # same, different, fails with gradax, fails with optax (not counted), not
    # run (no checkout), suite error (the switch to gradax did not happen)
    verdict: str
    detail: str = ""
    tracebacks: dict = dataclasses.field(default_factory=dict)
    differences: list = dataclasses.field(default_factory=list)  # all, for --json

    def cell(self) -> str:
        return f"{self.verdict} ({self.detail})" if self.detail else self.verdict


def judge(name, config, runs: dict) -> Result:
    base, new = runs["optax"], runs["gradax"]
    tracebacks = {lib: r["traceback"] for lib, r in runs.items() if "traceback" in r}
    if "error" in base:
        return Result(
            name, config, "fails with optax (not counted)", base["error"], tracebacks
        )
    if "error" in new:
        return Result(name, config, "fails with gradax", new["error"], tracebacks)
    names = (base["record"]["optax is"], new["record"]["optax is"])
    if names != LIBRARIES:  # the switch did not happen: nothing was compared
        return Result(name, config, "suite error", f"optax named {names}")
    found = compare(base["record"], new["record"])
    LOADED_FROM.update(r["record"]["optax file"] for r in runs.values())
    if not found:
        return Result(name, config, "same")
    more = f"; {len(found) - 3} more" if len(found) > 3 else ""
    detail = "; ".join(found[:3]) + more
    return Result(name, config, "different", detail, tracebacks, found)


# ------------------------------------------------------------ the report


def table(results: list[Result]) -> str:
    rows = ["| framework | configuration | result |", "|---|---|---|"]
    for r in results:
        cell = r.cell().replace("|", "\\|")
        rows.append(f"| {r.framework} | {r.config} | {cell} |")
    counted = [
        r for r in results if r.verdict in ("same", "different", "fails with gradax")
    ]
    same = sum(r.verdict == "same" for r in counted)
    rows.append("")
    rows.append(
        f"{same} of {len(counted)} configurations that run with optax are the same"
    )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--fetch-dir", type=Path, help="where fetch put the snapshots")
    parser.add_argument("--only", help="comma-separated frameworks (default: all)")
    parser.add_argument("--json", type=Path, help="write the full results here")
    parser.add_argument(
        "--scratch", type=Path, help="scratch folder (default: a temp dir)"
    )
    parser.add_argument("--jobs", type=int, default=2, help="child processes at once")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per child")
    parser.add_argument("--ref", action="append", default=[], help="NAME=REF")
    parser.add_argument(
        "--gradax",
        type=Path,
        help="a folder holding the gradax package to use (default: the installed)",
    )
    parser.add_argument(
        "--no-jit", action="store_true", help="run the steps eagerly, not under jit"
    )
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.framework, args.config, args.library, args.root = args.child
        child(args)
        return
    if args.fetch_dir is None:
        parser.error("give --fetch-dir (see the module docstring)")
    names = args.only.split(",") if args.only else list(FRAMEWORKS)
    refs = dict(item.split("=", 1) for item in args.ref)
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="framework_suite_"))
    scratch.mkdir(parents=True, exist_ok=True)
    started = time.time()

    checkouts, jobs, results = {}, [], []
    for name in names:
        try:
            checkouts[name] = checkout(name, args.fetch_dir, scratch / "src", refs)
        except (OSError, subprocess.CalledProcessError) as error:
            checkouts[name] = {"error": str(error)}
            results.append(Result(name, "(checkout)", "not run", str(error)))
            continue
        for config in framework(name).CONFIGS:
            for library in LIBRARIES:
                jobs.append((name, config, library))

    runs: dict = {}
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = {
            pool.submit(run_child, n, c, lib, checkouts[n]["root"], scratch, args): (
                n,
                c,
                lib,
            )
            for n, c, lib in jobs
        }
        for future in concurrent.futures.as_completed(futures):
            n, c, lib = futures[future]
            runs.setdefault((n, c), {})[lib] = future.result()
    for name in names:
        if "error" in checkouts[name]:
            continue
        for config in framework(name).CONFIGS:
            results.append(judge(name, config, runs[(name, config)]))

    print(table(results))
    print()
    for name in names:
        for repo, info in checkouts[name].get("repos", {}).items():
            print(f"{name}: {repo} {info['commit'][:12]} ({info['date']})")
    for path in sorted(LOADED_FROM):
        print(f"loaded {path}")
    print(f"({time.time() - started:.0f} s)")
    if args.json:
        payload = {
            "checkouts": checkouts,
            "results": [dataclasses.asdict(r) for r in results],
            "tolerance": {"rtol": RTOL, "atol": ATOL},
        }
        args.json.write_text(json.dumps(payload, indent=1, default=str))


if __name__ == "__main__":
    main()
