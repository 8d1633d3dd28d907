"""Train an equinox model with gradax.

An equinox module is a pytree whose leaves are arrays and other values, so
the optimizer sees only the arrays: `eqx.filter(model, eqx.is_inexact_array)`
for `init`, and gradients from `eqx.filter_value_and_grad`. The
optimizer, a pytree itself, is passed to the jitted step as an argument:
changing its learning rate does not recompile.

Run: python examples/equinox_train.py
"""

import equinox as eqx
import jax
import jax.numpy as jnp

import gradax


def make_data(key, n=256):
    x = jax.random.uniform(key, (n, 1), minval=-3.0, maxval=3.0)
    return x, jnp.sin(2 * x)


@eqx.filter_jit
def train_step(model, state, tx, x, y):
    def loss_fn(model):
        prediction = jax.vmap(model)(x)
        return jnp.mean((prediction - y) ** 2)

    loss, grads = eqx.filter_value_and_grad(loss_fn)(model)
    params = eqx.filter(model, eqx.is_inexact_array)
    updates, state = tx.update(grads, state, params)
    return eqx.apply_updates(model, updates), state, loss


def main(steps: int = 500) -> list[float]:
    x, y = make_data(jax.random.key(0))
    model = eqx.nn.MLP(1, 1, width_size=32, depth=2, key=jax.random.key(1))
    schedule = gradax.warmup_cosine_decay_schedule(0.0, 1e-2, steps // 10, steps)
    tx = gradax.chain(
        gradax.clip_by_global_norm(1.0), gradax.adamw(schedule, weight_decay=1e-4)
    )
    state = tx.init(eqx.filter(model, eqx.is_inexact_array))
    losses = []
    for step in range(steps):
        model, state, loss = train_step(model, state, tx, x, y)
        losses.append(float(loss))
        if step % 100 == 0 or step == steps - 1:
            print(f"step {step:4d}  loss {float(loss):.5f}")
    return losses


if __name__ == "__main__":
    main()
