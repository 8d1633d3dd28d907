"""A torch optimizer's side of a comparison, on one named parameter."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ._harness import Problem


def run_torch(
    make: Callable[[Any], Any], prob: Problem, steps: int, name: str = "w"
) -> list[np.ndarray]:
    """Params after each step of the optimizer `make(named_parameters)`
    builds, in float64 (the parameter is float64; so is its state)."""
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
            opt.step()
            out.append(param.detach().numpy().copy())
    finally:
        torch.set_default_dtype(previous)
    return out
