"""SOAP against nikhilvyas/SOAP's soap.py (torch).

The reference computes its eigenbases in float32 whatever the parameter's
dtype (get_orthogonal_matrix and its QR step cast to float), so agreement
stops near float32's rounding. Its weight decay acts on the already
updated weight (gradax's on the previous one, as AdamW): an O(lr^2 wd)
difference per step. Weights are torch's (out, in); gradax's are their
transpose (SOAP is symmetric in the two sides). Conv kernels are not
compared: the reference gives a 4-D weight one factor per axis, gradax
views it as a matrix.

On a rectangular matrix the first factor of the long side is singular (one
gradient has rank at most the short side), so its null space has no
preferred eigenbasis: each side's eigh picks one (the reference's in
float32, gradax's in float64), and Adam's elementwise division is not
rotation invariant, so the two runs differ by the choice (measured 1e-3 to
1e-1 relative). Only the square and 1-D cases, where the comparison is
well posed, go into the fixture.
"""

from __future__ import annotations

from pathlib import Path

import gradax

from ._harness import Case, checkout, load
from ._torch_loop import run_torch
from .runners import run_gradax

REPO = "nikhilvyas/SOAP"
FILE = "soap.py"
LR, B1, B2, EPS = 0.003, 0.95, 0.95, 1e-8


def cases(fetch_dir: Path) -> list[Case]:
    co = checkout(fetch_dir, REPO, (FILE,), "ref_soap")
    module = load("ref_soap", "soap")

    def reference(wd, freq, normalize):
        def make(named):
            return module.SOAP(
                [p for _, p in named],
                lr=LR,
                betas=(B1, B2),
                eps=EPS,
                weight_decay=wd,
                precondition_frequency=freq,
                normalize_grads=normalize,
            )

        return lambda prob, steps: run_torch(make, prob, steps)

    def ours(wd, freq, normalize, transpose):
        def run(prob, steps):
            tx = gradax.soap(
                LR,
                b1=B1,
                b2=B2,
                eps=EPS,
                weight_decay=wd,
                precondition_frequency=freq,
                normalize_grads=normalize,
            )
            layout = (lambda a: a.T) if transpose else (lambda a: a)
            return run_gradax(tx, prob, steps, layout=layout)

        return run

    out = []
    shapes = (("tall", (6, 4)), ("wide", (4, 6)), ("square", (5, 5)), ("1-D", (5,)))
    for label, shape in shapes:
        for wd, freq, normalize in ((0.0, 10, False), (0.01, 3, True)):
            out.append(
                Case(
                    "soap",
                    f"{label} {'x'.join(map(str, shape))}, wd {wd}, every {freq}"
                    + (", normalize_grads" if normalize else ""),
                    shape,
                    dict(
                        learning_rate=LR,
                        b1=B1,
                        b2=B2,
                        eps=EPS,
                        weight_decay=wd,
                        precondition_frequency=freq,
                        normalize_grads=normalize,
                        transpose=len(shape) == 2,
                    ),
                    reference(wd, freq, normalize),
                    ours(wd, freq, normalize, len(shape) == 2),
                    source=(co.repo, co.commit, FILE),
                    fixture="soap_nikhilvyas.json"
                    if label in ("square", "1-D")
                    else None,
                    digits=10,  # float32 eigenbases: 10 digits lose nothing
                )
            )
    return out
