"""16-bit training: bfloat16 parameters without losing the small steps.

A bfloat16 number has 8 significant bits: a step smaller than half the gap
to the next bfloat16 value is rounded away, so late in training, when the
steps are small, plain bfloat16 parameters stop moving. Two wrappers keep
the parameters in bfloat16 (2 bytes each, read by the forward pass) and
still take those steps:

- `gradax.master_weights(tx)`: an exact float32 master, kept as the
  bfloat16 parameter plus its 16 low bits in the state (2 more bytes);
- `gradax.stochastic_rounding(tx)`: no master; each step rounds up or down
  at random, so small steps are taken on average.

The same regression runs four ways; float32 is the reference.

Run: python examples/bf16_training.py
"""

import jax
import jax.numpy as jnp

import gradax


def init_params(key, dtype, width=32):
    k1, k2 = jax.random.split(key)
    params = {
        "w1": jax.random.normal(k1, (1, width)),
        "b1": jnp.zeros(width),
        "w2": jax.random.normal(k2, (width, 1)) / jnp.sqrt(width),
    }
    return jax.tree.map(lambda p: p.astype(dtype), params)


def loss_fn(params, x, y):
    hidden = jnp.tanh(x @ params["w1"].astype(jnp.float32) + params["b1"])
    pred = hidden @ params["w2"].astype(jnp.float32)
    return jnp.mean((pred - y) ** 2)


@jax.jit
def train_step(tx, params, state, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    updates, state = tx.update(grads, state, params)
    return gradax.apply_updates(params, updates), state, loss


def train(tx, dtype, steps, name, x, y):
    params = init_params(jax.random.key(0), dtype)
    state = tx.init(params)
    losses = []
    for _ in range(steps):
        params, state, loss = train_step(tx, params, state, x, y)
        losses.append(float(loss))
    print(
        f"{name:20s} dtype {jnp.dtype(params['w1'].dtype).name:8s}  "
        f"final loss {losses[-1]:.3g}"
    )
    return losses


def main(steps: int = 400) -> dict[str, list[float]]:
    x = jnp.linspace(-2, 2, 128)[:, None]
    y = jnp.sin(3 * x)
    # A small learning rate, as late in training: most steps are below
    # bfloat16's resolution.
    adam = gradax.adam(3e-3)
    runs = {
        "float32": (adam, jnp.float32),
        "bfloat16, plain": (adam, jnp.bfloat16),
        "bfloat16, master": (gradax.master_weights(adam), jnp.bfloat16),
        "bfloat16, stochastic": (gradax.stochastic_rounding(adam), jnp.bfloat16),
    }
    return {
        name: train(tx, dtype, steps, name, x, y) for name, (tx, dtype) in runs.items()
    }


if __name__ == "__main__":
    main()
