"""Each row of docs/muon.md's conventions table against the real thing.

Every row is checked on matrices and non-matrix leaves together: against
torch.optim.Muon with torch.optim.AdamW (torch 2.13, live), keras.optimizers
.Muon (Keras 3, live, JAX backend) and KellerJordan's MuonWithAuxAdam and
Moonlight's Muon written out in NumPy from their published code. Each row
runs its Newton–Schulz in float32 (compared to 1e-5) and in bfloat16 as the
references ship (compared within a bound derived from bfloat16 rounding, see
:func:`bf16_bound`); gradax runs both in one compiled program per row.

Gradients are a fixed sequence (not recomputed from the weights), so the
momentum is the same in every implementation and only each step's
orthogonalization rounds differently: differences add up over steps and do
not feed back.
"""

from __future__ import annotations

import os

os.environ["KERAS_BACKEND"] = "jax"  # before keras is imported: no TensorFlow

import jax
import jax.numpy as jnp
import keras
import ml_dtypes
import numpy as np
import pytest
import torch
import torch.optim._muon as torch_muon

import gradax

STEPS = 5
KELLER = (3.4445, -4.7750, 2.0315)
# JAX layout (fan_in, fan_out); torch stores the transpose. One tall and one
# wide matrix, a 2-D embedding that every row routes to the other group, and
# two vectors.
SHAPES = {
    "w_in": (6, 10),
    "w_out": (12, 4),
    "token_embedding": (8, 6),
    "bias": (10,),
    "gain": (6,),
}
MATRICES = ("w_in", "w_out")
# Gradients of size ~0.01 with an AdamW eps of 1e-3 make the eps placement
# visible (the Keras and Moonlight rows put it outside the bias correction).
GRAD_SCALE = 0.01


def initial() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        n: (0.5 * rng.standard_normal(s)).astype(np.float32) for n, s in SHAPES.items()
    }


def gradients() -> list[dict[str, np.ndarray]]:
    # Gaussian matrices this small are well conditioned: no singular value
    # is near zero, so the orthogonalization does not depend on rounding.
    rng = np.random.default_rng(1)
    return [
        {
            n: (GRAD_SCALE * rng.standard_normal(s)).astype(np.float32)
            for n, s in SHAPES.items()
        }
        for _ in range(STEPS)
    ]


def routing(exclude: str):
    params = {n: jax.ShapeDtypeStruct(s, jnp.float32) for n, s in SHAPES.items()}
    labels, dims = gradax.muon_labels(params, exclude=exclude, print_report=False)
    assert [n for n in SHAPES if labels[n] == "muon"] == list(MATRICES)
    return dims


@jax.jit
def _run(txs, params, grads):
    """The final weights of each optimizer in ``txs`` on the gradient sequence."""

    def one(tx):
        def step(carry, g):
            p, state = carry
            updates, state = tx.update(g, state, p)
            return (gradax.apply_updates(p, updates), state), None

        (p, _), _ = jax.lax.scan(step, (params, tx.init(params)), grads)
        return p

    return [one(tx) for tx in txs]


def run_gradax(*txs):
    params = {n: jnp.asarray(v) for n, v in initial().items()}
    grads = jax.tree.map(lambda *g: jnp.stack(g), *gradients())
    return [jax.tree.map(np.asarray, p) for p in _run(list(txs), params, grads)]


def bf16_round(x: np.ndarray) -> np.ndarray:
    return x.astype(ml_dtypes.bfloat16).astype(np.float32)


# --- The bfloat16 tolerance -------------------------------------------------
#
# bfloat16 keeps 8 significant bits: one rounding moves a value by at most
# u = 2**-8 of its size. A Newton–Schulz step rounds X X^T, its square, the
# polynomial B and the new X: 4 roundings a step, 20 in 5 steps, each of
# relative size <= u of max|O|. Later steps carry an earlier step's error on
# with the Keller polynomial's slope, |p'| <= 1.8 on the band [0.68, 1.13]
# where the singular values sit from the second step on (below 1 at its
# centre); allowing each rounding 1.6x on average gives 32 u per call (the
# last 3 of bfloat16's 8 bits). Measured on 20 random 10 x 6 matrices: torch
# 11 u, gradax 15 u (plain) and 29 u (Gram) at most. Two implementations are
# within twice one's bound, and max|O| <= 1.13 (the band's top bounds the
# spectral norm, which bounds every entry). Each step moves a weight by
# lr * scale * O and, the gradients being fixed, the steps' errors only add.
BF16_U_PER_CALL = 32


def bf16_bound(lr: float, scales: dict[str, float]) -> dict[str, float]:
    u = 2.0**-8
    return {
        n: 2 * BF16_U_PER_CALL * u * 1.13 * STEPS * lr * scale
        for n, scale in scales.items()
    }


