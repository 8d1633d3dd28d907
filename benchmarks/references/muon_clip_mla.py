"""MuonClip on multi-head latent attention (MLA), as Kimi K2 trains it:
Moonlight's Muon (MoonshotAI/Moonlight examples/toy_train.py) then QK-Clip
by the K2 report's rule for MLA (arXiv:2507.20534, Algorithm 1), against
`gradax.muon` and `gradax.qk_clip(..., rope_dim=...)` (torch, float64).

Each head h has a query block `[q_nope | q_rope]` (d_nope + d_rope rows of
W_q), its own key block `k_nope` (d_nope rows of W_kc) and shares one
rotary key (W_kr, d_rope rows). Its logit is q_h . [k_nope_h | k_rope] /
sqrt(d_nope + d_rope). For a head whose maximum S_h exceeds tau, with
gamma_h = tau / S_h, the report scales q_nope_h and k_nope_h by
sqrt(gamma_h) and q_rope_h by gamma_h, and leaves the shared rotary key
alone (written out below from its text; no code is published). "before"
is `qk_clip` with `rope_dim=0` (sqrt(gamma) on the whole query block, the
multi-head rule). The three
matrices are row blocks of one (rows, d_model) parameter of the suite's
quadratic, in torch's (out, in) layout; see muon_clip.py for the rest.
"""

from __future__ import annotations

import math
from pathlib import Path

import jax.numpy as jnp
import numpy as np

import gradax

from ._harness import Case, Problem, checkout
from ._torch_loop import bfloat16_stays_float64
from .muon_clip import FILE, LR, MU, REPO, SCALE, TAU_FACTOR, TOKENS, _load_optimizer

NAMES = ("q", "kc", "kr")


def split(w, heads, d_nope, d_rope):
    """W_q, W_kc, W_kr: the row blocks of the (rows, d_model) parameter."""
    a, b = heads * (d_nope + d_rope), heads * d_nope
    return w[:a], w[a : a + b], w[a + b :]


def max_logits(w_q, w_kc, w_kr, x, heads, d_nope, d_rope):
    """S_h for torch-layout weights and inputs x."""
    n = len(x)
    q = (x @ w_q.T).reshape(n, heads, d_nope + d_rope)
    k_nope = (x @ w_kc.T).reshape(n, heads, d_nope)
    k_rope = np.broadcast_to((x @ w_kr.T)[:, None, :], (n, heads, d_rope))
    k = np.concatenate([k_nope, k_rope], axis=-1)
    logits = np.einsum("ihd,jhd->hij", q, k) / math.sqrt(d_nope + d_rope)
    return logits.reshape(heads, -1).max(axis=1)


def k2_qk_clip_mla(w_q, w_kc, s, tau, heads, d_nope, d_rope):
    """The K2 report's rule for MLA (torch layout, numpy)."""
    w_q, w_kc = w_q.copy(), w_kc.copy()
    block = d_nope + d_rope
    for h in range(heads):
        if s[h] > tau:
            gamma = tau / s[h]
            w_q[h * block : h * block + d_nope] *= math.sqrt(gamma)
            w_q[h * block + d_nope : (h + 1) * block] *= gamma
            w_kc[h * d_nope : (h + 1) * d_nope] *= math.sqrt(gamma)
    return w_q, w_kc


def inputs_and_tau(prob: Problem, dims) -> tuple[np.ndarray, float]:
    x = SCALE * prob.rng.standard_normal((TOKENS, prob.x0.shape[-1]))
    s = max_logits(*split(prob.x0, *dims), x, *dims)
    return x, TAU_FACTOR * float(s.max())


def cases(fetch_dir: Path) -> list[Case]:
    co = checkout(fetch_dir, REPO, (FILE,), "ref_moonlight")
    module = _load_optimizer()
    import torch

    def reference(dims, wd):
        def run(prob: Problem, steps: int):
            x, tau = inputs_and_tau(prob, dims)
            w = [
                torch.nn.Parameter(torch.tensor(a.copy()))
                for a in split(prob.x0, *dims)
            ]
            opt = module.Muon(lr=LR, wd=wd, muon_params=w, momentum=MU)
            out = []
            with bfloat16_stays_float64():
                for t in range(steps):
                    now = np.concatenate([p.detach().numpy() for p in w])
                    for p, g in zip(w, split(prob.grad(now, t), *dims), strict=True):
                        p.grad = torch.tensor(g.copy())
                    opt.step()
                    q, kc, kr = (p.detach().numpy() for p in w)
                    s = max_logits(q, kc, kr, x, *dims)
                    q, kc = k2_qk_clip_mla(q, kc, s, tau, *dims)
                    w[0].data.copy_(torch.tensor(q))
                    w[1].data.copy_(torch.tensor(kc))
                    out.append(np.concatenate([q, kc, kr]))
            return out

        return run

    def ours(dims, wd, mla=True):
        heads, d_nope, d_rope = dims

        def run(prob: Problem, steps: int):
            import jax

            x, tau = inputs_and_tau(prob, dims)
            tx = gradax.muon(
                LR,
                beta=MU,
                weight_decay=wd,
                momentum="sum",
                nesterov=True,
                consistent_rms=0.2,
                eps=1e-7,
            )

            def torch_layout(params):
                return np.concatenate([np.asarray(params[n]).T for n in NAMES])

            with jax.enable_x64(True):
                blocks = split(prob.x0, *dims)
                params = {
                    n: jnp.asarray(b.T) for n, b in zip(NAMES, blocks, strict=True)
                }
                state = tx.init(params)
                update = jax.jit(tx.update)
                out = []
                for t in range(steps):
                    g = split(prob.grad(torch_layout(params), t), *dims)
                    grads = {n: jnp.asarray(b.T) for n, b in zip(NAMES, g, strict=True)}
                    updates, state = update(grads, state, params)
                    params = gradax.apply_updates(params, updates)
                    q, kc, kr = (np.asarray(params[n]).T for n in NAMES)
                    s = jnp.asarray(max_logits(q, kc, kr, x, *dims))
                    wq, wkc = gradax.qk_clip(
                        params["q"],
                        params["kc"],
                        s,
                        tau,
                        rope_dim=d_rope if mla else 0,
                    )
                    params = {**params, "q": wq, "kc": wkc}
                    out.append(torch_layout(params))
            return out

        return run

    out = []
    for heads, d_nope, d_rope, d_model in ((2, 3, 2, 8), (3, 2, 2, 6)):
        dims = (heads, d_nope, d_rope)
        shape = (heads * (2 * d_nope + d_rope) + d_rope, d_model)
        for wd in (0.0, 0.1):
            out.append(
                Case(
                    "muon_clip (MLA)",
                    f"{heads} heads, d_nope {d_nope}, d_rope {d_rope}, "
                    f"d_model {d_model}, wd {wd}",
                    shape,
                    dict(
                        learning_rate=LR,
                        beta=MU,
                        weight_decay=wd,
                        heads=heads,
                        d_nope=d_nope,
                        d_rope=d_rope,
                        tau_factor=TAU_FACTOR,
                        tokens=TOKENS,
                        scale=SCALE,
                    ),
                    reference(dims, wd),
                    ours(dims, wd),
                    # the multi-head rule: sqrt(gamma) on the rotary query too
                    before=ours(dims, wd, mla=False),
                    fixture="muon_clip_mla_moonlight_k2.json" if wd else None,
                    source=(co.repo, co.commit, FILE),
                    digits=12,
                )
            )
    return out
