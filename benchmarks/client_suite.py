"""Programs that use optax, run with optax and with gradax: a client suite.

Where ``optax_suite.py`` runs optax's own tests, this script runs what optax's
*users* wrote: optax's example notebooks, equinox's and diffrax's example
notebooks (which train with optax), and the tests of flax, optimistix, jaxopt,
equinox, diffrax and numpyro that import optax. Each program runs twice from a scratch
folder: once as written (the baseline, with optax) and once with only its
import lines pointed at gradax, the way a user switches::

    import optax                      ->  import gradax as optax
    import optax as ox                ->  import gradax as ox
    import optax.contrib              ->  import gradax as optax; import gradax.contrib
    from optax import X               ->  from gradax import X
    from optax.contrib import X       ->  from gradax.contrib import X
    from optax._src.base import X     ->  from gradax._src.base import X

No other line changes (a rewritten line stays one line, so line numbers in
errors are the notebook's and the test file's). The libraries themselves stay
as installed: flax's ``nnx.Optimizer`` or jaxopt's ``OptaxSolver`` import
optax and are handed gradax transformations, which is the point.

Suites (``--only``): ``notebooks`` (optax's), ``flax``, ``optimistix``,
``jaxopt``, ``equinox`` and ``diffrax`` (each: its ``docs/examples``
notebooks, then its test files that import optax), and ``numpyro`` (its
``test_optimizers.py``: optax transformations through ``optax_to_numpyro``).

What it reports
  Tests (flax, optimistix, jaxopt, equinox, diffrax, numpyro): the test files
  of the checkout that import optax (found by grep) run from a copy of the
  whole tests folder (diffrax's and numpyro's is ``test``) with the project's
  pytest configuration (flax, optimistix and numpyro turn warnings into
  errors; optimistix, equinox and diffrax keep their jaxtyping/beartype
  checks). Per suite: how many
  tests pass with optax, how many of those pass with gradax, and each test that
  fails only with gradax, with its first error line. A file that does not
  import with optax, or a test that fails with optax, is not counted.
  optimistix puts its optax solvers in ``tests/helpers.py``, which its test
  files share, and parametrizes each test over ~23 solvers; for it only the
  cases whose parameters hold an optax (or gradax) object run, in every file
  that imports the helpers, plus the plain tests of the files that import optax
  (``--all-params`` runs every case of those files).

  Notebooks (optax's ``examples/**/*.ipynb`` and ``docs/getting_started.ipynb``;
  equinox's and diffrax's ``docs/examples/*.ipynb``; only those that import
  optax): the code cells become one script (shell and magic lines ``!...``/``%...``
  commented out; a cell's last expression printed, as Jupyter shows it; plots
  go to matplotlib's Agg backend; Python's and NumPy's global random generators
  seeded, as getting_started draws its data unseeded) run with ``python``. A
  notebook that downloads its data (tensorflow_datasets, HF datasets,
  torchvision ``download=True``) is reported "needs network", not run and not
  counted (``--network`` runs it; a baseline that then fails on a missing data
  module or a connection error still reads "needs network"). Notebooks that
  train for tens of minutes on two cores (optax's microbatching one, written
  for a GPU; diffrax's SDE GAN and flow; equinox's diffusion model) are left
  out unless ``--heavy`` (each source's ``heavy``). For
  notebooks that run both ways the two stdouts are compared: "same" (identical
  text), "close" (same lines once numbers are taken out, every number within
  rtol 1e-5), or "different". Lines are aligned on their text without numbers,
  so a message the two libraries word differently counts as lines only one run
  printed, and the numbers on all aligned lines are still compared. Object
  addresses are masked, and so are elapsed times printed as ``time: N``
  (diffrax's notebooks print one at each logged step).

Checkouts and versions
  The tests must match the installed library, so each checkout is pinned to the
  commit of the installed release. ``--fetch-dir`` takes the git snapshots the
  ``fetch`` tool makes (``<dir>/<owner>+<name>/repo``; fetch github:<owner>/<name>
  for the seven repositories below) and archives these refs from them
  (``--ref optax=HEAD`` takes another); ``--optax/--flax/--optimistix/--jaxopt/
  --equinox/--diffrax/--numpyro DIR`` take work trees instead. The script warns when a
  checkout's version is not the installed one.

    google-deepmind/optax      v0.2.8 (107e9ad2)        optax 0.2.8 installed
    google/flax                3a491108 (2026-06-19)    flax 0.12.8 installed
                               (no v0.12.8 tag in the snapshot; that commit,
                               "update to v0.12.8", sets flax/version.py)
    patrick-kidger/optimistix  v0.1.0 (8cb3e507)        optimistix 0.1.0
    google/jaxopt              jaxopt-v0.8.5 (b12c2f3d) jaxopt 0.8.5
    patrick-kidger/equinox     v0.13.8 (e6fbcabd)       equinox 0.13.8
    patrick-kidger/diffrax     v0.7.2 (1810a35a)        diffrax 0.7.2
    pyro-ppl/numpyro           0.21.0 (e708f34b)        numpyro 0.21.0

  The libraries are the registry releases of those versions, not installs from
  the checkouts. Besides the ``test`` extra::

    pip install optimistix==0.1.0 jaxopt==0.8.5 diffrax==0.7.2 numpyro==0.21.0 \\
        beartype "scikit-learn<1.8"

  with jax, jaxlib, numpy, equinox, optax and flax held by ``-c`` constraints
  (first run: lineax 0.1.1, diffrax 0.7.2, beartype 0.23.1, scikit-learn 1.7.2;
  jaxopt 0.8.5's tests pass ``multi_class`` to scikit-learn, gone in 1.8).

  The v0.2.8 notebooks rosenbrock_ademamix and sam fail with optax itself
  (``solve=`` for ``solver=``; ``NamedTuple.replace``); optax fixed both after
  the release, so ``--only notebooks --ref optax=HEAD`` runs them too.

Run
  python benchmarks/client_suite.py --fetch-dir /work/.mirror [--only flax]
      [--json FILE] [--timeout 1800] [--scratch DIR] [--ref NAME=REF]
      [--network] [--heavy] [--all-params]

  The first full run (2026-11-26, two CPU cores shared with other jobs, load
  6 to 8) took 58 minutes: notebooks 7, flax 25, optimistix 15, jaxopt 11.
  On 2026-12-07 (two cores, little else running): flax 8, optimistix 5,
  equinox 1, diffrax 11 (sde_example alone 7, both ways), numpyro 0.2.
  Tests run one file per pytest process and one worker, so a hung file meets
  ``--timeout`` (seconds, per notebook or test file and run). Not part of CI.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import io
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from importlib import metadata
from pathlib import Path


@dataclasses.dataclass(frozen=True)
class Source:
    """Where a checkout comes from and which files of it the suite needs."""

    repo: str  # owner/name on GitHub
    ref: str  # the commit of the installed release
    paths: tuple[str, ...]  # what to archive from the snapshot
    version_file: str
    version_pattern: str
    package: str  # the distribution whose installed version must match
    notebooks: tuple[str, ...] = ()  # glob patterns of the notebooks it runs
    tests: str = "tests"  # the tests folder
    heavy: frozenset[str] = frozenset()  # notebooks left out unless --heavy


# Where a checkout says its version: `__version__ = "..."` in a module, or a
# static `version = "..."` in pyproject.toml.
DUNDER_VERSION = r"__version__\s*=\s*[\"']([^\"']+)"
PYPROJECT_VERSION = r"(?m)^version\s*=\s*[\"']([^\"']+)"

SOURCES = {
    "optax": Source(
        "google-deepmind/optax",
        "v0.2.8",
        ("examples", "docs/getting_started.ipynb", "optax/__init__.py"),
        "optax/__init__.py",
        DUNDER_VERSION,
        "optax",
        notebooks=("examples/**/*.ipynb", "docs/getting_started.ipynb"),
        # Trains a 12-layer transformer four ways: about 14 minutes a phase
        # (and 50 a run) on two CPU cores.
        heavy=frozenset({"examples/gradient_accumulation_and_microbatching.ipynb"}),
    ),
    "flax": Source(
        "google/flax",
        "3a49110824001614baf35c6ee8934479fcdb133a",
        ("tests", "pyproject.toml", "flax/version.py"),
        "flax/version.py",
        DUNDER_VERSION,
        "flax",
    ),
    "optimistix": Source(
        "patrick-kidger/optimistix",
        "v0.1.0",
        ("tests", "pyproject.toml"),
        "pyproject.toml",
        PYPROJECT_VERSION,
        "optimistix",
    ),
    "jaxopt": Source(
        "google/jaxopt",
        "jaxopt-v0.8.5",
        ("tests", "jaxopt/version.py"),
        "jaxopt/version.py",
        DUNDER_VERSION,
        "jaxopt",
    ),
    # Their example notebooks train with optax (the archive takes only the
    # notebooks: equinox's docs/examples also hold MNIST files the snapshot
    # lacks), and each has one test file that imports optax.
    "equinox": Source(
        "patrick-kidger/equinox",
        "v0.13.8",
        ("docs/examples/*.ipynb", "tests", "pyproject.toml"),
        "pyproject.toml",
        PYPROJECT_VERSION,
        "equinox",
        notebooks=("docs/examples/*.ipynb",),
        # A million training steps of a diffusion model on MNIST.
        heavy=frozenset({"docs/examples/score_based_diffusion.ipynb"}),
    ),
    "diffrax": Source(
        "patrick-kidger/diffrax",
        "v0.7.2",
        ("docs/examples/*.ipynb", "test", "pyproject.toml"),
        "pyproject.toml",
        PYPROJECT_VERSION,
        "diffrax",
        notebooks=("docs/examples/*.ipynb",),
        tests="test",
        # 10,000 training steps of an SDE GAN and of a continuous
        # normalising flow, each step an SDE or ODE solve.
        heavy=frozenset(
            {
                "docs/examples/neural_sde.ipynb",
                "docs/examples/continuous_normalising_flow.ipynb",
            }
        ),
    ),
    # Its optimizer tests hand optax transformations to optax_to_numpyro (the
    # other test files pass them to SVI, which refuses anything that is not
    # optax's NamedTuple: docs/differences-from-optax.md, "Type checks").
    "numpyro": Source(
        "pyro-ppl/numpyro",
        "0.21.0",
        (
            "test/test_optimizers.py",
            "test/conftest.py",
            "pyproject.toml",
            "numpyro/version.py",
        ),
        "numpyro/version.py",
        DUNDER_VERSION,
        "numpyro",
        tests="test",
    ),
}

# Per test suite: pytest options in place of the project's addopts (None: keep
# the project's), whether to run only the parametrized cases holding optax, and
# a pytest -k expression choosing the tests of its files (``k``, optional).
TEST_SUITES = {
    "flax": {"addopts": None, "optax_params_only": False},
    # Its addopts add --benchmark-skip (pytest-benchmark, not needed here); the
    # jaxtyping/beartype runtime checks stay.
    "optimistix": {
        "addopts": "--jaxtyping-packages=optimistix,beartype.beartype("
        "conf=beartype.BeartypeConf(strategy=beartype.BeartypeStrategy.On))",
        "optax_params_only": True,
    },
    "jaxopt": {"addopts": "", "optax_params_only": False},
    # Both keep their jaxtyping/beartype checks (the projects' addopts).
    "equinox": {"addopts": None, "optax_params_only": False},
    # test_adjoint.py's one optax test (its others solve ODEs for minutes and
    # end in a segmentation fault on two CPU cores, with optax as with gradax).
    "diffrax": {
        "addopts": None,
        "optax_params_only": False,
        "k": "test_implicit and not runge",
    },
    # Its configuration turns warnings into errors.
    "numpyro": {"addopts": None, "optax_params_only": False},
}
# "notebooks" is optax's; "equinox" and "diffrax" run their notebooks and tests.
SUITE_NAMES = (
    "notebooks",
    "flax",
    "optimistix",
    "jaxopt",
    "equinox",
    "diffrax",
    "numpyro",
)

# A notebook that needs one of these downloads its data.
NETWORK_MARKERS = {
    "tensorflow_datasets": re.compile(r"^\s*import tensorflow_datasets|\btfds\.", re.M),
    "HF datasets": re.compile(r"\bload_dataset\(|^\s*from datasets import", re.M),
    "torchvision download": re.compile(r"download\s*=\s*True"),
    "URL": re.compile(
        r"\burlopen\(|\burlretrieve\(|\brequests\.get\(|\bwget\b|hf_hub_download"
    ),
}

# A baseline failure that means the data could not be fetched or its loader
# is not installed.
NETWORK_ERRORS = re.compile(
    r"No module named '(tensorflow_datasets|tensorflow|torchvision|datasets|grain)"
    r"|URLError|ConnectionError|gaierror|Temporary failure in name resolution"
    r"|Network is unreachable|Max retries exceeded"
)

# ---------------------------------------------------------------- the rewrite

_IMPORT_LINE = re.compile(
    r"^(?P<indent>\s*)(?P<body>(?:import|from)\s+optax\b[^#]*?)(?P<tail>\s*(?:#.*)?)$"
)


def _rewrite_import_item(item: str) -> str:
    """One ``a.b as c`` item of an ``import`` statement."""
    name, _, alias = (part.strip() for part in item.partition(" as "))
    if name != "optax" and not name.startswith("optax."):
        return item.strip()
    target = "gradax" + name[len("optax") :]
    if alias:
        return f"{target} as {alias}"
    if target == "gradax":
        return "gradax as optax"
    # `import optax.contrib` binds optax with its submodule loaded.
    return f"gradax as optax; import {target}"


def rewrite_line(line: str) -> str:
    """A source line with an optax import pointed at gradax; others unchanged."""
    match = _IMPORT_LINE.match(line)
    if not match:
        return line
    indent, body, tail = match.group("indent", "body", "tail")
    if body.startswith("from"):
        body = re.sub(r"^from\s+optax\b", "from gradax", body)
    else:
        items = body[len("import") :].split(",")
        body = "import " + ", ".join(_rewrite_import_item(i) for i in items)
    return indent + body + tail


def rewrite(source: str) -> str:
    """Source with its optax import lines pointed at gradax, line for line."""
    lines = source.split("\n")
    return "\n".join(rewrite_line(line) for line in lines)


def imports_optax(source: str) -> bool:
    return re.search(r"^\s*(?:import|from)\s+optax\b", source, re.M) is not None


# ---------------------------------------------------------------- checkouts


def _installed(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def obtain(name: str, args, scratch: Path) -> tuple[Path, dict]:
    """The checkout of one library and a record of its version."""
    source = SOURCES[name]
    record = {"repo": source.repo, "installed": _installed(source.package)}
    tree = getattr(args, name)
    if tree is None:
        if args.fetch_dir is None:
            raise SystemExit(f"{name}: give --{name} DIR or --fetch-dir DIR")
        git_dir = args.fetch_dir / source.repo.replace("/", "+") / "repo"
        if not git_dir.exists():
            git_dir = args.fetch_dir / source.repo.replace("/", "+")
        ref = dict(args.ref or []).get(name, source.ref)
        tree = scratch / "checkouts" / name
        tree.mkdir(parents=True)
        archive = subprocess.run(
            ["git", "--git-dir", str(git_dir), "archive", ref, *source.paths],
            capture_output=True,
            check=False,
        )
        if archive.returncode:
            raise SystemExit(
                f"{name}: cannot archive {ref} from {git_dir}:"
                f" {archive.stderr.decode().strip()}"
            )
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(tree, filter="data")
        commit = subprocess.run(
            ["git", "--git-dir", str(git_dir), "rev-parse", ref + "^{commit}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        record.update(ref=ref, commit=commit)
    else:
        record["tree"] = str(tree)
    version_text = (tree / source.version_file).read_text()
    found = re.search(source.version_pattern, version_text)
    record["checkout"] = found.group(1) if found else None
    if record["checkout"] != record["installed"]:
        print(
            f"warning: {name} checkout is {record['checkout']}, installed is "
            f"{record['installed']}: its tests may not match",
            file=sys.stderr,
        )
    return tree, record


# ---------------------------------------------------------------- processes


def _run(
    cmd, cwd: Path, env: dict, timeout: float
) -> tuple[int | None, str, str, float]:
    """Run a program in its own process group; rc is None when it timed out."""
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        rc = None
    return rc, out, err, time.monotonic() - start


def _env(extra_path: Path | None = None) -> dict:
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONHASHSEED="0")
    env.pop("PYTHONPATH", None)
    if extra_path is not None:
        env["PYTHONPATH"] = str(extra_path)
    return env


# ---------------------------------------------------------------- notebooks

NOTEBOOK_PRELUDE = '''\
import sys as _cs_sys
import traceback as _cs_traceback


def _cs_display(value):
    """What Jupyter shows for a cell's last expression."""
    if value is not None:
        print(repr(value))


