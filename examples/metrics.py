"""Log what the optimizer does: gradax.with_metrics and a metric writer.

`gradax.with_metrics` records, inside each compiled step, the gradient norm
before the clip, the update RMS, the parameter norm and the learning rate of
each parameter group (here Muon's hidden matrices and the AdamW group), and
whether the clip fired. `gradax.metrics(state)` reads them as a flat dict;
the training loop stacks them through its `scan` and hands each step's
dict to a writer with clu's `write_scalars(step, scalars)` method, which
any logger (clu, TensorBoard, W&B) can stand in for.

Run: python examples/metrics.py
"""

import jax
import jax.numpy as jnp

import gradax


class DictWriter:
    """A metric writer with clu's interface, keeping every value in memory."""

    def __init__(self):
        self.history: dict[str, list[float]] = {}

    def write_scalars(self, step: int, scalars: dict) -> None:
        for name, value in scalars.items():
            self.history.setdefault(name, []).append(float(value))


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
    return jnp.mean(jnp.logaddexp(0.0, logits) - y * logits)


@jax.jit
def train_chunk(tx, params, state, x, y):
    """Fifty steps in one compiled call; the loss and metrics of each."""

    def step(carry, _):
        params, state = carry
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, state = tx.update(grads, state, params)
        logged = {"loss": loss, **gradax.metrics(state)}
        return (gradax.apply_updates(params, updates), state), logged

    (params, state), logged = jax.lax.scan(step, (params, state), length=50)
    return params, state, logged


def main(steps: int = 300) -> dict[str, list[float]]:
    x, y = make_data(jax.random.key(0))
    params = init_params(jax.random.key(1))
    _, dims = gradax.muon_labels(params, exclude="inp|head", print_report=False)

    def schedule(peak):  # warmup over 30 steps, then cosine down to 10%
        return gradax.warmup_cosine_decay_schedule(0.0, peak, 30, steps, 0.1 * peak)

    tx = gradax.with_metrics(
        gradax.chain(
            gradax.clip_by_global_norm(0.1),
            gradax.muon(
                schedule(0.02),
                adam_learning_rate=schedule(3e-3),
                muon_weight_dimension_numbers=dims,
            ),
        )
    )
    state = tx.init(params)
    print("groups:", gradax.group_labels(tx, params)["hidden"][0])
    writer = DictWriter()
    for start in range(0, steps, 50):
        params, state, logged = train_chunk(tx, params, state, x, y)
        host = jax.device_get(logged)  # one transfer per chunk
        for i in range(50):
            writer.write_scalars(start + i, {k: v[i] for k, v in host.items()})
        h = writer.history
        print(
            f"step {start + 50:3d}  loss {h['loss'][-1]:.4f}  "
            f"lr muon {h['muon/lr'][-1]:.4f} adam {h['adam/lr'][-1]:.5f}  "
            f"update rms muon {h['muon/update_rms'][-1]:.2e} "
            f"adam {h['adam/update_rms'][-1]:.2e}"
        )
    fired = [i + 1 for i, f in enumerate(writer.history["clip/fired"]) if f]
    first = writer.history["grad_norm"][0]
    print(
        f"gradient norm at step 1: {first:.3f}; the clip (0.1) fired at "
        f"{len(fired)} steps, the last at step {fired[-1] if fired else None}"
    )
    print(f"{len(writer.history)} series logged, e.g. {sorted(writer.history)[:4]}")
    return {
        name: writer.history[name]
        for name in ("grad_norm", "muon/update_rms", "adam/update_rms", "muon/lr")
    }


if __name__ == "__main__":
    main()