def assert_rows_match(ours, theirs, bf16_bounds=None):
    """Non-matrix leaves to 1e-5; matrices to 1e-5 or within the bf16 bound."""
    for name in SHAPES:
        atol = 1e-5
        if bf16_bounds is not None and name in MATRICES:
            atol = bf16_bounds[name]
        np.testing.assert_allclose(
            ours[name], theirs[name], atol=atol, rtol=0, err_msg=name
        )


def assert_bfloat16_used(ours16, ours32):
    """The bfloat16 run really rounds (its comparison is not the float32 one)."""
    for name in MATRICES:
        assert np.abs(ours16[name] - ours32[name]).max() > 1e-5, name


def shape_scales(scale_of) -> dict[str, float]:
    return {n: scale_of(*SHAPES[n]) for n in MATRICES}


def keller_scale(fan_in, fan_out):
    return max(1.0, fan_out / fan_in) ** 0.5


def rms_scale(fan_in, fan_out):
    return 0.2 * max(fan_in, fan_out) ** 0.5


# --- torch.optim.Muon with torch.optim.AdamW --------------------------------


def _float32_newton_schulz(grad, ns_coefficients, ns_steps, eps):
    """torch's routine (private, 2.13) with bfloat16 replaced by float32."""
    a, b, c = ns_coefficients
    x = grad.float()
    tall = x.size(0) > x.size(1)
    if tall:
        x = x.T
    x = x / x.norm().clamp(min=eps)
    for _ in range(ns_steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if tall else x


TORCH = dict(lr=0.02, weight_decay=0.1, momentum=0.95, eps=1e-7)
TORCH_ADAMW = dict(lr=0.01, betas=(0.9, 0.95), eps=1e-3, weight_decay=0.05)


def run_torch(adjust_lr_fn, nesterov):
    start = initial()
    # torch's Linear stores (out, in): the transpose of JAX's x @ W weight.
    params = {
        n: torch.nn.Parameter(torch.tensor(v.T if n in MATRICES else v))
        for n, v in start.items()
    }
    muon = torch.optim.Muon(
        [params[n] for n in MATRICES],
        nesterov=nesterov,
        adjust_lr_fn=adjust_lr_fn,
        **TORCH,
    )
    adamw = torch.optim.AdamW(
        [p for n, p in params.items() if n not in MATRICES], **TORCH_ADAMW
    )
    for grads in gradients():
        for n, p in params.items():
            p.grad = torch.tensor(grads[n].T if n in MATRICES else grads[n])
        muon.step()
        adamw.step()
    out = {n: p.detach().numpy() for n, p in params.items()}
    return {n: v.T if n in MATRICES else v for n, v in out.items()}


def torch_row(adjust_lr_fn, nesterov, precision):
    """The documented setting for torch.optim.Muon + torch.optim.AdamW."""
    return gradax.muon(
        TORCH["lr"],
        beta=TORCH["momentum"],
        eps=TORCH["eps"],
        weight_decay=TORCH["weight_decay"],
        nesterov=nesterov,
        bias_correction=False,
        consistent_rms=0.2 if adjust_lr_fn == "match_rms_adamw" else None,
        precision=precision,
        muon_weight_dimension_numbers=routing("embed"),
        adam=gradax.adamw(
            TORCH_ADAMW["lr"],
            b1=TORCH_ADAMW["betas"][0],
            b2=TORCH_ADAMW["betas"][1],
            eps=TORCH_ADAMW["eps"],
            weight_decay=TORCH_ADAMW["weight_decay"],
        ),
    )


@pytest.mark.parametrize("nesterov", [True, False], ids=["nesterov", "plain"])
@pytest.mark.parametrize("adjust_lr_fn", ["original", "match_rms_adamw"])
def test_torch_rows(adjust_lr_fn, nesterov, monkeypatch):
    ours32, ours16 = run_gradax(
        torch_row(adjust_lr_fn, nesterov, None),
        torch_row(adjust_lr_fn, nesterov, "bfloat16"),
    )
    shipped = run_torch(adjust_lr_fn, nesterov)
    monkeypatch.setattr(
        torch_muon, "_zeropower_via_newtonschulz", _float32_newton_schulz
    )
    float32 = run_torch(adjust_lr_fn, nesterov)
    assert_rows_match(ours32, float32)
    scale = rms_scale if adjust_lr_fn == "match_rms_adamw" else keller_scale
    assert_bfloat16_used(ours16, ours32)
    assert_rows_match(ours16, shipped, bf16_bound(TORCH["lr"], shape_scales(scale)))


def test_torch_original_is_the_default_adjustment():
    # adjust_lr_fn=None is "original" in torch 2.13; the table lists both.
    assert torch_muon._adjust_lr(1.0, None, (12, 4)) == torch_muon._adjust_lr(
        1.0, "original", (12, 4)
    )


# --- KellerJordan's MuonWithAuxAdam and Moonlight, written out -----------------


def newton_schulz(g: np.ndarray, bfloat16: bool) -> np.ndarray:
    """KellerJordan's ``zeropower_via_newtonschulz5`` (Moonlight's is the same).

    With ``bfloat16``, every torch operation's result is rounded to bfloat16
    as torch does (it computes in float32 and rounds the result).
    """
    r = bf16_round if bfloat16 else (lambda y: y)
    a, b, c = KELLER
    x = r(g.astype(np.float32))
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = x.T
    x = r(x / r(r(np.linalg.norm(x)) + np.float32(1e-7)))
    for _ in range(5):
        gram = r(x @ x.T)
        # b * A + c * A @ A parses as b * A + (c * A) @ A.
        poly = r(r(b * gram) + r(r(c * gram) @ gram))
        x = r(r(a * x) + r(poly @ x))
    return x.T if tall else x


def run_reference(muon_step, other_step):
    """A torch-layout reference: ``muon_step(p, g, state)`` for the matrices,
    ``other_step(p, g, state, t)`` for the rest; returns the JAX layout."""
    params = {n: (v.T if n in MATRICES else v).copy() for n, v in initial().items()}
    state = {n: {} for n in params}
    for t, grads in enumerate(gradients(), start=1):
        for n, p in params.items():
            if n in MATRICES:
                params[n] = muon_step(p, grads[n].T, state[n])
            else:
                params[n] = other_step(p, grads[n], state[n], t)
    return {n: v.T if n in MATRICES else v for n, v in params.items()}


def _adam_moments(g, state, b1, b2):
    m1 = state.get("m1", np.zeros_like(g))
    m2 = state.get("m2", np.zeros_like(g))
    state["m1"] = m1 + (1 - b1) * (g - m1)  # lerp_(g, 1 - b1)
    state["m2"] = m2 + (1 - b2) * (g * g - m2)
    return state["m1"], state["m2"]


KJ = dict(lr=0.02, weight_decay=0.1, momentum=0.95)
KJ_ADAM = dict(lr=0.01, betas=(0.9, 0.95), eps=1e-3, weight_decay=0.05)


def run_keller(bfloat16):
    beta = KJ["momentum"]
    lr, wd = KJ["lr"], KJ["weight_decay"]
    (b1, b2), eps = KJ_ADAM["betas"], KJ_ADAM["eps"]

    def muon_step(p, g, state):  # muon_update, then MuonWithAuxAdam.step
        m = state.get("momentum", np.zeros_like(g))
        m = m + (1 - beta) * (g - m)
        state["momentum"] = m
        u = newton_schulz(g + beta * (m - g), bfloat16)  # Nesterov lerp
        u = u * max(1, g.shape[-2] / g.shape[-1]) ** 0.5
        return p * (1 - lr * wd) - lr * u

    def adam_step(p, g, state, t):  # adam_update: plain Adam, no Nesterov
        m1, m2 = _adam_moments(g, state, b1, b2)
        u = (m1 / (1 - b1**t)) / (np.sqrt(m2 / (1 - b2**t)) + eps)
        lr_a = KJ_ADAM["lr"]
        return p * (1 - lr_a * KJ_ADAM["weight_decay"]) - lr_a * u

    return run_reference(muon_step, adam_step)


def keller_row(precision):
    return gradax.muon(
        KJ["lr"],
        beta=KJ["momentum"],
        weight_decay=KJ["weight_decay"],
        eps=1e-7,
        bias_correction=False,
        precision=precision,
        muon_weight_dimension_numbers=routing("embed"),
        adam=gradax.adamw(
            KJ_ADAM["lr"],
            b1=KJ_ADAM["betas"][0],
            b2=KJ_ADAM["betas"][1],
            eps=KJ_ADAM["eps"],
            weight_decay=KJ_ADAM["weight_decay"],
        ),
    )


def test_keller_jordan_row():
    # The old setting: the default AdamW group, which takes Muon's Nesterov.
    nadam = keller_row(None).replace(
        adam=None,
        adam_learning_rate=KJ_ADAM["lr"],
        adam_b1=KJ_ADAM["betas"][0],
        adam_b2=KJ_ADAM["betas"][1],
        adam_eps=KJ_ADAM["eps"],
        adam_weight_decay=KJ_ADAM["weight_decay"],
    )
    ours32, ours16, old = run_gradax(keller_row(None), keller_row("bfloat16"), nadam)
    reference = run_keller(bfloat16=False)
    assert_rows_match(ours32, reference)
    assert_bfloat16_used(ours16, ours32)
    bounds = bf16_bound(KJ["lr"], shape_scales(keller_scale))
    assert_rows_match(ours16, run_keller(bfloat16=True), bounds)
    # The auxiliary Adam is plain Adam: the NAdam of the default group is not it.
    assert np.abs(old["bias"] - reference["bias"]).max() > 1e-4


MOONLIGHT = dict(
    lr=0.02, wd=0.1, momentum=0.95, adamw_betas=(0.9, 0.95), adamw_eps=1e-3
)


def run_moonlight(bfloat16):
    lr, wd, beta = MOONLIGHT["lr"], MOONLIGHT["wd"], MOONLIGHT["momentum"]
    (b1, b2), eps = MOONLIGHT["adamw_betas"], MOONLIGHT["adamw_eps"]

    def muon_step(p, g, state):
        buf = beta * state.get("momentum", np.zeros_like(g)) + g
        state["momentum"] = buf
        u = newton_schulz(g + beta * buf, bfloat16)  # nesterov=True
        adjusted_lr = lr * 0.2 * max(p.shape[0], p.shape[1]) ** 0.5
        return p * (1 - lr * wd) - adjusted_lr * u

    def adamw_step(p, g, state, t):  # eps outside the bias correction
        m1, m2 = _adam_moments(g, state, b1, b2)
        u = m1 / (eps + np.sqrt(m2))
        scale = (1 - b1**t) / (1 - b2**t) ** 0.5
        return p * (1 - lr * wd) - (lr / scale) * u

    return run_reference(muon_step, adamw_step)


def moonlight_row(precision):
    lr, wd = MOONLIGHT["lr"], MOONLIGHT["wd"]
    (b1, b2), eps = MOONLIGHT["adamw_betas"], MOONLIGHT["adamw_eps"]
    return gradax.muon(
        lr,
        beta=MOONLIGHT["momentum"],
        momentum="sum",
        consistent_rms=0.2,
        weight_decay=wd,
        eps=1e-7,
        precision=precision,
        muon_weight_dimension_numbers=routing("embed"),
        adam=gradax.adamw(
            lr,
            b1=b1,
            b2=b2,
            # eps outside the bias correction: Adam's eps divided by sqrt(1 - b2^t)
            # at step t = n + 1 (a schedule is read at n, the updates done).
            eps=lambda n: eps / jnp.sqrt(1 - b2 ** (n + 1)),
            weight_decay=wd,
        ),
    )


def test_moonlight_row():
    ours32, ours16 = run_gradax(moonlight_row(None), moonlight_row("bfloat16"))
    assert_rows_match(ours32, run_moonlight(bfloat16=False))
    assert_bfloat16_used(ours16, ours32)
    bounds = bf16_bound(MOONLIGHT["lr"], shape_scales(rms_scale))
    assert_rows_match(ours16, run_moonlight(bfloat16=True), bounds)


# --- keras.optimizers.Muon ----------------------------------------------------

KERAS = dict(
    learning_rate=0.02,
    adam_beta_1=0.9,
    adam_beta_2=0.999,
    epsilon=1e-3,
    weight_decay=0.1,
    adam_weight_decay=0.05,
    adam_lr_ratio=0.5,
)


def run_keras():
    names = list(SHAPES)
    variables = [keras.Variable(initial()[n], name=n) for n in names]
    opt = keras.optimizers.Muon(**KERAS)
    for grads in gradients():
        opt.apply([grads[n] for n in names], variables)
    adamw = [
        n for n, v in zip(names, variables, strict=True) if opt._should_use_adamw(v)
    ]
    return {
        n: np.asarray(v.value) for n, v in zip(names, variables, strict=True)
    }, adamw


def keras_row(eps_outside=True):
    lr, ratio = KERAS["learning_rate"], KERAS["adam_lr_ratio"]
    b2, eps = KERAS["adam_beta_2"], KERAS["epsilon"]
    return gradax.muon(
        lr,
        beta=0.95,
        momentum="sum",
        consistent_rms=0.2,  # rms_rate
        weight_decay=KERAS["weight_decay"],
        eps=1e-7,
        # Keras: not 2-D, or "embedding" in the lower-cased path.
        muon_weight_dimension_numbers=routing("(?i:embedding)"),
        adam=gradax.adamw(
            lr * ratio,
            b1=KERAS["adam_beta_1"],
            b2=b2,
            eps=(lambda n: eps / jnp.sqrt(1 - b2 ** (n + 1))) if eps_outside else eps,
            # Keras decays by W * wd * lr with the unscaled learning rate.
            weight_decay=KERAS["adam_weight_decay"] / ratio,
        ),
    )


def test_keras_row():
    ours, naive = run_gradax(keras_row(), keras_row(eps_outside=False))
    theirs, adamw_leaves = run_keras()
    assert adamw_leaves == [n for n in SHAPES if n not in MATRICES]
    assert_rows_match(ours, theirs)
    # Keras's eps placement matters on these gradients: Adam's own is not it.
    assert np.abs(naive["bias"] - theirs["bias"]).max() > 1e-4