def _cs_seed():
    """Notebooks that draw data from the global generators draw the same data."""
    import random

    random.seed(0)
    try:
        import numpy
    except ImportError:
        return
    numpy.random.seed(0)


_cs_seed()


def _cs_where(lineno):
    """A line of this script as the notebook's code cell and line in it."""
    with open(__file__) as script:
        lines = script.read().split("\\n")
    for index in range(lineno - 1, -1, -1):
        if lines[index].startswith("# ---- code cell "):
            return f"code cell {lines[index].split()[-1]}, line {lineno - index - 1}"
    return f"line {lineno}"


def _cs_excepthook(kind, value, tb):
    _cs_traceback.print_exception(kind, value, tb)
    where = ""
    for frame, lineno in _cs_traceback.walk_tb(tb):
        if frame.f_code.co_filename == __file__:
            where = f" [{_cs_where(lineno)}]"
    message = str(value).strip().split("\\n")[0]
    head = kind.__name__ + (": " + message if message else "")
    print("CLIENT_SUITE_ERROR: " + head + where, file=_cs_sys.stderr)


_cs_sys.excepthook = _cs_excepthook
'''


def _show_last_expression(code: str) -> str:
    """The cell with its last expression printed, unless it ends with ``;``.

    The call wraps the expression in place, so the cell keeps its lines.
    """
    import ast

    try:
        tree = ast.parse(code)
    except SyntaxError:
        return code
    if not tree.body or not isinstance(tree.body[-1], ast.Expr):
        return code
    last = tree.body[-1]
    lines = [line.encode() for line in code.split("\n")]  # ast offsets are bytes
    first, end = last.lineno - 1, last.end_lineno - 1
    if lines[end][last.end_col_offset :].strip().startswith(b";"):
        return code
    lines[end] = (
        lines[end][: last.end_col_offset] + b")" + lines[end][last.end_col_offset :]
    )
    lines[first] = (
        lines[first][: last.col_offset]
        + b"_cs_display("
        + lines[first][last.col_offset :]
    )
    return "\n".join(line.decode() for line in lines)


def notebook_script(notebook: Path) -> tuple[str, list[str]]:
    """The notebook's code cells as one script, and the lines commented out."""
    cells = json.loads(notebook.read_text())["cells"]
    parts, dropped = [NOTEBOOK_PRELUDE], []
    for index, cell in enumerate(c for c in cells if c["cell_type"] == "code"):
        source = cell["source"]
        source = "".join(source) if isinstance(source, list) else source
        lines = []
        for line in source.split("\n"):
            if line.lstrip().startswith(("!", "%")):
                dropped.append(line.strip())
                line = line.replace(line.lstrip(), "# " + line.lstrip())
            lines.append(line)
        code = _show_last_expression("\n".join(lines))
        parts.append(f"# ---- code cell {index}\n{code}")
    return "\n\n".join(parts) + "\n", dropped


def _first_error(stderr: str) -> str:
    for line in reversed(stderr.splitlines()):
        if line.startswith("CLIENT_SUITE_ERROR: "):
            return line[len("CLIENT_SUITE_ERROR: ") :]
    lines = [line for line in stderr.splitlines() if line.strip()]
    return lines[-1] if lines else ""


_NUMBER = re.compile(
    r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|\b(?:nan|inf)\b", re.I
)
_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]+\b")
# An elapsed time a program prints ("Computation time: 5.02", diffrax's
# notebooks at every logged step): differs from run to run, so not compared.
_ELAPSED = re.compile(
    r"(?i)(\b(?:time|elapsed|seconds)\s*[:=]\s*)[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:e[-+]?\d+)?"
)
# ... and as "in 0.0065 seconds" (diffrax's stiff_ode).
_SECONDS = re.compile(
    r"(?i)(?<![\w.])(?:\d+\.\d*|\.\d+|\d+)(?:e[-+]?\d+)?(\s*(?:seconds?|secs?)\b)"
)


def _masked(text: str) -> str:
    text = _ELAPSED.sub(r"\1<elapsed>", _ADDRESS.sub("0x?", text))
    return _SECONDS.sub(r"<elapsed>\1", text)


def _numbers(line: str) -> tuple[str, list[float]]:
    values = [float(m) for m in _NUMBER.findall(line)]
    return _NUMBER.sub("#", line), values


def _close(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=1e-5, abs_tol=0.0)


def compare_stdout(optax_out: str, gradax_out: str) -> dict:
    """The two stdouts: "same", "close" (numbers within rtol 1e-5) or "different".

    Lines are aligned on their text with the numbers taken out, so a message
    one library prints and the other words differently (a line search's
    warning) shows as lines only one run printed, and the numbers of every
    aligned line are still compared.
    """
    optax_out, gradax_out = _masked(optax_out), _masked(gradax_out)
    if optax_out == gradax_out:
        return {"verdict": "same"}
    left = [_numbers(line) for line in optax_out.splitlines()]
    right = [_numbers(line) for line in gradax_out.splitlines()]
    matcher = difflib.SequenceMatcher(
        None, [t for t, _ in left], [t for t, _ in right], autojunk=False
    )
    aligned = far = only_optax = only_gradax = 0
    worst, first_far, first_text = 0.0, None, None
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            only_optax, only_gradax = only_optax + i2 - i1, only_gradax + j2 - j1
            if first_text is None:
                first_text = {
                    "line": i1 + 1,
                    "optax": optax_out.splitlines()[i1][:200] if i2 > i1 else "",
                    "gradax": gradax_out.splitlines()[j1][:200] if j2 > j1 else "",
                }
            continue
        for i, j in zip(range(i1, i2), range(j1, j2), strict=True):
            aligned += 1
            pairs = list(zip(left[i][1], right[j][1], strict=True))
            if all(_close(x, y) for x, y in pairs):
                for x, y in pairs:
                    if x != y and math.isfinite(x) and math.isfinite(y):
                        worst = max(worst, abs(x - y) / max(abs(x), abs(y)))
                continue
            far += 1
            if first_far is None:
                first_far = {
                    "line": i + 1,
                    "optax": optax_out.splitlines()[i][:200],
                    "gradax": gradax_out.splitlines()[j][:200],
                }
    verdict = "close" if not (far or only_optax or only_gradax) else "different"
    result = {
        "verdict": verdict,
        "aligned_lines": aligned,
        "numbers_beyond_rtol": far,
        "max_rel_diff": worst,
        "only_optax_lines": only_optax,
        "only_gradax_lines": only_gradax,
    }
    if first_far:
        result["first_number_difference"] = first_far
    if first_text:
        result["first_text_difference"] = first_text
    return result


def run_notebooks(
    root: Path, source: Source, scratch: Path, args, label: str
) -> list[dict]:
    """Each of `source`'s notebooks in the checkout `root`, with optax and gradax."""
    notebooks = sorted({p for pattern in source.notebooks for p in root.glob(pattern)})
    results = []
    for notebook in notebooks:
        name = str(notebook.relative_to(root))
        script, dropped = notebook_script(notebook)
        if not imports_optax(script):
            continue  # a model or a solver alone (equinox's unet): nothing to switch
        row = {"program": name, "commented_out": dropped}
        needs = [k for k, pattern in NETWORK_MARKERS.items() if pattern.search(script)]
        if name in source.heavy and not args.heavy:
            row.update(status="left out (heavy)")
            results.append(row)
            _progress(f"{label}: {name}: left out (heavy; --heavy runs it)")
            continue
        if needs and not args.network:
            row.update(status="needs network", needs=needs)
            results.append(row)
            _progress(f"{label}: {name}: needs network ({', '.join(needs)})")
            continue
        for variant, text in (("optax", script), ("gradax", rewrite(script))):
            # (beside the suite's tests, in scratch / suite / variant)
            folder = scratch / label / "notebooks" / variant / name.replace("/", "__")
            folder.mkdir(parents=True)
            (folder / "notebook.py").write_text(text)
            rc, out, err, seconds = _run(
                [sys.executable, "notebook.py"], folder, _env(), args.timeout
            )
            status = "passed" if rc == 0 else ("timeout" if rc is None else "failed")
            row[variant] = {
                "status": status,
                "seconds": round(seconds, 1),
                "stdout": out,
            }
            if status == "failed":
                row[variant]["error"] = _first_error(err)
            elif status == "timeout":
                row[variant]["error"] = f"ran past --timeout ({args.timeout:.0f} s)"
            _progress(f"{label}: {name} with {variant}: {status} ({seconds:.0f} s)")
        base, ours = row["optax"], row["gradax"]
        if base["status"] == "failed" and NETWORK_ERRORS.search(base.get("error", "")):
            row["status"] = "needs network"
            row["needs"] = [base["error"]]
        elif base["status"] != "passed":
            row["status"] = "fails with optax"
            # Where the gradax run stopped too: the same error, or an earlier one
            # that the baseline's failure hides.
            row["gradax_same_error"] = base.get("error") == ours.get("error")
        elif ours["status"] != "passed":
            row["status"] = "fails only with gradax"
        else:
            row["status"] = "passed"
            row["stdout"] = compare_stdout(base["stdout"], ours["stdout"])
        results.append(row)
    return results


# ---------------------------------------------------------------- tests

PYTEST_PLUGIN = '''
"""Records each test's outcome and first error line (client_suite.py)."""
import dataclasses
import json
import os

