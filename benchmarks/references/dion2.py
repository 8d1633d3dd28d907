"""Dion2 against microsoft/dion's dion/dion2.py (torch, float64).

The reference's own update, `dion2_update_megabatch_async`, is driven for
one matrix with no process group (its single-GPU path: the momentum sum,
the top-k selection by L1 norm along the shorter side, error feedback,
its default `polar_express` orthogonalization and the "spectral_norm"
learning-rate adjustment sqrt(fan_out / fan_in)). Its `torch.compile`d
steps are called undecorated (`__wrapped__`, the same code), and the
bfloat16 it casts to for communication and inside Polar Express is made
float64 (the modules' `torch.bfloat16` and `Tensor.bfloat16()`), so its
own code runs in float64. Weights are torch's (..., fan_out, fan_in);
gradax's are their transpose (a stack: its last two axes; the reference
treats a 3-D tensor as a batch of matrices with `flatten=False`).

"before" is gradax's `ns_coeffs="polar_express"` (its own computed table,
safety 1.01), the default before issue 36.
"""

from __future__ import annotations

import types
from pathlib import Path

import gradax

from ._harness import Case, checkout, load
from ._torch_loop import bfloat16_stays_float64
from .normuon import swap
from .runners import run_gradax

REPO = "microsoft/dion"
FILES = (
    "dion/dion2.py",
    "dion/megabatch_base.py",
    "dion/opt_utils.py",
    "dion/polar_express.py",
    "dion/newton_schulz_triton.py",
    "dion/scalar_opts.py",
)
LR, EPS = 0.02, 1e-8


def _float64_torch(torch):
    """The torch module with `bfloat16` standing for float64."""
    proxy = types.SimpleNamespace(**{k: getattr(torch, k) for k in dir(torch)})
    proxy.bfloat16 = torch.float64
    return proxy


def cases(fetch_dir: Path) -> list[Case]:
    co = checkout(fetch_dir, REPO, FILES, "ref_dion2")
    module = load("ref_dion2", "dion.dion2")
    base = load("ref_dion2", "dion.megabatch_base")
    polar = load("ref_dion2", "dion.polar_express")
    import torch

    for m in (module, base):
        m.torch = _float64_torch(torch)
    for name in ("dion2_pre_orthogonalize", "dion2_post_orthogonalize"):
        setattr(module, name, getattr(module, name).__wrapped__)
    newton_schulz = polar.polar_express.__wrapped__

    def reference(fraction, ef_decay, wd):
        def run(prob, steps):
            x = torch.tensor(prob.x0.copy())
            m = torch.zeros_like(x)
            out = []
            with bfloat16_stays_float64():
                for t in range(steps):
                    g = torch.tensor(prob.grad(x.numpy(), t))
                    task = module.dion2_update_megabatch_async(
                        X=[x],
                        G=[g],
                        M=[m],
                        lr=torch.tensor(LR, dtype=torch.float64),
                        ef_decay=torch.tensor(ef_decay, dtype=torch.float64),
                        fraction=fraction,
                        weight_decay=torch.tensor(wd, dtype=torch.float64),
                        epsilon=torch.tensor(EPS, dtype=torch.float64),
                        flatten=False,
                        adjust_lr="spectral_norm",
                        device_rank=0,
                        world_size=1,
                        process_group=None,
                        newton_schulz_func=newton_schulz,
                    )
                    for _ in task:  # no communication to wait for
                        pass
                    out.append(x.numpy().copy())
            return out

        return run

    def ours(fraction, ef_decay, wd, ns_coeffs):
        def run(prob, steps):
            tx = gradax.dion2(
                LR,
                fraction=fraction,
                ef_decay=ef_decay,
                eps=EPS,
                weight_decay=wd,
                ns_coeffs=ns_coeffs,
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
        for fraction, ef_decay, wd in (
            (0.25, 0.95, 0.0),
            (0.5, 0.9, 0.1),
            (1.0, 0.95, 0.1),
        ):
            out.append(
                Case(
                    "dion2",
                    f"{label} {'x'.join(map(str, shape))}, fraction {fraction}, "
                    f"ef_decay {ef_decay}, wd {wd}",
                    shape,
                    dict(
                        learning_rate=LR,
                        fraction=fraction,
                        ef_decay=ef_decay,
                        eps=EPS,
                        weight_decay=wd,
                    ),
                    reference(fraction, ef_decay, wd),
                    ours(fraction, ef_decay, wd, "polar_express_fixed5"),
                    before=ours(fraction, ef_decay, wd, "polar_express"),
                    fixture="dion2_microsoft.json",
                    source=(co.repo, co.commit, FILES[0]),
                    digits=12,
                )
            )
    return out
