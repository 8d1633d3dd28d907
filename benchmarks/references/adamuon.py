"""AdaMuon against Chongjie-Si/AdaMuon's gpt2/models/optimizers/adamuon.py.

torch, float64. The reference's `AdaMuon.__init__` allocates its
all-gather buffer in bfloat16 on "cuda"; the runner builds the object with
torch's `Optimizer.__init__` and a float64 CPU buffer instead, and gives the
module a one-process `dist` whose all-gather copies the update into the
buffer. The update itself is the reference's `step`, run as written,
with the `bfloat16()` cast of its Newton–Schulz made a no-op.

The reference decays its second moment with `momentum` (gradax's `beta2`,
set equal here), adds 1e-7 to the norm before Newton–Schulz (gradax: `eps`,
1e-8) and rescales to 0.2 sqrt(min(shape) max(shape)) / (|g| + eps):
gradax's `consistent_rms=0.2`. Only 2-D weights: for a stack or a conv
kernel the reference's scale takes min and max over all of the tensor's
axes, not the matrix's. Weights are torch's (fan_out, fan_in); gradax's
are their transpose.
"""

from __future__ import annotations

import types
from pathlib import Path

import gradax

from ._harness import Case, checkout, load
from ._torch_loop import bfloat16_stays_float64, run_torch
from .runners import run_gradax

REPO = "Chongjie-Si/AdaMuon"
FILE = "gpt2/models/optimizers/adamuon.py"
LR, MU, EPS = 0.02, 0.95, 1e-8


class _Handle:
    def wait(self):
        return None


def _one_process_all_gather(out, tensor, async_op=False):
    """torch.distributed.all_gather_into_tensor with a world of one."""
    out[0].copy_(tensor)
    return _Handle()


def cases(fetch_dir: Path) -> list[Case]:
    co = checkout(fetch_dir, REPO, (FILE,), "ref_adamuon")
    module = load("ref_adamuon", FILE[:-3].replace("/", "."))
    module.dist = types.SimpleNamespace(all_gather_into_tensor=_one_process_all_gather)
    import torch

    def reference(wd, nesterov):
        def make(named):
            params = [p for _, p in named]
            opt = module.AdaMuon.__new__(module.AdaMuon)
            opt.rank, opt.world_size = 0, 1
            buf = torch.empty(1, params[0].numel(), dtype=torch.float64)
            defaults = dict(
                lr=LR,
                weight_decay=wd,
                momentum=MU,
                nesterov=nesterov,
                ns_steps=5,
                eps=EPS,
            )
            group = dict(params=params, update_buffer=buf, update_buffer_views=[buf[0]])
            torch.optim.Optimizer.__init__(opt, [group], defaults)
            return opt

        def run(prob, steps):
            with bfloat16_stays_float64():
                return run_torch(make, prob, steps)

        return run

    def ours(wd, nesterov):
        def run(prob, steps):
            tx = gradax.adamuon(
                LR,
                beta=MU,
                beta2=MU,
                eps=EPS,
                weight_decay=wd,
                nesterov=nesterov,
            )
            return run_gradax(tx, prob, steps, layout=lambda a: a.T)

        return run

    out = []
    for label, shape in (("tall", (8, 5)), ("wide", (5, 8)), ("square", (6, 6))):
        for wd, nesterov in ((0.0, True), (0.1, True), (0.1, False)):
            out.append(
                Case(
                    "adamuon",
                    f"{label} {shape[0]}x{shape[1]}, wd {wd}"
                    + ("" if nesterov else ", nesterov=False"),
                    shape,
                    dict(
                        learning_rate=LR,
                        beta=MU,
                        beta2=MU,
                        eps=EPS,
                        weight_decay=wd,
                        nesterov=nesterov,
                    ),
                    reference(wd, nesterov),
                    ours(wd, nesterov),
                    fixture="adamuon_chongjie_si.json",
                    source=(co.repo, co.commit, FILE),
                    digits=9,  # 3e-8 apart: 9 digits lose nothing
                )
            )
    return out
