"""Adam-mini against zyushun/Adam-mini v1.1.1 (adam_mini/adam_mini.py, torch).

The reference picks each parameter's blocks by its name: embeddings
("embed", "embd", "wte") and output layers one rate per row of torch's
weight (per token), queries and keys one per head, values, attention
outputs and MLPs one per output neuron, biases plain Adam, anything else
one per tensor. Each case is one named parameter; gradax's leaf gets a name
its default partition reads the same way, or the label that expresses it.
Weights are torch's (out, in); gradax's matrices other than embeddings are
their transpose.
"""

from __future__ import annotations

from pathlib import Path

import gradax

from ._harness import Case, checkout, load
from ._torch_loop import run_torch
from .runners import run_gradax

REPO = "zyushun/Adam-mini"
FILE = "adam_mini/adam_mini.py"
LR, B1, B2, EPS = 0.01, 0.9, 0.95, 1e-8
DIM, HEADS = 4, 2


def cases(fetch_dir: Path) -> list[Case]:
    co = checkout(fetch_dir, REPO, (FILE,), "ref_adam_mini")
    module = load("ref_adam_mini", "adam_mini.adam_mini")

    def reference(torch_name, wd):
        def make(named):
            return module.Adam_mini(
                named,
                lr=LR,
                betas=(B1, B2),
                eps=EPS,
                weight_decay=wd,
                dim=DIM,
                n_heads=HEADS,
                verbose=False,
            )

        return lambda prob, steps: run_torch(make, prob, steps, torch_name)

    def ours(key, wd, transpose, partition=None):
        def run(prob, steps):
            tx = gradax.adam_mini(
                LR, b1=B1, b2=B2, eps=EPS, weight_decay=wd, partition=partition
            )
            layout = (lambda a: a.T) if transpose else (lambda a: a)
            return run_gradax(tx, prob, steps, layout=layout, key=key)

        return run

    table = [
        # name, torch name, gradax key, shape (torch), wd, transpose, label, before
        ("embedding", "wte.weight", "wte", (10, 4), 0.1, False, None, "neuron"),
        ("MLP matrix", "mlp.c_fc.weight", "mlp", (6, 4), 0.1, True, None, None),
        ("query heads", "q_proj.weight", "q", (DIM, DIM), 0.1, True, HEADS, None),
        ("bias", "mlp.bias", "bias", (6,), 0.0, False, None, "tensor"),
        ("norm scale", "ln_1.weight", "ln", (6,), 0.0, False, None, None),
    ]
    out = []
    for label, torch_name, key, shape, wd, transpose, given, before in table:
        partition = None if given is None else {key: given}
        out.append(
            Case(
                "adam_mini",
                f"{label} {'x'.join(map(str, shape))} ({torch_name}), wd {wd}",
                shape,
                dict(
                    learning_rate=LR,
                    b1=B1,
                    b2=B2,
                    eps=EPS,
                    weight_decay=wd,
                    key=key,
                    transpose=transpose,
                    partition=given,
                ),
                reference(torch_name, wd),
                ours(key, wd, transpose, partition),
                before=None
                if before is None
                else ours(key, wd, transpose, {key: before}),
                fixture="adam_mini_zyushun.json",
                source=(co.repo, co.commit, FILE),
            )
        )
    return out
