"""MuonClip: Moonlight's Muon (MoonshotAI/Moonlight examples/toy_train.py)
followed by QK-Clip as the Kimi K2 report writes it (arXiv:2507.20534,
Algorithm 1), against `gradax.muon` and `gradax.qk_clip` (torch, float64).

Moonshot publishes no QK-Clip code (MoonshotAI/Kimi-K2 holds the report
and deployment scripts; Moonlight predates QK-Clip), so the clip's
reference is the report's rule, written out below from its text: for each
head h whose maximum logit S_h = max_ij q_i^h . k_j^h / sqrt(d_head) over
the batch exceeds tau, with gamma_h = tau / S_h, W_q^h and W_k^h are
multiplied by sqrt(gamma_h) (multi-head attention, the report's balanced
split) after the optimizer step. The optimizer step is the authors' code:
toy_train.py's `Muon`, imported with stand-ins for the training script's
imports (loguru, datasets, transformers, tqdm, which the optimizer does
not use) and its `bfloat16()` made a no-op so that it runs in float64.

The problem: W_q and W_k are the two matrices of one (2, H * d_head,
d_model) parameter of the suite's quadratic, each in torch's (out, in)
layout (gradax's is the transpose); the batch X (n, d_model) is drawn next
from the same generator (scaled by 0.5), and tau is 0.8 times the largest
head's logit at x0, so that the clip fires on the first step and again
where the quadratic pulls a head's logits up.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import math
import sys
import types
from pathlib import Path

import jax.numpy as jnp
import numpy as np

import gradax

from ._harness import Case, Problem, checkout, load
from ._torch_loop import bfloat16_stays_float64

REPO = "MoonshotAI/Moonlight"
FILE = "examples/toy_train.py"
LR, MU, TOKENS, SCALE = 0.1, 0.95, 6, 0.5
# tau is this fraction of the largest head's logit at x0: the clip fires on
# the first step, and again where the quadratic pulls a head's logits up.
TAU_FACTOR = 0.8


def _stand_in(name: str) -> types.ModuleType:
    """An importable module whose every attribute is None."""
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    module.__getattr__ = lambda attr: None  # PEP 562
    return module


def _load_optimizer():
    """toy_train.py, with stand-ins for its training-script imports while it
    loads (removed again: torch looks real modules up by name)."""
    import torch  # noqa: F401  (first: torch._dynamo walks sys.modules)

    names = ("loguru", "datasets", "transformers", "tqdm")
    missing = [n for n in names if importlib.util.find_spec(n) is None]
    for name in missing:
        sys.modules[name] = _stand_in(name)
    try:
        return load("ref_moonlight", FILE[:-3].replace("/", "."))
    finally:
        for name in missing:
            del sys.modules[name]


def max_logits(w_q, w_k, x, heads):
    """S_h for torch-layout (H d_head, d_model) weights and inputs x."""
    d_head = w_q.shape[0] // heads
    q = (x @ w_q.T).reshape(len(x), heads, d_head)
    k = (x @ w_k.T).reshape(len(x), heads, d_head)
    logits = np.einsum("ihd,jhd->hij", q, k) / math.sqrt(d_head)
    return logits.reshape(heads, -1).max(axis=1)


def k2_qk_clip(w_q, w_k, s, tau, heads):
    """The K2 report's rule for multi-head attention (torch layout, numpy)."""
    d_head = w_q.shape[0] // heads
    w_q, w_k = w_q.copy(), w_k.copy()
    for h in range(heads):
        if s[h] > tau:
            root = math.sqrt(tau / s[h])
            rows = slice(h * d_head, (h + 1) * d_head)
            w_q[rows] *= root
            w_k[rows] *= root
    return w_q, w_k


def inputs_and_tau(prob: Problem, heads: int) -> tuple[np.ndarray, float]:
    """The batch X (drawn after the problem's numbers) and tau."""
    x = SCALE * prob.rng.standard_normal((TOKENS, prob.x0.shape[-1]))
    return x, TAU_FACTOR * float(max_logits(prob.x0[0], prob.x0[1], x, heads).max())


def cases(fetch_dir: Path) -> list[Case]:
    co = checkout(fetch_dir, REPO, (FILE,), "ref_moonlight")
    module = _load_optimizer()
    import torch

    def reference(heads, wd, clip):
        def run(prob: Problem, steps: int):
            x, tau = inputs_and_tau(prob, heads)
            w = [torch.nn.Parameter(torch.tensor(a.copy())) for a in prob.x0]
            opt = module.Muon(lr=LR, wd=wd, muon_params=w, momentum=MU)
            out = []
            with bfloat16_stays_float64():
                for t in range(steps):
                    now = np.stack([p.detach().numpy() for p in w])
                    for p, g in zip(w, prob.grad(now, t), strict=True):
                        p.grad = torch.tensor(g)
                    opt.step()
                    q, k = (p.detach().numpy() for p in w)
                    if clip:
                        s = max_logits(q, k, x, heads)
                        q, k = k2_qk_clip(q, k, s, tau, heads)
                        w[0].data.copy_(torch.tensor(q))
                        w[1].data.copy_(torch.tensor(k))
                    out.append(np.stack([q, k]))
            return out

        return run

    def ours(heads, wd, clip):
        def run(prob: Problem, steps: int):
            import jax

            x, tau = inputs_and_tau(prob, heads)
            tx = gradax.muon(
                LR,
                beta=MU,
                weight_decay=wd,
                momentum="sum",
                nesterov=True,
                consistent_rms=0.2,
                eps=1e-7,
            )
            with jax.enable_x64(True):
                params = {
                    "q": jnp.asarray(prob.x0[0].T),
                    "k": jnp.asarray(prob.x0[1].T),
                }
                state = tx.init(params)
                update = jax.jit(tx.update)
                out = []
                for t in range(steps):
                    now = np.stack(
                        [np.asarray(params["q"]).T, np.asarray(params["k"]).T]
                    )
                    g = prob.grad(now, t)
                    grads = {"q": jnp.asarray(g[0].T), "k": jnp.asarray(g[1].T)}
                    updates, state = update(grads, state, params)
                    params = gradax.apply_updates(params, updates)
                    if clip:
                        q, k = np.asarray(params["q"]).T, np.asarray(params["k"]).T
                        s = jnp.asarray(max_logits(q, k, x, heads))
                        wq, wk = gradax.qk_clip(params["q"], params["k"], s, tau)
                        params = {"q": wq, "k": wk}
                    out.append(
                        np.stack([np.asarray(params["q"]).T, np.asarray(params["k"]).T])
                    )
            return out

        return run

    out = []
    for heads, d_head, d_model in ((2, 3, 8), (4, 2, 6), (3, 2, 5)):
        shape = (2, heads * d_head, d_model)
        for wd, clip in ((0.1, False), (0.0, True), (0.1, True)):
            out.append(
                Case(
                    "muon_clip" if clip else "muon (Moonlight)",
                    f"{heads} heads of {d_head}, d_model {d_model}, wd {wd}",
                    shape,
                    dict(
                        learning_rate=LR,
                        beta=MU,
                        weight_decay=wd,
                        heads=heads,
                        clip=clip,
                        tau_factor=TAU_FACTOR,
                        tokens=TOKENS,
                        scale=SCALE,
                    ),
                    reference(heads, wd, clip),
                    ours(heads, wd, clip),
                    fixture="muon_clip_moonlight_k2.json" if heads != 4 else None,
                    source=(co.repo, co.commit, FILE),
                    digits=12,  # 1e-15 apart: 12 digits keep a 1e-10 check
                )
            )
    return out
