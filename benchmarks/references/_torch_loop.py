"""A torch optimizer's side of a comparison, on one named parameter."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import numpy as np

from ._harness import Problem


def run_torch(
    make: Callable[[Any], Any],
    prob: Problem,
    steps: int,
    name: str = "w",
    lr_at: Callable[[int], float] | None = None,
) -> list[np.ndarray]:
    """Params after each step of the optimizer `make(named_parameters)`
    builds, in float64 (the parameter is float64; so is its state).
    `lr_at(t)`, when given, is every group's learning rate at step t (a
    schedule, set as torch's schedulers set it)."""
    import torch

    # Buffers a reference makes with torch.zeros(shape) (SOAP's factors)
    # take the default dtype: float64 for the run.
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        param = torch.nn.Parameter(torch.tensor(prob.x0.copy(), dtype=torch.float64))
        opt = make([(name, param)])
        out = []
        for t in range(steps):
            param.grad = torch.tensor(prob.grad(param.detach().numpy(), t))
            if lr_at is not None:
                for group in opt.param_groups:
                    group["lr"] = lr_at(t)
            opt.step()
            out.append(param.detach().numpy().copy())
    finally:
        torch.set_default_dtype(previous)
    return out


@contextlib.contextmanager
def bfloat16_stays_float64():
    """Make `Tensor.bfloat16()` return its input unchanged for a while.

    The Muon-family references (NorMuon, AdaMuon, Scion) cast to bfloat16
    inside their Newton–Schulz function (``X = G.bfloat16()``), which no
    argument turns off. With this cast a no-op, their own code runs in
    float64, and the comparison measures the algorithm, not bfloat16's
    8-bit mantissa.
    """
    import torch

    original = torch.Tensor.bfloat16
    torch.Tensor.bfloat16 = lambda self, *args, **kwargs: self
    try:
        yield
    finally:
        torch.Tensor.bfloat16 = original
