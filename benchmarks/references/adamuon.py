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
gradax's `consistent_rms=0.2`. Weights are torch's (fan_out, fan_in);
gradax's are their transpose.

On other tensors the reference keeps that scale, 0.2 sqrt(min(shape)
max(shape)) / |g|, with min, max and the norm over the whole tensor; it
equals an RMS of 0.2 only for a matrix. gradax scales each matrix to RMS
`consistent_rms`, as it does for every member of the family (a stack of
layers gets the update each layer would get alone):

- a conv kernel, torch's (out, in, h, w): both orthogonalize it as one
  (out, in h w) matrix (the reference's `g.view(len(g), -1)`; gradax's
  (h, w, in, out) under "auto" is its transpose, up to the order of its
  rows). The reference's RMS is 0.2 sqrt(min max / size), 0.2/3 for
  (4, 3, 3, 3): `consistent_rms` at that value gives its rule exactly
  (2.5e-9; the default is 0.9 to 2.0 off);
- a stack (L, out, in): each matrix is orthogonalized and normalized on
  its own, then the whole stack is scaled to 0.2 sqrt(min max), RMS 0.1
  for (2, 4, 6), the matrices sharing that norm as they come. No option
  gives that; `consistent_rms=0.1` is 3.1e-3 to 4.8e-3 from it, the
  default 0.63 to 1.0. No fixture.
"""

from __future__ import annotations

import math
import types
from pathlib import Path

import numpy as np

import gradax

from ._harness import Case, checkout, load
from ._torch_loop import bfloat16_stays_float64, run_torch
from .runners import run_gradax

REPO = "Chongjie-Si/AdaMuon"
FILE = "gpt2/models/optimizers/adamuon.py"
LR, MU, EPS = 0.02, 0.95, 1e-8
# the reference's layout to gradax's, and back
TRANSPOSE = (lambda a: a.T, lambda a: a.T)
SWAP = (lambda a: np.swapaxes(a, -1, -2), lambda a: np.swapaxes(a, -1, -2))
CONV = (
    lambda a: np.transpose(a, (2, 3, 1, 0)),  # (out, in, h, w) -> (h, w, in, out)
    lambda a: np.transpose(a, (3, 2, 0, 1)),
)


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

    def ours(wd, nesterov, rms=0.2, layout=TRANSPOSE):
        def run(prob, steps):
            tx = gradax.adamuon(
                LR,
                beta=MU,
                beta2=MU,
                eps=EPS,
                weight_decay=wd,
                nesterov=nesterov,
                consistent_rms=rms,
                muon_weight_dimension_numbers="auto",
            )
            return run_gradax(tx, prob, steps, layout=layout[0], back=layout[1])

        return run

    def options(wd, nesterov, **more):
        return dict(
            learning_rate=LR,
            beta=MU,
            beta2=MU,
            eps=EPS,
            weight_decay=wd,
            nesterov=nesterov,
            **more,
        )

    source = (co.repo, co.commit, FILE)
    out = []
    for label, shape in (("tall", (8, 5)), ("wide", (5, 8)), ("square", (6, 6))):
        for wd, nesterov in ((0.0, True), (0.1, True), (0.1, False)):
            out.append(
                Case(
                    "adamuon",
                    f"{label} {shape[0]}x{shape[1]}, wd {wd}"
                    + ("" if nesterov else ", nesterov=False"),
                    shape,
                    options(wd, nesterov),
                    reference(wd, nesterov),
                    ours(wd, nesterov),
                    fixture="adamuon_chongjie_si.json",
                    source=source,
                    digits=9,  # 3e-8 apart: 9 digits lose nothing
                )
            )
    # A conv kernel, torch's (out, in, h, w): one (out, in h w) matrix on
    # both sides, scaled by 0.2 sqrt(min * max) over its four axes there.
    # consistent_rms = 0.2 sqrt(min * max / size) gives that scale; the
    # default (0.2, the matrix's RMS) is the "before".
    shape = (4, 3, 3, 3)
    rms = 0.2 * (min(shape) * max(shape) / math.prod(shape)) ** 0.5
    for wd in (0.0, 0.1):
        out.append(
            Case(
                "adamuon",
                f"conv 4x3x3x3, wd {wd}, consistent_rms 0.2/3",
                shape,
                options(wd, True, consistent_rms=rms, layout="conv"),
                reference(wd, True),
                ours(wd, True, rms, CONV),
                before=ours(wd, True, 0.2, CONV),
                fixture="adamuon_chongjie_si.json",
                source=source,
                digits=9,
            )
        )
    # A stack: the reference orthogonalizes each matrix but scales the
    # whole tensor to 0.2 sqrt(min * max) over its three axes, RMS 0.1 here
    # (the "before": gradax's default, each matrix at RMS 0.2). gradax
    # scales each matrix on its own: consistent_rms = 0.1 (the reference's
    # RMS over the whole stack) is the nearest option, not the same rule
    # (the matrices' shares of the norm differ): no fixture.
    shape = (2, 4, 6)
    rms = 0.2 * (min(shape) * max(shape) / math.prod(shape)) ** 0.5
    for wd in (0.0, 0.1):
        out.append(
            Case(
                "adamuon",
                f"stacked 2x4x6, wd {wd}, consistent_rms 0.1",
                shape,
                options(wd, True, consistent_rms=rms),
                reference(wd, True),
                ours(wd, True, rms, SWAP),
                before=ours(wd, True, 0.2, SWAP),
                source=source,
            )
        )
    return out
