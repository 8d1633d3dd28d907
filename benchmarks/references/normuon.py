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

A conv kernel, torch's (out, in, h, w): the reference orthogonalizes it
as one (out, in h w) matrix, as gradax does ((h, w, in, out) under
"auto"), then reshapes it back and runs its normalization on the 4-D
tensor, whose last two axes are the kernel's: one second moment per
(out, in, h) row, averaged over w; the norm kept per (h, w) slice; the
factor sqrt(max(1, h / w)). gradax normalizes per output channel over
(h, w, in), the paper's neurons. 0.24 to 0.33 apart over 20 steps
(the default, 0.27 to 0.38); the reference run on the kernel's (out,
in h w) matrix is 2.9e-8 from gradax. No option gives the 4-D rule: no
fixture.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import gradax

from ._harness import Case, Problem, checkout, load
from ._torch_loop import bfloat16_stays_float64, run_torch
from .runners import run_gradax

REPO = "zichongli5/NorMuon"
FILE = "normuon.py"
LR, MU, BETA2 = 0.02, 0.95, 0.95
EPS = 1e-10


# torch's (out, in, h, w) conv kernel -> gradax's (h, w, in, out), and back
CONV = (
    lambda a: np.transpose(a, (2, 3, 1, 0)),
    lambda a: np.transpose(a, (3, 2, 0, 1)),
)


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

    def ours(wd, consistent_rms, layout=(swap, swap)):
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
            return run_gradax(tx, prob, steps, layout=layout[0], back=layout[1])

        return run

    source = (co.repo, co.commit, FILE)
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
                    source=source,
                )
            )
    # A conv kernel, torch's (out, in, h, w). The reference orthogonalizes
    # it as one (out, in h w) matrix, as gradax does, but then reshapes it
    # back and normalizes the 4-D tensor: its "neurons" are the kernel rows
    # (out, in, h) over w, its norm kept per (h, w) slice, its shape factor
    # sqrt(max(1, h / w)). gradax's neurons are the output channels (over
    # h w in), the paper's. No option gives the reference's rule: no
    # fixture; "before" is gradax's default.
    for wd in (0.0, 0.1):
        out.append(
            Case(
                "normuon",
                f"conv 4x3x3x3, wd {wd}",
                (4, 3, 3, 3),
                dict(
                    learning_rate=LR,
                    beta=MU,
                    beta2=BETA2,
                    eps=EPS,
                    weight_decay=wd,
                    consistent_rms=None,
                ),
                reference(wd),
                ours(wd, None, CONV),
                before=ours(wd, 0.2, CONV),
                source=source,
            )
        )
    # The same kernel with the reference run on its (out, in h w) matrix
    # (the problem's arrays reshaped, the trajectory reshaped back): what
    # is left is only the 4-D normalization above.
    out.append(
        Case(
            "normuon",
            "conv 4x3x3x3, wd 0.1, the reference on the (4, 27) matrix",
            (4, 3, 3, 3),
            dict(
                learning_rate=LR,
                beta=MU,
                beta2=BETA2,
                eps=EPS,
                weight_decay=0.1,
                consistent_rms=None,
            ),
            flattened(reference(0.1)),
            ours(0.1, None, CONV),
            source=source,
        )
    )
    return out


def flattened(run):
    """`run` on the problem's arrays as (out, rest) matrices, its
    trajectory reshaped back to the problem's shape."""

    def flat(prob, steps):
        shape = prob.x0.shape
        matrix = Problem(
            prob.x0.reshape(shape[0], -1),
            prob.target.reshape(shape[0], -1),
            prob.noise.reshape(steps, shape[0], -1),
            prob.rng,
        )
        return [x.reshape(shape) for x in run(matrix, steps)]

    return flat
