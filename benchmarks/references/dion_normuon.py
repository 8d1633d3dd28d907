"""NorMuon against microsoft/dion's dion/normuon.py (torch, float64).

microsoft/dion ships a NorMuon of its own, beside zichongli5/NorMuon's
(references/normuon.py). The runner builds its `NorMuon` optimizer on one
parameter with no process group and calls its `step` (the single-GPU
path of `normuon_update_megabatch_async`), with its defaults but for the
learning rate and the weight decay: momentum summed (`M = mu M + G`),
Nesterov off, Polar Express (`use_polar_express=True`), epsilon 1e-8,
`adjust_lr="spectral_norm"`, `flatten=False` (a 3-D tensor is a batch of
matrices). Its `torch.compile`d steps are called undecorated
(`__wrapped__`, the same code), and the bfloat16 it casts to for
communication and inside Polar Express is made float64 (the modules'
`torch.bfloat16` and `Tensor.bfloat16()`), as is the float32 tensor it
carries the learning rate in (`_ensure_hyperparam_tensor`, for CUDA
graphs: its `torch.float32`), so its own code runs in float64. (Left in
float32, 0.02 and the adjusted rate lr sqrt(fan_out / fan_in) round to
float32: 9.2e-9 to 5.4e-8 of the trajectories over 20 steps; in float64,
3.1e-15 at most.)
Weights are torch's (..., fan_out, fan_in); gradax's are their transpose
(a stack: its last two axes).

Its rule against gradax's `normuon`:

- per-neuron second moment over fan_in, 1e-8 added to its square root, the
  orthogonalized update's Frobenius norm kept: `consistent_rms=None`;
- `momentum="sum"`, `nesterov=False`, `ns_coeffs="polar_express_fixed5"`
  (its five rows, the norm times 1.02), `eps=1e-8`;
- decoupled weight decay by the unadjusted learning rate, as gradax's;
- the update times sqrt(fan_out / fan_in) ("spectral_norm"):
  `shape_scaling="spectral"` (`consistent_rms=None` alone multiplies by
  sqrt(max(1, fan_out / fan_in)), the same for tall and square matrices;
  on a wide one the reference's step is sqrt(fan_out / fan_in) times that:
  the "without shape_scaling" cases).

"before" is gradax's `normuon` with its defaults (the same learning rate,
weight decay, beta and beta2).
"""

from __future__ import annotations

import types
from pathlib import Path

import gradax

from ._harness import Case, checkout, load
from ._torch_loop import bfloat16_stays_float64, run_torch
from .normuon import swap
from .runners import run_gradax

REPO = "microsoft/dion"
FILES = (
    "dion/normuon.py",
    "dion/muon.py",
    "dion/megabatch_base.py",
    "dion/opt_utils.py",
    "dion/polar_express.py",
    "dion/newton_schulz_triton.py",
    "dion/scalar_opts.py",
)
LR, MU, BETA2, EPS = 0.02, 0.95, 0.95, 1e-8
# gradax's options that give the reference's rules (above)
MATCHING = dict(
    beta=MU,
    beta2=BETA2,
    eps=EPS,
    momentum="sum",
    nesterov=False,
    ns_coeffs="polar_express_fixed5",
    consistent_rms=None,
    shape_scaling="spectral",
)


def _float64_torch(torch):
    """The torch module with `bfloat16` and `float32` standing for float64."""
    proxy = types.SimpleNamespace(**{k: getattr(torch, k) for k in dir(torch)})
    proxy.bfloat16 = torch.float64
    proxy.float32 = torch.float64
    return proxy


def is_wide(shape: tuple[int, ...]) -> bool:
    """fan_out < fan_in (torch's layout): where the shape factors differ."""
    fan_out, fan_in = shape[-2:]
    return fan_out < fan_in


def cases(fetch_dir: Path) -> list[Case]:
    co = checkout(fetch_dir, REPO, FILES, "ref_dion_normuon")
    module = load("ref_dion_normuon", "dion.normuon")
    muon = load("ref_dion_normuon", "dion.muon")
    base = load("ref_dion_normuon", "dion.megabatch_base")
    polar = load("ref_dion_normuon", "dion.polar_express")
    import torch

    for m in (module, muon, base):
        m.torch = _float64_torch(torch)
    for name in (
        "muon_update_pre_orthogonalize",
        "muon_update_post_orthogonalize",
        "normuon_normalization_stacked",
    ):
        setattr(module, name, getattr(module, name).__wrapped__)
    # what `NorMuon.__init__` picks with use_polar_express=True
    base.polar_express = polar.polar_express.__wrapped__

    def reference(wd, nesterov):
        def make(named):
            return module.NorMuon(
                [p for _, p in named],
                lr=LR,
                mu=MU,
                muon_beta2=BETA2,
                weight_decay=wd,
                epsilon=EPS,
                nesterov=nesterov,
            )

        def run(prob, steps):
            with bfloat16_stays_float64():
                return run_torch(make, prob, steps)

        return run

    def ours(**options):
        def run(prob, steps):
            tx = gradax.normuon(muon_weight_dimension_numbers="auto", **options)
            return run_gradax(tx, prob, steps, layout=swap)

        return run

    out = []
    shapes = (
        ("tall", (8, 5)),
        ("wide", (5, 8)),
        ("square", (6, 6)),
        ("stacked", (2, 4, 6)),
        ("stacked", (2, 6, 4)),
    )
    for label, shape in shapes:
        for wd, nesterov in ((0.0, False), (0.1, False), (0.1, True)):
            name = f"{label} {'x'.join(map(str, shape))}, wd {wd}" + (
                ", nesterov" if nesterov else ""
            )
            matching = dict(
                MATCHING, learning_rate=LR, weight_decay=wd, nesterov=nesterov
            )
            before = ours(learning_rate=LR, weight_decay=wd, beta=MU, beta2=BETA2)
            if is_wide(shape):
                # consistent_rms=None's own factor: off by the shape factor
                keller = {k: v for k, v in matching.items() if k != "shape_scaling"}
                out.append(
                    Case(
                        "dion_normuon",
                        name + ", without shape_scaling",
                        shape,
                        keller,
                        reference(wd, nesterov),
                        ours(**keller),
                        before=before,
                        source=(co.repo, co.commit, FILES[0]),
                    )
                )
            out.append(
                Case(
                    "dion_normuon",
                    name,
                    shape,
                    matching,
                    reference(wd, nesterov),
                    ours(**matching),
                    before=before,
                    fixture="normuon_dion_microsoft.json",
                    source=(co.repo, co.commit, FILES[0]),
                    digits=12,
                )
            )
    return out
