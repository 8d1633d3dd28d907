"""A plain-JAX training loop with Muon: no framework, just a dict of arrays.

The hidden weight matrices are orthogonalized by Muon; the biases and the
input and output layers go to AdamW (`muon_labels` prints the routing).
Training steps run in chunks inside `jax.lax.scan`, so Python is visited
once per chunk, and the optimizer is an argument of the compiled function.

Run: python examples/plain_jax.py
"""

import jax
import jax.numpy as jnp

import gradax


def dense(key, m, n):
    return {"w": jax.random.normal(key, (m, n)) / jnp.sqrt(m), "b": jnp.zeros(n)}


def init_params(key, width=64, depth=2):
    keys = jax.random.split(key, depth + 2)
    return {
        "inp": dense(keys[0], 2, width),
        "hidden": [dense(k, width, width) for k in keys[1:-1]],
        "head": dense(keys[-1], width, 1),
    }


def predict(params, x):
    for layer in [params["inp"], *params["hidden"]]:
        x = jax.nn.gelu(x @ layer["w"] + layer["b"])
    return (x @ params["head"]["w"] + params["head"]["b"])[:, 0]


def make_data(key, n=512):
    """Two interleaved spirals: points in the plane, labels 0 and 1."""
    k1, k2 = jax.random.split(key)
    t = jax.random.uniform(k1, (n,), minval=0.5, maxval=3 * jnp.pi)
    label = jax.random.bernoulli(k2, 0.5, (n,)).astype(jnp.float32)
    sign = 2 * label - 1
    x = sign[:, None] * jnp.stack([t * jnp.cos(t), t * jnp.sin(t)], axis=1) / 5
    return x, label


def loss_fn(params, x, y):
    logits = predict(params, x)
    return jnp.mean(jnp.logaddexp(0.0, logits) - y * logits)  # cross-entropy


@jax.jit
def train_chunk(tx, params, state, x, y):
    """Twenty-five optimizer steps in one compiled call."""

    def step(carry, _):
        params, state = carry
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, state = tx.update(grads, state, params)
        return (gradax.apply_updates(params, updates), state), loss

    (params, state), losses = jax.lax.scan(step, (params, state), length=25)
    return params, state, losses


def main(steps: int = 300) -> list[float]:
    x, y = make_data(jax.random.key(0))
    params = init_params(jax.random.key(1))
    _, dims = gradax.muon_labels(params, exclude="inp|head")  # prints the routing
    tx = gradax.chain(
        gradax.clip_by_global_norm(1.0),
        gradax.muon(0.02, adam_learning_rate=3e-3, muon_weight_dimension_numbers=dims),
    )
    state = tx.init(params)
    history = []
    for done in range(25, steps + 25, 25):
        params, state, losses = train_chunk(tx, params, state, x, y)
        history.extend(losses.tolist())
        if done % 100 == 0 or done >= steps:
            accuracy = jnp.mean((predict(params, x) > 0) == (y > 0.5))
            print(f"step {done:4d}  loss {history[-1]:.4f}  accuracy {accuracy:.3f}")
    return history


if __name__ == "__main__":
    main()
