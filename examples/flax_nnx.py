"""Train a flax nnx model with a gradax optimizer inside `nnx.Optimizer`.

gradax transformations have optax's `init`/`update` protocol, so
`nnx.Optimizer` takes them as they are. Here Muon orthogonalizes the hidden
weight matrix (flax's `Linear` kernels are `(in, out)`, the layout Muon
expects) and AdamW handles the biases and the input and output layers.

Run: python examples/flax_nnx.py
"""

import jax
import jax.numpy as jnp
from flax import nnx

import gradax


class MLP(nnx.Module):
    def __init__(self, rngs: nnx.Rngs, hidden: int = 64):
        self.inp = nnx.Linear(2, hidden, rngs=rngs)
        self.hidden = nnx.Linear(hidden, hidden, rngs=rngs)
        self.head = nnx.Linear(hidden, 1, rngs=rngs)

    def __call__(self, x):
        x = jax.nn.gelu(self.inp(x))
        x = jax.nn.gelu(self.hidden(x))
        return self.head(x)[..., 0]


def make_data(key, n=512):
    """Two interleaved spirals: points in the plane, labels 0 and 1."""
    k1, k2 = jax.random.split(key)
    t = jax.random.uniform(k1, (n,), minval=0.5, maxval=3 * jnp.pi)
    label = jax.random.bernoulli(k2, 0.5, (n,)).astype(jnp.float32)
    sign = 2 * label - 1
    x = sign[:, None] * jnp.stack([t * jnp.cos(t), t * jnp.sin(t)], axis=1) / 5
    return x, label


def loss_fn(model, x, y):
    return jnp.mean(
        jnp.logaddexp(0.0, model(x)) - y * model(x)  # binary cross-entropy
    )


@nnx.jit
def train_step(model, optimizer, x, y):
    loss, grads = nnx.value_and_grad(loss_fn)(model, x, y)
    optimizer.update(model, grads)  # flax >= 0.11: the model comes first
    return loss


def main(steps: int = 300) -> list[float]:
    x, y = make_data(jax.random.key(0))
    model = MLP(nnx.Rngs(0))

    # Only the hidden 64x64 kernel goes to Muon; "inp" and "head" are the
    # input and output layers, which stay on AdamW. The routing is a function
    # of the tree the optimizer is given: nnx.Optimizer gives init the
    # nnx.Param variables and update their arrays, and the function routes
    # both. muon_labels prints the routing once, when init runs.
    def routing(params):
        return gradax.muon_labels(params, exclude="inp|head")[1]

    tx = gradax.chain(
        gradax.clip_by_global_norm(1.0),
        gradax.muon(
            0.02, adam_learning_rate=3e-3, muon_weight_dimension_numbers=routing
        ),
    )
    optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
    losses = []
    for step in range(steps):
        loss = train_step(model, optimizer, x, y)
        losses.append(float(loss))
        if step % 100 == 0 or step == steps - 1:
            accuracy = jnp.mean((model(x) > 0) == (y > 0.5))
            print(f"step {step:4d}  loss {float(loss):.4f}  accuracy {accuracy:.3f}")
    return losses


if __name__ == "__main__":
    main()
