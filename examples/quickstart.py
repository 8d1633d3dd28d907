"""Fit a small MLP with gradax: the one-import switch from optax.

Run: python examples/quickstart.py
"""

import jax
import jax.numpy as jnp

import gradax  # was: import optax


def init_mlp(key, sizes=(1, 32, 32, 1)):
    keys = jax.random.split(key, len(sizes) - 1)
    return [
        {"w": jax.random.normal(k, (m, n)) / jnp.sqrt(m), "b": jnp.zeros(n)}
        for k, m, n in zip(keys, sizes[:-1], sizes[1:], strict=True)
    ]


def mlp(params, x):
    for layer in params[:-1]:
        x = jnp.tanh(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def loss_fn(params, x, y):
    return jnp.mean((mlp(params, x) - y) ** 2)


@jax.jit
def train_step(tx, params, state, x, y):
    # The optimizer is an argument: a new learning rate does not recompile.
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    updates, state = tx.update(grads, state, params)
    return gradax.apply_updates(params, updates), state, loss


def main(steps: int = 500) -> list[float]:
    x = jnp.linspace(-3, 3, 256)[:, None]
    y = jnp.sin(2 * x)
    params = init_mlp(jax.random.key(0))
    # A peak of 5e-3: at 1e-2 this run's last losses depend on float32's
    # summation order (two CPUs printed 0.0032 and 0.0041 at step 499).
    schedule = gradax.warmup_cosine_decay_schedule(0.0, 5e-3, 50, steps)
    tx = gradax.chain(
        gradax.clip_by_global_norm(1.0),
        gradax.adamw(schedule, weight_decay=1e-4),
    )
    print(tx)
    state = tx.init(params)
    losses = []
    for step in range(steps):
        params, state, loss = train_step(tx, params, state, x, y)
        losses.append(float(loss))
        if step % 100 == 0 or step == steps - 1:
            print(f"step {step:4d}  loss {float(loss):.5f}")
    return losses


if __name__ == "__main__":
    main()
