"""Dion against microsoft/dion's dion/dion_reference.py (torch, float64).

The reference's module function `dion_update` is called directly, one
matrix at a time, with `qr_method="qr"` (Householder QR; its default
"rcqr" draws a random sketch) and no process group. It is
`torch.compile`d; the runner calls it undecorated (`__wrapped__`, the same
code), as the Dion2 and NorMuon runners do: on one development VM
(torch 2.13.0+cpu) the compiled function returned different weights for
the same inputs from call to call, some of them inf or NaN, on wide
matrices (`transpose=True`). Its QR runs in float32
whatever the input dtype, so agreement stops near 1e-7. Weights are torch's
(fan_out, fan_in); gradax's are their transpose.
"""

from __future__ import annotations

from pathlib import Path

import gradax
from gradax.orthogonal.dion import dion_rank

from ._harness import Case, Problem, checkout, load
from .runners import run_gradax

REPO = "microsoft/dion"
FILES = ("dion/dion_reference.py", "dion/opt_utils.py", "dion/scalar_opts.py")
LR, MU, WD = 0.02, 0.95, 0.1


def _rank(shape, fraction):
    fan_out, fan_in = shape
    return dion_rank(fraction, fan_in, fan_out)


def _q0(prob: Problem, shape, fraction, long_side=True):
    """Q0, drawn after the problem's numbers: (long side or fan_in, r)."""
    m, n = shape  # torch layout: (fan_out, fan_in)
    side = m if (long_side and m < n) else n
    return prob.rng.standard_normal((side, _rank(shape, fraction)))


def cases(fetch_dir: Path) -> list[Case]:
    co = checkout(fetch_dir, REPO, FILES, "ref_dion")
    module = load("ref_dion", "dion.dion_reference")
    dion_update = module.dion_update.__wrapped__  # eager: see the docstring
    import torch

    def reference(fraction):
        def run(prob: Problem, steps: int):
            shape = prob.x0.shape
            q = torch.tensor(_q0(prob, shape, fraction))
            x = torch.tensor(prob.x0.copy())
            m = torch.zeros_like(x)
            out = []
            for t in range(steps):
                g = torch.tensor(prob.grad(x.numpy(), t))
                q = dion_update(
                    X=x,
                    G=g,
                    M=m,
                    Q=q,
                    lr=torch.tensor(LR, dtype=torch.float64),
                    mu=torch.tensor(MU, dtype=torch.float64),
                    weight_decay=torch.tensor(WD, dtype=torch.float64),
                    epsilon=1e-8,
                    transpose=shape[0] < shape[1],
                    power_iters=1,
                    qr_method="qr",
                    compressed_all_reduce=False,
                )
                out.append(x.numpy().copy())
            return out

        return run

    def ours(fraction, orientation):
        def run(prob: Problem, steps: int):
            shape = prob.x0.shape
            q0 = _q0(prob, shape, fraction, orientation == "long_side")
            tx = gradax.dion(
                LR, rank=fraction, mu=MU, weight_decay=WD, orientation=orientation
            )
            return run_gradax(
                tx,
                prob,
                steps,
                layout=lambda a: a.T,
                edit_state=lambda s: gradax.tree.set(s, q={"w": q0}),
            )

        return run

    out = []
    for label, shape in (("tall", (8, 5)), ("wide", (5, 8)), ("square", (6, 6))):
        for fraction in (1.0, 0.5):
            out.append(
                Case(
                    "dion",
                    f"{label} {shape[0]}x{shape[1]}, rank {fraction}, wd {WD}",
                    shape,
                    dict(rank=fraction, mu=MU, weight_decay=WD, learning_rate=LR),
                    reference(fraction),
                    ours(fraction, "long_side"),
                    before=ours(fraction, "as_is"),
                    fixture="dion_microsoft.json",
                    # the reference's QR is float32: 10 digits lose nothing
                    digits=10,
                )
            )
    for c in out:
        c.source = (co.repo, co.commit, FILES[0])
    return out
