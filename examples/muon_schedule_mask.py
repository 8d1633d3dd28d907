"""Muon with a learning-rate schedule and a weight-decay mask.

The hidden matrices go to Muon, the input and output layers and the biases
to AdamW (`muon_labels` prints the routing). One warmup-cosine schedule
drives both groups: Muon's `learning_rate` takes it, and the AdamW group
(`adam=`) a tenth of it, written as a function of the step. Weight decay
goes to matrices only: Muon's `weight_decay_mask` chooses among Muon's
leaves, the AdamW group's `mask` among its own; the biases do not decay.

The state then holds four counts (each group's moments and its schedule
keep one), so `gradax.tree.get(state, "count")` raises and names them;
`filtering=` picks one. Here it reads the Muon group's schedule count to
print the learning rate the last step used.

Run: python examples/muon_schedule_mask.py
"""

import jax
import jax.numpy as jnp

import gradax


def dense(key, m, n):
    return {"w": jax.random.normal(key, (m, n)) / jnp.sqrt(m), "b": jnp.zeros(n)}


def init_params(key, width=64):
    keys = jax.random.split(key, 4)
    return {
        "inp": dense(keys[0], 2, width),
        "hidden": [dense(k, width, width) for k in keys[1:3]],
        "head": dense(keys[3], width, 1),
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


def matrices(params):
    """The weight-decay mask: True for 2-D leaves, False for the biases."""
    return jax.tree.map(lambda p: p.ndim == 2, params)


def make_tx(params, steps):
    schedule = gradax.warmup_cosine_decay_schedule(
        init_value=0.0, peak_value=0.02, warmup_steps=30, decay_steps=steps
    )
    _, dims = gradax.muon_labels(params, exclude="inp|head")  # prints the routing
    tx = gradax.muon(
        schedule,
        weight_decay=0.1,
        weight_decay_mask=matrices,
        muon_weight_dimension_numbers=dims,
        adam=gradax.adamw(
            lambda step: 0.1 * schedule(step), weight_decay=0.1, mask=matrices
        ),
    )
    return tx, schedule


def muon_schedule_count(state):
    """The Muon group's schedule count, one of the state's four counts."""

    def is_muon_schedule(path, _):
        in_muon = "'muon'" in jax.tree_util.keystr(path)
        return in_muon and str(path[-1]) == "ScaleByScheduleState.count"

    return gradax.tree.get(state, "count", filtering=is_muon_schedule)


@jax.jit
def train_chunk(tx, params, state, x, y):
    """Fifty optimizer steps in one compiled call."""

    def step(carry, _):
        params, state = carry
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, state = tx.update(grads, state, params)
        return (gradax.apply_updates(params, updates), state), loss

    (params, state), losses = jax.lax.scan(step, (params, state), length=50)
    return params, state, losses


def main(steps: int = 300) -> list[float]:
    x, y = make_data(jax.random.key(0))
    params = init_params(jax.random.key(1))
    tx, schedule = make_tx(params, steps)
    state = tx.init(params)
    found = gradax.tree.get_all_with_path(state, "count")
    counts = [str(path[-1]) for path, _ in found]
    print(f"{len(counts)} counts in the state: {', '.join(counts)}")
    history = []
    for done in range(50, steps + 50, 50):
        params, state, losses = train_chunk(tx, params, state, x, y)
        history.extend(losses.tolist())
        if done % 100 == 0 or done >= steps:
            count = int(muon_schedule_count(state))
            rate = float(schedule(count - 1))  # the last step's
            accuracy = jnp.mean((predict(params, x) > 0) == (y > 0.5))
            print(
                f"step {done:4d}  Muon's learning rate {rate:.5f}  "
                f"loss {history[-1]:.4f}  accuracy {accuracy:.3f}"
            )
    return history


if __name__ == "__main__":
    main()
