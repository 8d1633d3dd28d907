"""MuonClip: Muon plus QK-Clip on a tiny attention layer, in plain JAX.

The forward pass returns, next to the loss, each head's largest attention
logit S_h (over the batch and all query/key positions). After the optimizer
step, gradax.qk_clip rescales the query and key weights of every head with
S_h > tau by sqrt(tau / S_h), which caps its logits at tau; other heads keep
their weights bit for bit (Kimi K2, arXiv:2507.20534).

Run: python examples/muonclip.py
"""

import jax
import jax.numpy as jnp

import gradax

HEADS, HEAD_DIM, D_MODEL, SEQ, BATCH = 4, 8, 32, 16, 8
TAU = 60.0  # Kimi K2 uses 100; a tiny model reaches a small cap sooner.


def init(key):
    kq, kk, kv, ko, kx = jax.random.split(key, 5)
    scale = 1.0 / jnp.sqrt(D_MODEL)
    params = {
        # Query and key weights get a large scale so some heads start hot.
        "wq": 4.0 * scale * jax.random.normal(kq, (D_MODEL, HEADS * HEAD_DIM)),
        "wk": 4.0 * scale * jax.random.normal(kk, (D_MODEL, HEADS * HEAD_DIM)),
        "wv": scale * jax.random.normal(kv, (D_MODEL, HEADS * HEAD_DIM)),
        "wo": scale * jax.random.normal(ko, (HEADS * HEAD_DIM, D_MODEL)),
        "gain": jnp.ones(D_MODEL),
    }
    return params, kx


def heads(x):
    """(batch, seq, H * dh) -> (batch, H, seq, dh)."""
    return x.reshape(x.shape[0], x.shape[1], HEADS, HEAD_DIM).transpose(0, 2, 1, 3)


def attention(params, x):
    """Causal multi-head attention; returns the output and S_h per head."""
    q, k, v = (heads(x @ params[name]) for name in ("wq", "wk", "wv"))
    logits = q @ k.transpose(0, 1, 3, 2) / jnp.sqrt(HEAD_DIM)
    # S_h: the largest logit of each head over batch and positions (the
    # causal mask is applied after, as Kimi K2 records the raw logits).
    max_logits = jnp.max(logits, axis=(0, 2, 3))
    causal = jnp.tril(jnp.ones((SEQ, SEQ), bool))
    weights = jax.nn.softmax(jnp.where(causal, logits, -jnp.inf), axis=-1)
    out = (weights @ v).transpose(0, 2, 1, 3).reshape(x.shape)
    return params["gain"] * (out @ params["wo"]), max_logits


def loss_fn(params, x, y):
    out, max_logits = attention(params, x)
    # The max logits are a by-product: no gradient flows through them.
    return jnp.mean((out - y) ** 2), jax.lax.stop_gradient(max_logits)


@jax.jit
def train_step(tx, params, state, x, y):
    (loss, max_logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, x, y)
    updates, state = tx.update(grads, state, params)
    params = gradax.apply_updates(params, updates)
    # QK-Clip after the optimizer step, with this step's recorded logits.
    params["wq"], params["wk"] = gradax.qk_clip(
        params["wq"], params["wk"], max_logits, TAU
    )
    return params, state, loss, max_logits


def fmt(values) -> str:
    return " ".join(f"{float(v):5.1f}" for v in values)


def main(steps: int = 20) -> dict[str, list[float]]:
    params, key = init(jax.random.key(0))
    x = jax.random.normal(key, (BATCH, SEQ, D_MODEL))
    y = jnp.roll(x, 1, axis=1)  # a toy target: the previous token
    tx = gradax.muon(0.02, consistent_rms=0.2)
    state = tx.init(params)
    total = 0
    history = []  # S_h of each step, before its clip
    for step in range(steps):
        params, state, loss, max_logits = train_step(tx, params, state, x, y)
        history.append(max_logits.tolist())
        clipped = int(jnp.sum(max_logits > TAU))
        total += clipped
        if step % 5 == 0 or step == steps - 1:
            print(
                f"step {step:2d}  loss {float(loss):.4f}  max logits "
                f"[{fmt(max_logits)}]  heads clipped: {clipped}"
            )
    # The clip acts on the logits of the pre-step weights; with the weights
    # it left, recompute: every head is at most about tau.
    _, after = attention(params, x)
    print(f"heads clipped over {steps} steps: {total}")
    print(f"max logits with the final weights: [{fmt(after)}] (tau = {TAU})")
    history.append(after.tolist())  # with the final weights
    return {f"head {h}": [s[h] for s in history] for h in range(HEADS)}


if __name__ == "__main__":
    main()
