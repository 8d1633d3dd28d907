"""Checkouts, the shared problem and the comparison of the reference suite.

Nothing here holds reference code: a checkout is archived from a ``fetch``
snapshot into a scratch folder at run time and imported from there.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

SCRATCH = Path(tempfile.mkdtemp(prefix="gradax-references-"))


@dataclass(frozen=True)
class Checkout:
    repo: str  # owner/name
    commit: str
    root: Path  # the scratch folder the files were archived into


def checkout(
    fetch_dir: Path, repo: str, paths: tuple[str, ...], package: str
) -> Checkout:
    """Archive `paths` of `repo`'s snapshot (HEAD) into SCRATCH/<package>/.

    The folder becomes an importable package (an empty ``__init__.py``, so
    the repository's own package initializer and its optional imports, e.g.
    triton, stay out), holding the files at their paths in the repository.
    """
    git_dir = fetch_dir / repo.replace("/", "+") / "repo"
    if not git_dir.is_dir():
        raise FileNotFoundError(
            f"no snapshot of {repo} in {fetch_dir}: fetch github:{repo} first"
        )
    commit = subprocess.run(
        ["git", "--git-dir", str(git_dir), "rev-parse", "HEAD"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    into = SCRATCH / package
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "--git-dir", str(git_dir), "archive", "--format=tar", "HEAD", *paths],
        check=True,
        capture_output=True,
    ).stdout
    tar_path = SCRATCH / f"{package}.tar"
    tar_path.write_bytes(archive)
    with tarfile.open(tar_path) as tar:
        tar.extractall(into, filter="data")
    for folder in [into, *(p for p in into.rglob("*") if p.is_dir())]:
        (folder / "__init__.py").write_text("")
    if str(SCRATCH) not in sys.path:
        sys.path.insert(0, str(SCRATCH))
    return Checkout(repo, commit, into)


def load(package: str, module: str) -> Any:
    return importlib.import_module(f"{package}.{module}")


# --------------------------------------------------------------- the problem
# A perturbed quadratic: g_t = (x_t - target) + noise_t, with everything drawn
# from numpy.random.default_rng(seed) in this order: x0, target, noise (steps
# of them), then whatever the case needs (Dion's Q0). The tests that read the
# fixtures draw the same numbers in the same order.


@dataclass
class Problem:
    x0: np.ndarray
    target: np.ndarray
    noise: np.ndarray
    rng: np.random.Generator = field(repr=False)
    # Steps 0 .. quiet_steps - 1 give zero gradients (no progress yet).
    quiet_steps: int = 0

    def grad(self, x: np.ndarray, t: int) -> np.ndarray:
        if t < self.quiet_steps:
            return np.zeros_like(x)
        return (x - self.target) + self.noise[t]


def problem(seed: int, shape: tuple[int, ...], steps: int) -> Problem:
    rng = np.random.default_rng(seed)
    x0 = rng.standard_normal(shape)
    target = rng.standard_normal(shape)
    noise = 0.1 * rng.standard_normal((steps, *shape))
    return Problem(x0, target, noise, rng)


def relative_difference(
    ours: list[np.ndarray], reference: list[np.ndarray], x0: np.ndarray
) -> float:
    """max_t |ours_t - ref_t| / max_t |ref_t - x0| (Frobenius norms)."""
    moved = max(float(np.linalg.norm(r - x0)) for r in reference)
    gap = max(
        float(np.linalg.norm(a - b)) for a, b in zip(ours, reference, strict=True)
    )
    return gap / moved


@dataclass
class Case:
    """One comparison: an optimizer, a shape and options."""

    optimizer: str
    name: str  # what the table shows: shape and options
    shape: tuple[int, ...]
    options: dict[str, Any]
    reference: Callable[[Problem, int], list[np.ndarray]]
    gradax: Callable[[Problem, int], list[np.ndarray]]
    before: Callable[[Problem, int], list[np.ndarray]] | None = None
    fixture: str | None = None  # the fixture file this case is written to
    seed: int = 0
    source: tuple[str, str, str] = ("", "", "")  # repo, commit, file
    # significant digits a fixture keeps: 17 round-trips float64; fewer
    # where the reference itself is less accurate (keeps fixtures small)
    digits: int = 17
