"""Cautious AdamW and Lion against kyleliang919/C-Optim (c_adamw.py, c_lion.py).

torch, float64. C-AdamW keeps the kept entries scaled by 1/max(mean, 1e-3)
(gradax's `mask_scale="mean"`, adamw's rule); C-Lion by numel/(sum + 1)
(gradax's `mask_scale="numel"`, lion's default since issue 36).
"""

from __future__ import annotations

from pathlib import Path

import gradax

from ._harness import Case, checkout, load
from ._torch_loop import run_torch
from .runners import run_gradax

REPO = "kyleliang919/C-Optim"
FILES = ("c_adamw.py", "c_lion.py", "opt_utils.py")
LR, WD = 0.01, 0.1


def cases(fetch_dir: Path) -> list[Case]:
    co = checkout(fetch_dir, REPO, FILES, "ref_c_optim")
    c_adamw = load("ref_c_optim", "c_adamw")
    c_lion = load("ref_c_optim", "c_lion")

    def adamw_ref(prob, steps):
        def make(named):
            return c_adamw.AdamW(
                [p for _, p in named],
                lr=LR,
                betas=(0.9, 0.95),
                eps=1e-8,
                weight_decay=WD,
                no_deprecation_warning=True,
                # The per-parameter loop: the default foreach path runs a
                # torch.compile'd generator that torch 2.13 cannot trace.
                foreach=False,
            )

        return run_torch(make, prob, steps)

    def lion_ref(prob, steps):
        def make(named):
            return c_lion.Lion(
                [p for _, p in named], lr=LR, betas=(0.9, 0.99), weight_decay=WD
            )

        return run_torch(make, prob, steps)

    def adamw_ours(prob, steps):
        tx = gradax.adamw(LR, b1=0.9, b2=0.95, eps=1e-8, weight_decay=WD, cautious=True)
        return run_gradax(tx, prob, steps)

    def lion_ours(mask_scale):
        def run(prob, steps):
            tx = gradax.lion(
                LR,
                b1=0.9,
                b2=0.99,
                weight_decay=WD,
                cautious=True,
                mask_scale=mask_scale,
            )
            return run_gradax(tx, prob, steps)

        return run

    out = []
    for shape in ((6, 4), (5,), (2, 3, 4)):
        size = "x".join(map(str, shape))
        out.append(
            Case(
                "adamw(cautious=True)",
                f"{size}, wd {WD}",
                shape,
                dict(learning_rate=LR, b1=0.9, b2=0.95, eps=1e-8, weight_decay=WD),
                adamw_ref,
                adamw_ours,
                fixture="cautious_c_optim.json",
                source=(co.repo, co.commit, FILES[0]),
            )
        )
        out.append(
            Case(
                "lion(cautious=True)",
                f"{size}, wd {WD}",
                shape,
                dict(learning_rate=LR, b1=0.9, b2=0.99, weight_decay=WD),
                lion_ref,
                lion_ours("numel"),
                before=lion_ours("mean"),
                fixture="cautious_c_optim_lion.json",
                source=(co.repo, co.commit, FILES[1]),
            )
        )
    return out
