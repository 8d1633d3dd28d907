"""NorMuon against zichongli5/NorMuon's normuon.py (torch, float64).

The reference's `SingleDeviceNorMuon` runs one matrix (or a stack of
them: its Newton–Schulz and its per-row moment act on the last two axes),
with the `bfloat16()` cast of its Newton–Schulz made a no-op so that its
own code runs in float64. Its update keeps the orthogonalized matrix's
Frobenius norm after the per-neuron normalization and multiplies by
sqrt(max(1, fan_out / fan_in)): gradax's `consistent_rms=None`. gradax's
default, `consistent_rms=0.2` (the paper's Algorithm 1: an update of RMS
0.2), is the "before" column's comparison against the same code. Weights
are torch's (fan_out, fan_in); gradax's are their transpose (the last two
axes of a stack).

The reference adds 1e-7 to the norm before Newton–Schulz and 1e-10 to
sqrt(v) and to the rescaling norm; gradax has one `eps` for all three.
With `eps=1e-10` the denominators differ by 1e-7 relative to a norm of
order 1 (the Newton–Schulz input's, whose scale the five unconverged
steps carry through): measured differences are reported below.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import gradax

from ._harness import Case, checkout, load
from ._torch_loop import bfloat16_stays_float64, run_torch
from .runners import run_gradax

REPO = "zichongli5/NorMuon"
FILE = "normuon.py"
LR, MU, BETA2 = 0.02, 0.95, 0.95
EPS = 1e-10


def swap(a: np.ndarray) -> np.ndarray:
    """torch's (..., fan_out, fan_in) <-> gradax's (..., fan_in, fan_out)."""
    return np.swapaxes(a, -1, -2)


def cases(fetch_dir: Path) -> list[Case]:
    co = checkout(fetch_dir, REPO, (FILE,), "ref_normuon")
    module = load("ref_normuon", "normuon")

    def reference(wd):
        def make(named):
            return module.SingleDeviceNorMuon(
                [p for _, p in named], lr=LR, weight_decay=wd, momentum=MU, beta2=BETA2
            )

        def run(prob, steps):
            with bfloat16_stays_float64():
                return run_torch(make, prob, steps)

        return run

    def ours(wd, consistent_rms):
        def run(prob, steps):
            tx = gradax.normuon(
                LR,
                beta=MU,
                beta2=BETA2,
                eps=EPS,
                weight_decay=wd,
                consistent_rms=consistent_rms,
                muon_weight_dimension_numbers="auto",
            )
            return run_gradax(tx, prob, steps, layout=swap)

        return run

    out = []
    shapes = (
        ("tall", (8, 5)),
        ("wide", (5, 8)),
        ("square", (6, 6)),
        ("stacked", (2, 4, 6)),
    )
    for label, shape in shapes:
        for wd in (0.0, 0.1):
            out.append(
                Case(
                    "normuon",
                    f"{label} {'x'.join(map(str, shape))}, wd {wd}",
                    shape,
                    dict(
                        learning_rate=LR,
                        beta=MU,
                        beta2=BETA2,
                        eps=EPS,
                        weight_decay=wd,
                        consistent_rms=None,
                    ),
                    reference(wd),
                    ours(wd, None),
                    before=ours(wd, 0.2),
                    fixture="normuon_zichongli5.json",
                    digits=9,  # 8e-8 apart: 9 digits lose nothing
                    source=(co.repo, co.commit, FILE),
                )
            )
    return out