OUT = os.environ["CLIENT_SUITE_OUT"]
ONLY_OPTAX_PARAMS = os.environ.get("CLIENT_SUITE_OPTAX_PARAMS_ONLY") == "1"
INDIRECT = set(filter(None, os.environ.get("CLIENT_SUITE_INDIRECT", "").split(":")))


def _write(record):
    with open(OUT, "a") as f:
        f.write(json.dumps(record) + "\\n")


def _first_line(report):
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        message = crash.message.strip().split("\\n")[0]
        return f"{message} [{os.path.basename(crash.path)}:{crash.lineno}]"
    text = str(report.longrepr)
    errors = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
    lines = errors or [line for line in text.splitlines() if line.strip()]
    return lines[0] if lines else ""


def _holds_optax(value, depth=0):
    for thing in (type(value), value):
        module = getattr(thing, "__module__", None) or ""
        if module.split(".")[0] in ("optax", "gradax"):
            return True
    if depth >= 3:
        return False
    if isinstance(value, (list, tuple)):
        children = list(value)
    elif isinstance(value, dict):
        children = list(value.values())
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        children = [getattr(value, f.name, None) for f in dataclasses.fields(value)]
    else:
        children = list(getattr(value, "__dict__", {}).values())
    return any(_holds_optax(child, depth + 1) for child in children)


