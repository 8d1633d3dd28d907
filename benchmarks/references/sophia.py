"""Sophia against Liuhong99/Sophia's sophia.py (SophiaG) and the timing of
its train_sophiag.py (torch, float64; elementwise, one tensor, no layout
change).

The reference's `SophiaG` is run as written: each step `step(bs=BS)` on
the step's gradient and, after steps k, 2k, ... (the script's
`iter_num % hess_interval == hess_interval - 1` branch, which steps and
then estimates), `update_hessian()`, which averages the square of
whatever gradient the parameter holds. The script puts there the gradient
of a loss on labels sampled from the model; the quadratic has no model,
so both sides use the squared step gradient (gradax: an estimator
`stateless(g -> g * g)`), which isolates the update rule and its timing.

SophiaG's step is clip(m / (rho bs h + 1e-15), -1, 1) with no bias
correction: gradax's `sophia(bias_correction=False, gamma=rho * bs,
clip_threshold=1, hessian_refresh="interval_end", eps=1e-15)`. "before"
is gradax's default, optax's rule (a bias-corrected momentum, the Hessian
refreshed after steps 1, k + 1, ...), with the same gamma.
"""

from __future__ import annotations

from pathlib import Path

import jax

import gradax

from ._harness import Case, checkout, load
from .runners import run_gradax

REPO = "Liuhong99/Sophia"
FILE = "sophia.py"
LR, B1, B2, RHO, BS, EVERY = 0.05, 0.965, 0.99, 0.04, 1000, 3
SHAPES = (("2-D", (6, 4)), ("1-D", (5,)), ("stacked", (2, 3, 4)))


def _squared(updates, params):
    del params
    return jax.tree.map(lambda g: g * g, updates)


def cases(fetch_dir: Path) -> list[Case]:
    co = checkout(fetch_dir, REPO, (FILE,), "ref_sophia")
    module = load("ref_sophia", "sophia")
    import torch

    def reference(wd):
        def run(prob, steps):
            param = torch.nn.Parameter(torch.tensor(prob.x0.copy()))
            opt = module.SophiaG(
                [param], lr=LR, betas=(B1, B2), rho=RHO, weight_decay=wd
            )
            out = []
            for t in range(steps):
                param.grad = torch.tensor(prob.grad(param.detach().numpy(), t))
                opt.step(bs=BS)
                if t % EVERY == EVERY - 1:  # after steps k, 2k, ...
                    opt.update_hessian()
                out.append(param.detach().numpy().copy())
            return out

        return run

    def ours(wd, authors):
        def run(prob, steps):
            options = (
                dict(bias_correction=False, hessian_refresh="interval_end")
                if authors
                else {}
            )
            tx = gradax.sophia(
                LR,
                b1=B1,
                b2=B2,
                eps=1e-15,
                weight_decay=wd,
                gamma=RHO * BS,
                clip_threshold=1.0,
                update_interval=EVERY,
                hessian_diagonal_fn=gradax.stateless(_squared),
                **options,
            )
            return run_gradax(tx, prob, steps)

        return run

    out = []
    for label, shape in SHAPES:
        for wd in (0.0, 0.1):
            out.append(
                Case(
                    "sophia",
                    f"{label} {'x'.join(map(str, shape))}, wd {wd}",
                    shape,
                    dict(
                        learning_rate=LR,
                        b1=B1,
                        b2=B2,
                        eps=1e-15,
                        weight_decay=wd,
                        gamma=RHO * BS,
                        clip_threshold=1.0,
                        update_interval=EVERY,
                        bias_correction=False,
                        hessian_refresh="interval_end",
                    ),
                    reference(wd),
                    ours(wd, True),
                    before=ours(wd, False),
                    source=(co.repo, co.commit, FILE),
                    fixture=None if label == "stacked" else "sophia_liuhong99.json",
                )
            )
    return out
