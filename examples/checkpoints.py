"""Checkpoints with orbax, and `carry_state` across a configuration change.

A run trains with Adam and saves its parameters and optimizer state. Later
the configuration changes: a clip joins the chain and the learning rate
becomes a schedule, which changes the state tree, so the checkpoint's state
no longer fits the new optimizer. `gradax.tree.carry_state` moves each leaf
(Adam's moments and step count) to its place in the new state and reports
what it did, and training resumes where it stopped: the schedule at step
100 of its 200, Adam's moments as they were. Starting the new optimizer from
`init` instead restarts the schedule at its peak and the moments at zero, so
the first steps are full-size sign-like steps and the loss jumps before it
falls again: a different run, not a resumed one.

Run: python examples/checkpoints.py
"""

import tempfile

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp

import gradax


def make_data(key, n=256):
    x = jax.random.normal(key, (n, 8))
    y = jnp.sin(x @ jnp.linspace(-1.0, 1.0, 8))
    return x, y


def init_params(key, width=32):
    k1, k2 = jax.random.split(key)
    return {
        "w1": jax.random.normal(k1, (8, width)) / jnp.sqrt(8.0),
        "w2": jax.random.normal(k2, (width,)) / jnp.sqrt(width),
    }


def loss_fn(params, x, y):
    return jnp.mean((jnp.tanh(x @ params["w1"]) @ params["w2"] - y) ** 2)


def train(tx, params, state, steps, x, y):
    @jax.jit
    def step(params, state):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, state = tx.update(grads, state, params)
        return gradax.apply_updates(params, updates), state, loss

    losses = []
    for _ in range(steps):
        params, state, loss = step(params, state)
        losses.append(float(loss))
    return params, state, losses


def main(steps: int = 100) -> dict[str, list[float]]:
    x, y = make_data(jax.random.key(0))
    params = init_params(jax.random.key(1))
    tx = gradax.adam(1e-2)
    params, state, first = train(tx, params, tx.init(params), steps, x, y)
    print(f"first run: loss {first[0]:.4f} -> {first[-1]:.4f} after {steps} steps")

    with tempfile.TemporaryDirectory() as directory:
        checkpointer = ocp.StandardCheckpointer()
        path = f"{directory}/step_{steps}"
        checkpointer.save(path, {"params": params, "opt_state": state})
        checkpointer.wait_until_finished()
        # No target: orbax gives back plain dicts and lists, which is
        # enough for carry_state (it matches leaves by their names).
        restored = checkpointer.restore(path)

    new_tx = gradax.chain(
        gradax.clip_by_global_norm(1.0),
        gradax.adam(gradax.cosine_decay_schedule(1e-2, decay_steps=2 * steps)),
    )
    params = restored["params"]
    carried, report = gradax.tree.carry_state(
        restored["opt_state"], new_tx, params, strict=True
    )
    print(report)
    _, _, resumed = train(new_tx, params, carried, steps, x, y)
    _, _, restarted = train(new_tx, params, new_tx.init(params), steps, x, y)
    print(f"carried state:   loss {resumed[0]:.4f} -> {resumed[-1]:.4f}")
    print(
        f"fresh init:      loss {restarted[0]:.4f} -> {restarted[-1]:.4f} "
        f"(highest {max(restarted):.4f})"
    )
    return {
        "first run": first,
        "resumed, carried state": [*[float("nan")] * (steps - 1), first[-1], *resumed],
        "resumed, fresh init": [*[float("nan")] * (steps - 1), first[-1], *restarted],
    }


if __name__ == "__main__":
    main()
