"""Resume a checkpoint with another learning rate or weight decay.

The first run trains with AdamW (a warmup-cosine learning rate, a constant
weight decay on the matrices only, a clip) and saves its parameters and
optimizer state with orbax. Then three ways to go on from the checkpoint:

- **The same configuration**: restore into the template `tx.init(params)`.
  This is the run that never stopped.
- **A lower learning rate**: a new peak for the schedule changes numbers,
  not the state's tree, so the new transformation's `init` is the template.
  The schedule's count is restored with the rest: the new schedule resumes
  at the saved step, not at its warmup.
- **The weight decay becomes a schedule**: the decay now keeps a count, so
  the checkpoint no longer fits the new `init`. Restore into the template
  of the configuration that saved it, and `gradax.tree.carry_state` moves
  each leaf to its place in the new state. The new count fits Adam's count
  and the learning-rate schedule's equally well; both hold the same value,
  so it takes that value, and `strict=True` passes.

The same holds for a constant learning rate that becomes a schedule (the
schedule's count takes Adam's). With `inject_hyperparams` the learning rate
is in the state itself: `gradax.tree.set(state, learning_rate=...)` changes
it without a new transformation.

Run: python examples/change_learning_rate.py
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
        "b1": jnp.zeros(width),
        "w2": jax.random.normal(k2, (width, 1)) / jnp.sqrt(width),
    }


def loss_fn(params, x, y):
    hidden = jnp.tanh(x @ params["w1"] + params["b1"])
    return jnp.mean(((hidden @ params["w2"])[:, 0] - y) ** 2)


def make_tx(peak=1e-2, weight_decay=0.05):
    """AdamW with a warmup-cosine learning rate, the matrices decayed."""
    schedule = gradax.warmup_cosine_decay_schedule(0.0, peak, 20, 300, peak / 10)
    return gradax.chain(
        gradax.clip_by_global_norm(1.0),
        gradax.adamw(
            schedule,
            weight_decay=weight_decay,
            mask=lambda params: jax.tree.map(lambda p: p.ndim == 2, params),
        ),
    )


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
    tx = make_tx()
    params, state, first = train(tx, params, tx.init(params), steps, x, y)
    print(f"first run: loss {first[0]:.4f} -> {first[-1]:.4f} after {steps} steps")
    # The reference: the same run, never stopped.
    _, _, uninterrupted = train(tx, params, state, steps, x, y)

    with tempfile.TemporaryDirectory() as directory:
        checkpointer = ocp.StandardCheckpointer()
        path = f"{directory}/step_{steps}"
        checkpointer.save(path, {"params": params, "opt_state": state})
        checkpointer.wait_until_finished()

        def restore(template_tx):
            # The target gives the arrays their classes back (and checks
            # every shape): a state that update takes as it is.
            template = {"params": params, "opt_state": template_tx.init(params)}
            return checkpointer.restore(path, template)

        same = restore(tx)
        lower_tx = make_tx(peak=3e-3)
        lower = restore(lower_tx)
        saved = restore(tx)

    curves = {}
    for name, new_tx, restored in [
        ("same configuration", tx, same),
        ("lower learning rate", lower_tx, lower),
    ]:
        _, _, curves[name] = train(
            new_tx, restored["params"], restored["opt_state"], steps, x, y
        )

    decay = gradax.cosine_decay_schedule(0.05, decay_steps=2 * steps)
    scheduled_tx = make_tx(weight_decay=decay)
    carried, report = gradax.tree.carry_state(
        saved["opt_state"], scheduled_tx, saved["params"], strict=True
    )
    print(report)
    _, _, curves["weight decay schedule"] = train(
        scheduled_tx, saved["params"], carried, steps, x, y
    )

    for name, losses in curves.items():
        print(f"{name + ':':26s} loss {losses[-1]:.4f} after {2 * steps} steps")
    same = curves["same configuration"]
    gap = max(abs(a - b) for a, b in zip(same, uninterrupted, strict=True))
    print(f"same configuration against the run that never stopped: gap {gap:.1e}")
    before = [float("nan")] * (steps - 1) + [first[-1]]
    return {"first run": first} | {name: before + c for name, c in curves.items()}


if __name__ == "__main__":
    main()
