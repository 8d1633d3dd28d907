"""gradax's optimizers against their authors' published code: a reference suite.

Where ``optax_suite.py`` checks the optimizers optax has against optax, this
script checks the ones optax lacks against the code their authors published:
the reference module is archived from a ``fetch`` snapshot into a scratch
folder at run time and imported from there (no reference code is kept in this
repository), then run against gradax from the same initial parameters on the
same gradients, in float64 where the reference allows, for ``--steps``
updates (20 by default).

The problem is a perturbed quadratic: with ``rng =
numpy.random.default_rng(seed)``, ``x0``, ``target`` and ``noise`` (one per
step, scale 0.1) are drawn in that order and ``g_t = (x_t - target) +
noise_t``; what a reference draws itself (Dion's Q0) is drawn next from the
same generator and handed to both. Each case is a shape (2-D tall, wide and
square; 1-D; stacked; conv kernels) and the options users set (weight
decay, rank, the partition).

What it reports
  One row per case: the optimizer, the case, the reference (repository,
  commit, file), and the maximum over the steps of ``|x_gradax - x_ref|``
  relative to the maximum of ``|x_ref - x0|`` (how far the reference moved;
  Frobenius norms). "before" is the same number for gradax's behaviour
  before issue 36 where that changed (Dion's ``orientation="as_is"``;
  Adam-mini's partition without the ``"rows"`` label and the bias rule;
  cautious Lion's ``mask_scale="mean"``; Dion2's ``ns_coeffs=
  "polar_express"``), or for gradax's default where the reference needs
  an option (NorMuon's ``consistent_rms=0.2``; microsoft/dion's NorMuon
  against ``normuon``'s defaults; AdaMuon's ``consistent_rms`` on a conv
  kernel or a stack; Scion's radius on a conv kernel).

Fixtures
  ``--write-fixtures`` writes each reference's trajectory to a small JSON
  file under tests/optimizers/fixtures/ (the repository, commit and file,
  the seed and how the inputs are drawn, the options, and the reference's
  parameters after a few of the steps), which CI tests compare gradax
  against without the network (tests/optimizers/test_reference_fixtures.py,
  test_reference_fixtures_muon.py for the Muon family).

Checkouts
  ``--fetch-dir`` takes the git snapshots the ``fetch`` tool makes
  (``<dir>/<owner>+<name>/repo``). Fetch ``github:<owner>/<name>`` for::

    microsoft/dion  zyushun/Adam-mini  kyleliang919/C-Optim  nikhilvyas/SOAP
    iShohei220/adopt  konstmish/prodigy  apple/ml-ademamix
    facebookresearch/schedule_free  AGI-Arena/MARS  zichongli5/NorMuon
    Chongjie-Si/AdaMuon  LIONS-EPFL/scion  Liuhong99/Sophia
    MoonshotAI/Moonlight  mlcommons/algorithmic-efficiency

  torch (CPU) runs the references. Each module under references/ says how
  it calls its reference and why a number stops where it does (a float32
  QR or eigh inside the reference; a documented departure). Where a
  reference hard-codes bfloat16 (the Muon family's Newton–Schulz), the
  cast is made a no-op so that its own code runs in float64.

  QK-Clip has no published code (MoonshotAI/Kimi-K2 holds the report and
  deployment scripts): its reference is the Kimi K2 report's rule, written
  out in references/muon_clip.py (multi-head attention) and
  references/muon_clip_mla.py (MLA, as K2), after Moonlight's Muon (the
  authors' code).

  Shampoo's home, google-research/google-research, is over fetch's size
  limit (1.1 GB); mlcommons/algorithmic-efficiency ships a copy of its
  distributed_shampoo.py, run with ``python -O`` (references/shampoo.py
  says why).

PSGD Kron
  runs apart, as its problem and probe vectors differ from the quadratic
  here: ``python benchmarks/references/kron_current.py`` (psgd_jax's
  newest kron.py, be95524) writes the fixture tests/optimizers/test_kron.py
  compares against; the 39d4620 fixture beside it is the older kron.py.

Usage::

    python -O benchmarks/reference_suite.py --fetch-dir /work/.mirror
    python benchmarks/reference_suite.py --fetch-dir DIR --only dion --write-fixtures
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from references import (  # noqa: E402
    adam_mini,
    adamuon,
    adaptive,
    cautious,
    dion,
    dion2,
    dion_normuon,
    muon_clip,
    muon_clip_mla,
    normuon,
    scion,
    shampoo,
    soap,
    sophia,
)
from references._harness import Case, problem, relative_difference  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "optimizers" / "fixtures"
MODULES = {
    "dion": dion,
    "adam_mini": adam_mini,
    "cautious": cautious,
    "soap": soap,
    "adaptive": adaptive,
    "normuon": normuon,
    "dion_normuon": dion_normuon,
    "adamuon": adamuon,
    "scion": scion,
    "dion2": dion2,
    "sophia": sophia,
    "muon_clip": muon_clip,
    "muon_clip_mla": muon_clip_mla,
    "shampoo": shampoo,
}
# The steps a fixture keeps (of --steps): enough to see a drift, a few kB.
KEPT = (5, 20)
HOW = (
    "rng = numpy.random.default_rng(seed); x0 = rng.standard_normal(shape); "
    "target = rng.standard_normal(shape); noise = 0.1 * "
    "rng.standard_normal((steps, *shape)); then what the case draws (q0); "
    "g_t = (x_t - target) + noise_t in the reference's layout (torch: "
    "(fan_out, fan_in)); x after step t at the kept steps"
)


def run_case(case: Case, steps: int) -> dict:
    ref = case.reference(problem(case.seed, case.shape, steps), steps)
    x0 = problem(case.seed, case.shape, steps).x0
    ours = case.gradax(problem(case.seed, case.shape, steps), steps)
    row = {
        "optimizer": case.optimizer,
        "case": case.name,
        "after": relative_difference(ours, ref, x0),
        "before": None,
        "trajectory": ref,
    }
    if case.before is not None:
        before = case.before(problem(case.seed, case.shape, steps), steps)
        row["before"] = relative_difference(before, ref, x0)
    return row


def _rounded(x: np.ndarray, digits: int) -> list:
    """`x` as nested lists of floats with `digits` significant digits."""
    return np.vectorize(lambda v: float(f"{v:.{digits}g}"))(x).tolist()


def write_fixtures(cases: list[Case], rows: list[dict], steps: int) -> None:
    """One JSON file per fixture name. The reference (repository, commit,
    file) is the file's where all its cases share it, else each case's."""
    files: dict[str, dict] = {}
    for case, row in zip(cases, rows, strict=True):
        if case.fixture is None:
            continue
        repo, commit, path = case.source
        entry = files.setdefault(
            case.fixture,
            {
                "how": HOW,
                "steps": steps,
                "kept_steps": [k for k in KEPT if k <= steps],
                "cases": [],
            },
        )
        entry["cases"].append(
            {
                "optimizer": case.optimizer,
                "name": case.name,
                "reference": f"github.com/{repo}",
                "commit": commit,
                "file": path,
                "seed": case.seed,
                "shape": list(case.shape),
                "options": case.options,
                "x": [
                    _rounded(row["trajectory"][k - 1], case.digits)
                    for k in entry["kept_steps"]
                ],
            }
        )
    for name, content in files.items():
        shared = ("reference", "commit", "file")
        sources = {tuple(c[k] for k in shared) for c in content["cases"]}
        if len(sources) == 1:
            content = {**dict(zip(shared, sources.pop(), strict=True)), **content}
            for c in content["cases"]:
                for k in shared:
                    del c[k]
        path = FIXTURES / name
        path.write_text(json.dumps(content, separators=(",", ":")) + "\n")
        print(f"wrote {path} ({path.stat().st_size} bytes)")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--fetch-dir", type=Path, required=True)
    parser.add_argument("--only", help="comma-separated: " + ", ".join(MODULES))
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--write-fixtures", action="store_true")
    args = parser.parse_args()
    names = args.only.split(",") if args.only else list(MODULES)
    cases = [c for n in names for c in MODULES[n].cases(args.fetch_dir)]
    rows = [run_case(c, args.steps) for c in cases]
    print("| optimizer | case | reference (commit) | before | after |")
    print("|---|---|---|---|---|")
    for case, row in zip(cases, rows, strict=True):
        repo, commit, path = case.source
        before = "" if row["before"] is None else f"{row['before']:.1e}"
        print(
            f"| {row['optimizer']} | {row['case']} | {repo} {path} ({commit[:7]}) "
            f"| {before} | {row['after']:.1e} |"
        )
    if args.write_fixtures:
        write_fixtures(cases, rows, args.steps)


if __name__ == "__main__":
    main()
