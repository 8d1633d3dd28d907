"""Two small models for the width tests: an MLP and a transformer.

Each has two initializations: "mup" (what docs/width-transfer.md asks of a
model for gradax.width_transfer to hold: the head initialized at zero,
attention logits scaled by 1/d_head) and "standard" (1/sqrt(fan_in)
everywhere, attention by 1/sqrt(d_head)). Weights are stored (fan_in,
fan_out), as in flax. Each loss returns (loss, activations) for gradax.coord_check.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

BASE_WIDTH = 32
D_IN, D_OUT = 16, 4
VOCAB, SEQ, HEADS = 32, 8, 2


def _normal(key, shape, std):
    return std * jax.random.normal(key, shape, jnp.float32)


def _head_std(width: int, param: str) -> float:
    """1/sqrt(fan_in) (standard); zero under µP (Tensor Programs V's choice).

    µP's other choice, a standard deviation of sqrt(BASE_WIDTH) / width,
    leaves a term W0 @ dh of relative size sqrt(BASE_WIDTH / width) in the
    logits' change: the same size as µP's own term at the base width, so at
    widths 32-128 the check would measure it (a slope near -0.25).
    """
    return 0.0 if param == "mup" else width**-0.5


def mlp_init(key, width: int, param: str = "mup"):
    k1, k2, k3 = jax.random.split(key, 3)
    return {
        "input": _normal(k1, (D_IN, width), D_IN**-0.5),
        "input_bias": jnp.zeros(width),
        "hidden": _normal(k2, (width, width), width**-0.5),
        "hidden_bias": jnp.zeros(width),
        "head": _normal(k3, (width, D_OUT), _head_std(width, param)),
    }


def mlp_batch():
    kx, ky = jax.random.split(jax.random.key(1))
    return (
        jax.random.normal(kx, (64, D_IN), jnp.float32),
        jax.random.normal(ky, (64, D_OUT), jnp.float32),
    )


def mlp_loss(params, batch):
    x, y = batch
    h1 = jax.nn.relu(x @ params["input"] + params["input_bias"])
    h2 = jax.nn.relu(h1 @ params["hidden"] + params["hidden_bias"])
    out = h2 @ params["head"]
    loss = jnp.mean(jnp.square(out - y))
    return loss, {"1_input": h1, "2_hidden": h2, "3_output": out}


def _layer_norm(x, gain):
    x = x - x.mean(-1, keepdims=True)
    return gain * x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6)


def transformer_init(key, width: int, param: str = "mup"):
    ks = jax.random.split(key, 6)
    return {
        "embed": _normal(ks[0], (VOCAB, width), 1.0),
        "block": {
            "ln1": jnp.ones(width),
            "qkv": _normal(ks[1], (width, 3 * width), width**-0.5),
            "out": _normal(ks[2], (width, width), width**-0.5),
            "ln2": jnp.ones(width),
            "up": _normal(ks[3], (width, 4 * width), width**-0.5),
            "down": _normal(ks[4], (4 * width, width), (4 * width) ** -0.5),
        },
        "ln_f": jnp.ones(width),
        "head": _normal(ks[5], (width, VOCAB), _head_std(width, param)),
    }


def transformer_batch():
    return jax.random.randint(jax.random.key(2), (8, SEQ + 1), 0, VOCAB)


def transformer_loss(params, tokens, param: str = "mup"):
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    x = params["embed"][inputs]
    embedded = x
    b = params["block"]
    width = x.shape[-1]
    d_head = width // HEADS
    h = _layer_norm(x, b["ln1"])
    q, k, v = jnp.split(h @ b["qkv"], 3, axis=-1)

    def heads(t):
        return t.reshape(*t.shape[:-1], HEADS, d_head)

    q, k, v = heads(q), heads(k), heads(v)
    # µP: 1/d_head (q and k become correlated as they train, so q.k grows
    # as d_head); at the base head size the same as 1/sqrt(d_head).
    base_head = BASE_WIDTH // HEADS
    scale = (
        d_head**-0.5 * (base_head / d_head) ** 0.5 if param == "mup" else d_head**-0.5
    )
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) * scale
    mask = jnp.tril(jnp.ones((SEQ, SEQ), bool))
    weights = jax.nn.softmax(jnp.where(mask, logits, -1e30), axis=-1)
    attn = jnp.einsum("bhqk,bkhd->bqhd", weights, v).reshape(x.shape)
    attn = attn @ b["out"]
    x = x + attn
    mlp = jax.nn.gelu(_layer_norm(x, b["ln2"]) @ b["up"]) @ b["down"]
    x = x + mlp
    out = _layer_norm(x, params["ln_f"]) @ params["head"]
    loss = -jnp.mean(
        jnp.take_along_axis(jax.nn.log_softmax(out), targets[..., None], axis=-1)
    )
    return loss, {
        "1_embed": embedded,
        "2_attention": attn,
        "3_mlp": mlp,
        "4_logits": out,
    }
