"""A small character-level transformer in plain JAX, for ``gradax demo``.

A GPT-style decoder: token and position embeddings, pre-norm blocks of
causal self-attention and a GELU MLP, a final RMS norm and an untied output
head. Weights follow JAX's ``y = x @ W`` layout, ``(fan_in, fan_out)``, so
Muon's default routing treats every hidden matrix correctly; the embeddings
and the head are kept on AdamW by name (``exclude="embed|head"``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp

Params = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """The shape of the model."""

    vocab_size: int
    context: int = 64
    d_model: int = 128
    layers: int = 2
    heads: int = 4

    def __post_init__(self):
        if self.d_model % self.heads:
            raise ValueError(
                f"d_model ({self.d_model}) must be a multiple of heads ({self.heads})"
            )


def init_params(config: ModelConfig, key: jax.Array) -> Params:
    """Random parameters: fan-in scaled matrices, a zero output head.

    The output projections of each block are scaled down by
    ``sqrt(2 * layers)`` so the residual stream keeps its size with depth; the
    zero head makes the first loss exactly ``log(vocab_size)``.
    """
    d, n_layers = config.d_model, config.layers
    keys = iter(jax.random.split(key, 2 + 4 * n_layers))

    def normal(shape, std):
        return std * jax.random.normal(next(keys), shape, jnp.float32)

    out_std = 1.0 / math.sqrt(2 * n_layers)
    blocks = []
    for _ in range(n_layers):
        blocks.append(
            {
                "attn_norm": jnp.ones((d,), jnp.float32),
                "qkv": normal((d, 3 * d), 1 / math.sqrt(d)),
                "attn_out": normal((d, d), out_std / math.sqrt(d)),
                "mlp_norm": jnp.ones((d,), jnp.float32),
                "mlp_up": normal((d, 4 * d), 1 / math.sqrt(d)),
                "mlp_down": normal((4 * d, d), out_std / math.sqrt(4 * d)),
            }
        )
    return {
        "embed": normal((config.vocab_size, d), 1.0),
        "pos_embed": normal((config.context, d), 1.0),
        "blocks": blocks,
        "final_norm": jnp.ones((d,), jnp.float32),
        "head": jnp.zeros((d, config.vocab_size), jnp.float32),
    }


def rms_norm(x: jax.Array, scale: jax.Array, eps: float = 1e-6) -> jax.Array:
    """Divide by the root mean square over the last axis, then scale."""
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * scale


def attention(x: jax.Array, block: Params, heads: int) -> jax.Array:
    """Causal multi-head self-attention of ``x`` with shape ``(B, T, D)``."""
    batch, length, d = x.shape
    q, k, v = jnp.split(x @ block["qkv"], 3, axis=-1)
    shape = (batch, length, heads, d // heads)
    q, k, v = (t.reshape(shape) for t in (q, k, v))
    y = jax.nn.dot_product_attention(q, k, v, is_causal=True)
    return y.reshape(batch, length, d) @ block["attn_out"]


def mlp(x: jax.Array, block: Params) -> jax.Array:
    """The position-wise feed-forward layer."""
    return jax.nn.gelu(x @ block["mlp_up"]) @ block["mlp_down"]


def forward(params: Params, tokens: jax.Array, heads: int) -> jax.Array:
    """Logits of shape ``(B, T, vocab)`` for integer tokens of shape ``(B, T)``."""
    length = tokens.shape[1]
    x = params["embed"][tokens] + params["pos_embed"][:length]
    for block in params["blocks"]:
        x = x + attention(rms_norm(x, block["attn_norm"]), block, heads)
        x = x + mlp(rms_norm(x, block["mlp_norm"]), block)
    return rms_norm(x, params["final_norm"]) @ params["head"]


def loss_fn(params: Params, batch: jax.Array, heads: int) -> jax.Array:
    """Mean next-character cross-entropy (nats) of a ``(B, T + 1)`` batch."""
    logits = forward(params, batch[:, :-1], heads)
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    targets = batch[:, 1:, None]
    return -jnp.mean(jnp.take_along_axis(log_probs, targets, axis=-1))


def count_params(params: Params) -> int:
    """The number of scalars in the parameter tree."""
    return sum(x.size for x in jax.tree.leaves(params))
