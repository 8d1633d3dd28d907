"""Muon with routing: which weights Muon orthogonalizes, and which go to AdamW.

Muon is for the hidden weight matrices. Embeddings, output heads, biases and
norms go to AdamW. `gradax.muon_labels` shows the routing as a table before
training: here a small next-token model whose two MLP blocks are stacked in
one `(layers, d_in, d_out)` array each (as a `lax.scan` over layers
wants them), which `"auto"` routing orthogonalizes as one matrix a layer.
The same model is then trained with Muon and with AdamW, side by side.

Run: python examples/muon_routing.py
"""

import jax
import jax.numpy as jnp

import gradax

VOCAB, D, HIDDEN, LAYERS, SEQ, BATCH = 32, 32, 64, 2, 16, 32


def init_params(key):
    k_embed, k_up, k_down, k_head = jax.random.split(key, 4)
    return {
        "embed": jax.random.normal(k_embed, (VOCAB, D)),
        "blocks": {  # one leaf holds every layer's matrix: (layers, in, out)
            "up": jax.random.normal(k_up, (LAYERS, D, HIDDEN)) / jnp.sqrt(D),
            "down": jax.random.normal(k_down, (LAYERS, HIDDEN, D)) / jnp.sqrt(HIDDEN),
            "norm": jnp.ones((LAYERS, D)),
        },
        "head": jax.random.normal(k_head, (D, VOCAB)) / jnp.sqrt(D),
    }


def forward(params, tokens):
    x = params["embed"][tokens]

    def block(x, layer):
        h = x * layer["norm"] / jnp.sqrt(jnp.mean(x**2, -1, keepdims=True) + 1e-6)
        return x + jax.nn.gelu(h @ layer["up"]) @ layer["down"], None

    x, _ = jax.lax.scan(block, x, params["blocks"])
    return x @ params["head"]


def make_data(key):
    """Token sequences where each next token is a fixed shuffle of the last."""
    k_perm, k_start = jax.random.split(key)
    shuffle = jax.random.permutation(k_perm, VOCAB)
    start = jax.random.randint(k_start, (BATCH,), 0, VOCAB)

    def next_token(token, _):
        return shuffle[token], shuffle[token]

    _, rest = jax.lax.scan(next_token, start, length=SEQ)
    tokens = jnp.concatenate([start[:, None], rest.T], axis=1)
    return tokens[:, :-1], tokens[:, 1:]


def loss_fn(params, inputs, targets):
    logits = forward(params, inputs)
    picked = jnp.take_along_axis(logits, targets[..., None], -1)[..., 0]
    return jnp.mean(jax.nn.logsumexp(logits, -1) - picked)


@jax.jit
def train_step(tx, params, state, inputs, targets):
    loss, grads = jax.value_and_grad(loss_fn)(params, inputs, targets)
    updates, state = tx.update(grads, state, params)
    return gradax.apply_updates(params, updates), state, loss


def train(tx, steps, name):
    params = init_params(jax.random.key(0))
    inputs, targets = make_data(jax.random.key(1))
    state = tx.init(params)
    losses = []
    for step in range(steps):
        params, state, loss = train_step(tx, params, state, inputs, targets)
        losses.append(float(loss))
        if step % 20 == 0 or step == steps - 1:
            print(f"{name:5s} step {step:3d}  loss {losses[-1]:.3g}")
    return losses


def main(steps: int = 100) -> dict[str, list[float]]:
    params = init_params(jax.random.key(0))
    # "auto": 2-D leaves and stacked ones (a leading layer axis). The norms'
    # gains are stacked too, (layers, d), which reads as a matrix: `exclude`
    # sends them to AdamW with the embedding and the head. Without it, `init`
    # warns (gradax.MuonRoutingWarning) that these look like input or output
    # layers, and suggests this very pattern.
    _, dims = gradax.muon_labels(params, "auto", exclude="embed|head|norm")
    muon = gradax.muon(
        0.02, adam_learning_rate=3e-3, muon_weight_dimension_numbers=dims
    )
    adamw = gradax.adamw(3e-3)
    return {"muon": train(muon, steps, "muon"), "adamw": train(adamw, steps, "adamw")}


if __name__ == "__main__":
    main()
