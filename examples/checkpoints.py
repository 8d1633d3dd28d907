"""Checkpoints with orbax, and `carry_state` across a configuration change.

A run trains with Adam and saves its parameters and optimizer state. Later
the configuration changes: a clip joins the chain and Adam is wrapped in
`inject_hyperparams` (so that its learning rate can be changed during
training). The state tree changes with it, so the checkpoint's state no
longer fits the new optimizer. `gradax.tree.carry_state` moves each leaf
(Adam's moments and step count) to its place in the new state and reports
what it did: the resumed run is the run that never stopped (the clip at 1.0
does not bind here). Starting the new optimizer from `init` instead resets
Adam's moments and bias correction: the loss jumps, and what follows is
another run, not the one that was saved.

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
    # The reference: the same run, never stopped.
    _, _, uninterrupted = train(tx, params, state, steps, x, y)

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
        gradax.inject_hyperparams(gradax.adam)(learning_rate=1e-2),
    )
    params = restored["params"]
    carried, report = gradax.tree.carry_state(
        restored["opt_state"], new_tx, params, strict=True
    )
    print(report)
    _, _, resumed = train(new_tx, params, carried, steps, x, y)
    _, _, restarted = train(new_tx, params, new_tx.init(params), steps, x, y)
    gap = max(abs(a - b) for a, b in zip(resumed, uninterrupted, strict=True))
    print(f"never stopped:  loss {uninterrupted[-1]:.4f} after {2 * steps} steps")
    print(f"carried state:  loss {resumed[-1]:.4f} (largest gap to it: {gap:.1e})")
    print(
        f"fresh init:     loss {restarted[-1]:.4f} (highest on the way "
        f"{max(restarted):.4f})"
    )
    before = [float("nan")] * (steps - 1) + [first[-1]]
    return {
        "first run": first,
        "never stopped": before + uninterrupted,
        "resumed, carried state": before + resumed,
        "resumed, fresh init": before + restarted,
    }


if __name__ == "__main__":
    main()
