"""Scion and uScion against LIONS-EPFL/scion's scion.py (torch, float64).

The reference's `Scion` is run as written, one parameter per case, with
its `norm` and `norm_kwargs` set to the oracle gradax names: "spectral"
is `Spectral`, "column" `RowNorm` (normalized), "row" `ColNorm` with
`transpose=True` (an embedding stored (vocab, dim)), "sign" `Sign`
(normalized), "rms" `BiasRMS`; a conv kernel is `SpectralConv`. Its
Newton–Schulz function is `torch.compile`d; the runner rebinds the
module's name to the undecorated function (`__wrapped__`, the same code)
so that the `bfloat16()` cast, made a no-op, leaves it in float64.

The reference's `momentum` is 1 - gradax's `beta`, its `scale` gradax's
radius and `unconstrained` the same flag. It adds 1e-7 to the norm before
Newton–Schulz and 1e-8 to the other norms; gradax has one `eps` (1e-8).
Weights are torch's (fan_out, fan_in), gradax's their transpose; an
embedding is (vocab, dim) in both; a conv kernel is torch's (out, in, h,
w) and gradax's (h, w, in, out) under "auto" dimension numbers.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import gradax

from ._harness import Case, checkout, load
from ._torch_loop import bfloat16_stays_float64, run_torch
from .runners import run_gradax

REPO = "LIONS-EPFL/scion"
FILE = "scion.py"
BETA, RADIUS = 0.9, 2.0

# gradax's oracle name: (the reference's norm, its norm_kwargs, the layout
# from the reference's array to gradax's, and back)
T = (lambda a: a.T, lambda a: a.T)
SAME = (lambda a: a, lambda a: a)
CONV = (
    lambda a: np.transpose(a, (2, 3, 1, 0)),
    lambda a: np.transpose(a, (3, 2, 0, 1)),
)
ORACLES = {
    "spectral": ("Spectral", {}, T),
    "column": ("RowNorm", {"normalized": True}, T),
    "row": ("ColNorm", {"transpose": True}, SAME),
    "sign": ("Sign", {"normalized": True}, T),
    "rms": ("BiasRMS", {}, SAME),
    "conv": ("SpectralConv", {}, CONV),
}
# how a fixture names the layout (tests/optimizers/test_reference_fixtures_muon.py)
LAYOUTS = {
    "spectral": "transpose",
    "column": "transpose",
    "row": "same",
    "sign": "transpose",
    "rms": "same",
    "conv": "conv",
}


def cases(fetch_dir: Path) -> list[Case]:
    co = checkout(fetch_dir, REPO, (FILE,), "ref_scion")
    module = load("ref_scion", "scion")
    ns = module.zeropower_via_newtonschulz5
    module.zeropower_via_newtonschulz5 = getattr(ns, "__wrapped__", ns)

    def reference(oracle, lr, unconstrained):
        norm, kwargs, _ = ORACLES[oracle]

        def make(named):
            return module.Scion(
                [p for _, p in named],
                lr=lr,
                momentum=1 - BETA,
                norm=norm,
                norm_kwargs=kwargs,
                scale=RADIUS,
                unconstrained=unconstrained,
            )

        def run(prob, steps):
            with bfloat16_stays_float64():
                return run_torch(make, prob, steps)

        return run

    def ours(oracle, lr, unconstrained, radius=RADIUS):
        _, _, (layout, back) = ORACLES[oracle]

        def run(prob, steps):
            tx = gradax.scion(
                lr,
                beta=BETA,
                radius=radius,
                unconstrained=unconstrained,
                lmo="spectral" if oracle == "conv" else oracle,
                weight_dimension_numbers="auto",
            )
            return run_gradax(tx, prob, steps, layout=layout, back=back)

        return run

    rows = [
        ("spectral", "tall", (8, 5)),
        ("spectral", "wide", (5, 8)),
        ("spectral", "square", (6, 6)),
        ("column", "hidden", (5, 8)),
        ("row", "embedding", (8, 3)),
        ("sign", "head", (3, 8)),
        ("rms", "1-D", (5,)),
        ("conv", "conv", (4, 3, 3, 3)),
    ]
    out = []
    for oracle, label, shape in rows:
        for lr, unconstrained in ((0.05, False), (0.05, True)):
            name = "uscion" if unconstrained else "scion"
            # SpectralConv scales by sqrt(c_out / c_in) / k^2, gradax's
            # "spectral" by sqrt(fan_out / fan_in) = sqrt(c_out / c_in) / k
            # on the flattened (k k c_in, c_out) matrix: radius / k gives
            # the reference's step ("before": the same radius).
            radius = RADIUS / shape[-1] if oracle == "conv" else RADIUS
            out.append(
                Case(
                    name,
                    f"{oracle}, {label} {'x'.join(map(str, shape))}",
                    shape,
                    dict(
                        learning_rate=lr,
                        beta=BETA,
                        radius=radius,
                        unconstrained=unconstrained,
                        lmo="spectral" if oracle == "conv" else oracle,
                        layout=LAYOUTS[oracle],
                    ),
                    reference(oracle, lr, unconstrained),
                    ours(oracle, lr, unconstrained, radius),
                    before=ours(oracle, lr, unconstrained)
                    if oracle == "conv"
                    else None,
                    fixture="scion_lions_epfl.json",
                    source=(co.repo, co.commit, FILE),
                    digits=9,  # 1e-7 apart at most
                )
            )
    return out
