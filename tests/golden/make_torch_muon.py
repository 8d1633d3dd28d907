"""Write torch_muon.json: torch.optim.Muon trajectories as golden numbers.

Run by hand with torch installed (``pip install torch==2.13.0``):
``python tests/golden/make_torch_muon.py``. The file holds the inputs too (torch
layout, (out, in)), so tests/test_muon.py needs neither torch nor this script.

Two runs per ``adjust_lr_fn``: torch as shipped (Newton–Schulz in bfloat16)
and torch with its Newton–Schulz routine replaced by the same iteration in
float32, which isolates the conventions (momentum, Nesterov, learning-rate
adjustment, weight decay) from bfloat16 rounding.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
import torch.optim._muon as torch_muon

SHAPES = {"a": (6, 10), "b": (12, 4)}  # torch layout: (out, in)
STEPS = 6
LR, WEIGHT_DECAY, MOMENTUM, EPS = 0.02, 0.1, 0.95, 1e-7


def gradient(name: str, step: int, shape: tuple[int, int]) -> np.ndarray:
    rng = np.random.default_rng(1000 * step + ord(name))
    return rng.standard_normal(shape).astype(np.float32)


def initial(name: str, shape: tuple[int, int]) -> np.ndarray:
    rng = np.random.default_rng(ord(name))
    return (0.1 * rng.standard_normal(shape)).astype(np.float32)


def float32_newton_schulz(grad, ns_coefficients, ns_steps, eps):
    a, b, c = ns_coefficients
    x = grad.float()
    wide = x.size(0) <= x.size(1)
    if not wide:
        x = x.T
    x = x / x.norm().clamp(min=eps)
    for _ in range(ns_steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x if wide else x.T


def run(adjust_lr_fn: str | None) -> dict[str, list]:
    params = {
        n: torch.nn.Parameter(torch.tensor(initial(n, s))) for n, s in SHAPES.items()
    }
    opt = torch.optim.Muon(
        list(params.values()),
        lr=LR,
        weight_decay=WEIGHT_DECAY,
        momentum=MOMENTUM,
        nesterov=True,
        eps=EPS,
        adjust_lr_fn=adjust_lr_fn,
    )
    for step in range(STEPS):
        for n, p in params.items():
            p.grad = torch.tensor(gradient(n, step, SHAPES[n]))
        opt.step()
    return {n: p.detach().numpy().tolist() for n, p in params.items()}


def main() -> None:
    out = {
        "steps": STEPS,
        "lr": LR,
        "weight_decay": WEIGHT_DECAY,
        "momentum": MOMENTUM,
        "eps": EPS,
        "torch": torch.__version__,
        "initial": {n: initial(n, s).tolist() for n, s in SHAPES.items()},
        "gradients": [
            {n: gradient(n, step, s).tolist() for n, s in SHAPES.items()}
            for step in range(STEPS)
        ],
        "runs": {},
    }
    shipped = torch_muon._zeropower_via_newtonschulz
    for adjust in (None, "match_rms_adamw"):
        out["runs"][f"{adjust}-bfloat16"] = run(adjust)
        torch_muon._zeropower_via_newtonschulz = float32_newton_schulz
        try:
            out["runs"][f"{adjust}-float32"] = run(adjust)
        finally:
            torch_muon._zeropower_via_newtonschulz = shipped
    path = Path(__file__).with_name("torch_muon.json")
    path.write_text(json.dumps(out))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
