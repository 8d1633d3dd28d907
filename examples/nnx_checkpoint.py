"""Save a flax nnx optimizer with orbax, and restore it into a template.

`nnx.state(optimizer)` is the optimizer's step and the gradax state
(Adam's moments and count, the schedule's count), as nnx Variables; orbax
saves it as it is, beside `nnx.state(model)`. To restore, build the model
and the optimizer as at the start (the same configuration) and pass their
`nnx.state` as the targets: orbax fills them with the saved arrays, and
`nnx.update` puts them in place. The resumed run is the run that never
stopped, to the last bit, and the learning-rate schedule resumes at the
saved step.

Restoring without a target gives plain dicts in place of nnx's Variables,
which `nnx.update` does not take: keep the template. To change the
configuration on resuming (a learning rate, a schedule, a clip), see
[Change the learning rate on resuming](change_learning_rate.md).

Run: python examples/nnx_checkpoint.py
"""

import tempfile

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp
from flax import nnx

import gradax


class MLP(nnx.Module):
    def __init__(self, rngs: nnx.Rngs, hidden: int = 32):
        self.inp = nnx.Linear(8, hidden, rngs=rngs)
        self.out = nnx.Linear(hidden, 1, rngs=rngs)

    def __call__(self, x):
        return self.out(jnp.tanh(self.inp(x)))[..., 0]


def make_data(key, n=256):
    x = jax.random.normal(key, (n, 8))
    y = jnp.sin(x @ jnp.linspace(-1.0, 1.0, 8))
    return x, y


def make_optimizer(model):
    """The same configuration at the start and on resuming."""
    schedule = gradax.warmup_cosine_decay_schedule(0.0, 1e-2, 20, 200, 1e-3)
    tx = gradax.adamw(schedule, weight_decay=1e-4)
    return nnx.Optimizer(model, tx, wrt=nnx.Param)


@nnx.jit
def train_step(model, optimizer, x, y):
    def loss_fn(model):
        return jnp.mean((model(x) - y) ** 2)

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


def train(model, optimizer, steps, x, y):
    return [float(train_step(model, optimizer, x, y)) for _ in range(steps)]


def schedule_count(optimizer):
    # Two counts (Adam's and the schedule's): name the one to read.
    return int(gradax.tree.get(optimizer.opt_state, "ScaleByScheduleState").count)


def main(steps: int = 100) -> dict[str, list[float]]:
    x, y = make_data(jax.random.key(0))
    model = MLP(nnx.Rngs(0))
    optimizer = make_optimizer(model)
    first = train(model, optimizer, steps, x, y)
    print(f"first run: loss {first[0]:.4f} -> {first[-1]:.4f} after {steps} steps")

    with tempfile.TemporaryDirectory() as directory:
        checkpointer = ocp.StandardCheckpointer()
        checkpointer.save(f"{directory}/model", nnx.state(model))
        checkpointer.save(f"{directory}/optimizer", nnx.state(optimizer))
        checkpointer.wait_until_finished()
        # The reference: the same run, never stopped.
        uninterrupted = train(model, optimizer, steps, x, y)

        # Later, in another process: the same model and optimizer, built
        # afresh (other random weights), are the template.
        model = MLP(nnx.Rngs(1))
        optimizer = make_optimizer(model)
        nnx.update(model, checkpointer.restore(f"{directory}/model", nnx.state(model)))
        nnx.update(
            optimizer,
            checkpointer.restore(f"{directory}/optimizer", nnx.state(optimizer)),
        )
    print(
        f"restored: optimizer.step {int(optimizer.step[...])}, "
        f"schedule count {schedule_count(optimizer)}"
    )
    resumed = train(model, optimizer, steps, x, y)
    gap = max(abs(a - b) for a, b in zip(resumed, uninterrupted, strict=True))
    print(f"never stopped: loss {uninterrupted[-1]:.4f} after {2 * steps} steps")
    print(f"resumed:       loss {resumed[-1]:.4f} (largest gap to it: {gap:.1e})")
    before = [float("nan")] * (steps - 1) + [first[-1]]
    return {
        "first run": first,
        "never stopped": before + uninterrupted,
        "restored into a template": before + resumed,
    }


if __name__ == "__main__":
    main()