def pytest_collection_modifyitems(config, items):
    if not ONLY_OPTAX_PARAMS:
        return
    keep, drop = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", None)
        holds = bool(params) and any(_holds_optax(v) for v in params.values())
        # A file that reaches optax through a helper keeps only the cases that
        # hand it an optax object; one that imports optax keeps its plain tests.
        if holds or (not params and item.nodeid.split("::")[0] not in INDIRECT):
            keep.append(item)
        else:
            drop.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_collectreport(report):
    if report.failed:
        _write({"collect_error": report.nodeid, "error": _first_line(report)})


def pytest_runtest_logreport(report):
    # A failure in any phase fails the test (the reader keeps the first one).
    if report.failed:
        error = _first_line(report)
        record = {"test": report.nodeid, "outcome": "failed", "error": error}
    elif report.skipped:
        record = {"test": report.nodeid, "outcome": "skipped"}
    elif report.when == "call":
        record = {"test": report.nodeid, "outcome": "passed"}
    else:
        return
    _write(record)
'''


def _read_outcomes(path: Path) -> tuple[dict, list[dict]]:
    """Outcome per test id (last word wins) and the collection errors."""
    outcomes, collect_errors = {}, []
    if not path.exists():
        return outcomes, collect_errors
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if "collect_error" in record:
            collect_errors.append(record)
            continue
        previous = outcomes.get(record["test"])
        if previous and previous["outcome"] == "failed":
            continue
        outcomes[record["test"]] = record
    return outcomes, collect_errors


def _prepare_tests(tree: Path, folder: str, dest: Path, pointed: bool) -> None:
    """The checkout's tests folder and pytest configuration, in dest."""
    shutil.copytree(
        tree / folder, dest / folder, ignore=shutil.ignore_patterns("__pycache__")
    )
    for config in ("pyproject.toml", "pytest.ini", "setup.cfg", "conftest.py"):
        if (tree / config).exists():
            shutil.copy(tree / config, dest / config)
    if pointed:
        for path in (dest / folder).rglob("*.py"):
            source = path.read_text()
            if imports_optax(source):
                path.write_text(rewrite(source))
    (dest / "client_suite_plugin.py").write_text(PYTEST_PLUGIN)


def select_test_files(tests: Path, via_helpers: bool) -> tuple[list[str], list[str]]:
    """Test files that import optax, and (via_helpers) those that import a
    helper module of the tests folder that does."""
    sources = {
        str(path.relative_to(tests)): path.read_text()
        for path in tests.rglob("*.py")
        if "__pycache__" not in path.parts
    }

    def is_test(name: str) -> bool:
        return re.match(r"(test_.*|.*_test)\.py$", Path(name).name) is not None

    direct = [f for f, text in sources.items() if is_test(f) and imports_optax(text)]
    helpers = [
        Path(f).stem
        for f, text in sources.items()
        if not is_test(f) and imports_optax(text)
    ]
    indirect = []
    if via_helpers and helpers:
        names = "|".join(map(re.escape, helpers))
        uses = re.compile(
            rf"^\s*(?:from\s+\.?(?:{names})\s+import|import\s+(?:{names})\b)", re.M
        )
        indirect = [
            f
            for f, text in sources.items()
            if is_test(f) and f not in direct and uses.search(text)
        ]
    return sorted(direct), sorted(indirect)


def run_tests(suite: str, tree: Path, scratch: Path, args) -> dict:
    options, folder = TEST_SUITES[suite], SOURCES[suite].tests
    only_optax_params = options["optax_params_only"] and not args.all_params
    files, indirect = select_test_files(tree / folder, only_optax_params)
    indirect = [f"{folder}/{f}" for f in indirect]
    files = sorted([f"{folder}/{f}" for f in files] + indirect)
    results = {}
    for variant in ("optax", "gradax"):
        dest = scratch / suite / variant
        _prepare_tests(tree, folder, dest, pointed=variant == "gradax")
        env = _env(dest)
        if only_optax_params:
            env["CLIENT_SUITE_OPTAX_PARAMS_ONLY"] = "1"
            env["CLIENT_SUITE_INDIRECT"] = ":".join(indirect)
        per_file = {}
        for test_file in files:
            if variant == "gradax" and not _selected(results["optax"][test_file]):
                per_file[test_file] = results["optax"][test_file]
                continue  # a helper's user with no case that holds optax
            out = dest / (test_file.replace("/", "__") + ".jsonl")
            env["CLIENT_SUITE_OUT"] = str(out)
            cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
            cmd += ["-p", "client_suite_plugin", "-p", "no:randomly"]
            if options["addopts"] is not None:
                cmd += ["-o", f"addopts={options['addopts']}"]
            if options.get("k"):
                cmd += ["-k", options["k"]]
            cmd.append(test_file)
            rc, stdout, _, seconds = _run(cmd, dest, env, args.timeout)
            outcomes, collect_errors = _read_outcomes(out)
            tail = [line for line in stdout.splitlines() if line.strip()][-1:]
            per_file[test_file] = {
                "outcomes": outcomes,
                "collect_errors": collect_errors,
                "timeout": rc is None,
                # Killed by a signal (a segmentation fault): its last tests
                # have no outcome.
                "signal": -rc if rc is not None and rc < 0 else None,
                "seconds": round(seconds, 1),
                "summary": tail[0] if tail else "",
            }
            _progress(
                f"{suite} {test_file} with {variant}: "
                f"{'TIMEOUT' if rc is None else (tail[0] if tail else rc)}"
                f" ({seconds:.0f} s)"
            )
        results[variant] = per_file
    files = [f for f in files if _selected(results["optax"][f])]
    return _tally(files, results)


def _selected(run: dict) -> bool:
    return bool(
        run["outcomes"] or run["collect_errors"] or run["timeout"] or run["signal"]
    )


def _tally(files: list[str], results: dict) -> dict:
    """Per suite: passed with optax, of those passed with gradax, the failures."""
    rows, failures = [], []
    total = kept = 0
    for test_file in files:
        base, ours = results["optax"][test_file], results["gradax"][test_file]
        passed = [t for t, r in base["outcomes"].items() if r["outcome"] == "passed"]
        still = 0
        for test in passed:
            record = ours["outcomes"].get(test)
            if record and record["outcome"] == "passed":
                still += 1
                continue
            if record:
                outcome, error = record["outcome"], record.get("error", "")
            elif ours["collect_errors"]:
                outcome, error = (
                    "failed",
                    "collection: " + ours["collect_errors"][0]["error"],
                )
            elif ours["timeout"]:
                outcome, error = "timeout", "the file ran past --timeout"
            elif ours["signal"]:
                outcome, error = "crashed", f"killed by signal {ours['signal']}"
            else:
                outcome, error = "not run", ""
            failures.append({"test": test, "outcome": outcome, "error": error})
        total += len(passed)
        kept += still
        rows.append(
            {
                "file": test_file,
                "optax_passed": len(passed),
                "gradax_passed_of_those": still,
                "optax_failed": sum(
                    r["outcome"] == "failed" for r in base["outcomes"].values()
                ),
                "optax_collect_errors": [e["error"] for e in base["collect_errors"]],
                "seconds": {v: results[v][test_file]["seconds"] for v in results},
                "timeout": {v: results[v][test_file]["timeout"] for v in results},
                "signal": {v: results[v][test_file]["signal"] for v in results},
            }
        )
    return {
        "files": rows,
        "optax_passed": total,
        "gradax_passed": kept,
        "failures": failures,
    }


# ---------------------------------------------------------------- report


def _progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def print_report(report: dict) -> None:
    print("\nversions:", ", ".join(f"{k} {v}" for k, v in report["versions"].items()))
    tree = report.get("gradax_tree", {})
    if tree.get("commit"):
        dirty = " (with uncommitted changes)" if tree["uncommitted_changes"] else ""
        print(f"gradax from {tree['path']} at {tree['commit'][:10]}{dirty}")
    for suite, result in report["suites"].items():
        print(f"\n== {suite} ({result['seconds']:.0f} s)")
        if "programs" in result:
            _print_notebooks(result["programs"])
        if "files" in result:
            _print_tests(result)


def _print_notebooks(rows: list[dict]) -> None:
    ok = [r for r in rows if r.get("optax", {}).get("status") == "passed"]
    both = [r for r in ok if r["gradax"]["status"] == "passed"]
    verdicts = [r["stdout"]["verdict"] for r in both]
    network = sum(r["status"] == "needs network" for r in rows)
    heavy = sum(r["status"] == "left out (heavy)" for r in rows)
    print(
        f"{len(ok)} of {len(rows)} run with optax, {len(both)} of those"
        f" with gradax; stdout same {verdicts.count('same')}, close"
        f" {verdicts.count('close')}, different {verdicts.count('different')};"
        f" needs network {network}, left out (heavy) {heavy}"
    )
    for row in rows:
        line = f"  {row['program']:55} {row['status']}"
        if "stdout" in row:
            compared = row["stdout"]
            line += f"; stdout {compared['verdict']}"
            if compared["verdict"] == "close":
                line += f" (max rel diff {compared['max_rel_diff']:.1e})"
        elif row["status"] == "needs network":
            line += f" ({', '.join(row['needs'])})"
        elif row["status"] == "fails with optax":
            line += f": {row['optax'].get('error', row['optax']['status'])}"
            if not row["gradax_same_error"]:
                error = row["gradax"].get("error", row["gradax"]["status"])
                line += f"\n      gradax's run: {error}"
        elif row["status"] == "fails only with gradax":
            line += f": {row['gradax'].get('error', row['gradax']['status'])}"
        print(line)
        compared = row.get("stdout", {})
        if compared.get("verdict") == "different":
            print(
                f"      {compared['aligned_lines']} lines alike in text,"
                f" {compared['numbers_beyond_rtol']} of them with numbers"
                f" beyond rtol 1e-5; lines only with optax"
                f" {compared['only_optax_lines']}, only with gradax"
                f" {compared['only_gradax_lines']}"
            )
        for key in ("first_number_difference", "first_text_difference"):
            if key in compared:
                first = compared[key]
                print(f"      {key.replace('_', ' ')}, line {first['line']}:")
                print(f"        optax : {first['optax']}")
                print(f"        gradax: {first['gradax']}")


def _print_tests(result: dict) -> None:
    print(
        f"{result['optax_passed']} pass with optax,"
        f" {result['gradax_passed']} of those with gradax"
    )
    for row in result["files"]:
        note = "; TIMEOUT" if any(row["timeout"].values()) else ""
        for variant, number in row["signal"].items():
            note += f"; killed by signal {number} with {variant}" if number else ""
        if row["optax_collect_errors"]:
            note += f"; does not import with optax: {row['optax_collect_errors'][0]}"
        passed = f"{row['gradax_passed_of_those']:>5}/{row['optax_passed']}"
        print(f"  {row['file']:45} {passed}{note}")
    if result["failures"]:
        print("  fail only with gradax:")
        for failure in result["failures"]:
            print(
                f"    {failure['test']}\n      {failure['outcome']}: {failure['error']}"
            )


def _gradax_tree() -> dict:
    """Where gradax is imported from and, in a git work tree, its commit."""
    found = subprocess.run(
        [sys.executable, "-c", "import gradax; print(gradax.__file__)"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    if not found:
        return {}
    folder = Path(found).parent
    git = ["git", "-C", str(folder)]
    commit = subprocess.run(
        [*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    changed = subprocess.run(
        [*git, "status", "--porcelain", "--", "."],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return {"path": str(folder), "commit": commit, "uncommitted_changes": bool(changed)}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--fetch-dir", type=Path, help="folder of git snapshots <owner>+<name>/repo"
    )
    for name in SOURCES:
        parser.add_argument(
            f"--{name}", type=Path, help=f"a work tree of {SOURCES[name].repo}"
        )
    parser.add_argument(
        "--only",
        choices=SUITE_NAMES,
        action="append",
        help="run one suite (repeatable)",
    )
    parser.add_argument("--json", type=Path, help="write the full results here")
    parser.add_argument(
        "--timeout", type=float, default=1800, help="seconds per program and run"
    )
    parser.add_argument(
        "--scratch",
        type=Path,
        help="keep the scratch folder here (default: a temporary one)",
    )
    parser.add_argument(
        "--network", action="store_true", help="run notebooks that download data too"
    )
    parser.add_argument(
        "--ref",
        action="append",
        type=lambda text: tuple(text.split("=", 1)),
        metavar="NAME=REF",
        help="with --fetch-dir: another ref of a snapshot (e.g. optax=HEAD)",
    )
    parser.add_argument(
        "--heavy", action="store_true", help="run notebooks written for a GPU too"
    )
    parser.add_argument(
        "--all-params", action="store_true", help="optimistix: every parametrized case"
    )
    args = parser.parse_args()
    suites = args.only or list(SUITE_NAMES)

    with tempfile.TemporaryDirectory() as temporary:
        scratch = args.scratch or Path(temporary)
        scratch.mkdir(parents=True, exist_ok=True)
        report = {"versions": {}, "checkouts": {}, "suites": {}}
        for package in (
            "jax",
            "optax",
            "gradax",
            "flax",
            "optimistix",
            "jaxopt",
            "equinox",
            "lineax",
            "diffrax",
            "numpyro",
        ):
            report["versions"][package] = _installed(package)
        report["gradax_tree"] = _gradax_tree()
        for suite in suites:
            start = time.monotonic()
            library = "optax" if suite == "notebooks" else suite
            for old in (scratch / "checkouts" / library, scratch / suite):
                shutil.rmtree(old, ignore_errors=True)  # a reused --scratch
            tree, record = obtain(library, args, scratch)
            report["checkouts"][library] = record
            result, source = {}, SOURCES[library]
            if source.notebooks:
                result["programs"] = run_notebooks(tree, source, scratch, args, suite)
            if suite in TEST_SUITES:
                result.update(run_tests(suite, tree, scratch, args))
            result["seconds"] = round(time.monotonic() - start, 1)
            report["suites"][suite] = result
            if args.json:  # written after each suite, so a long run leaves a trail
                args.json.write_text(json.dumps(report, indent=1))
        print_report(report)


if __name__ == "__main__":
    main()
