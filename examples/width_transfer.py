"""Width transfer: tune the learning rate on a narrow model, train a wide one.

`gradax.width_transfer(tx, base_params)` scales each parameter's update by
its role and its width relative to the base model (µP for the whole
optimizer), so the rate tuned at the base width holds at any width. The
model keeps its half of the rule: hidden weights of variance `1/fan_in`
and an output layer that starts at zero. `gradax.width_multipliers` prints
the factors: here 1 for the input layer (its fan-in does not grow) and 1/8
for the hidden and output layers at 8 times the base width.

The coordinate check (`gradax.coord_check`) trains the model at two widths
for a few steps (two seeds each) and measures how much each activation
moves; its slope against width should be 0, within a tolerance derived
from the seeds' spread. With AdamW alone at one rate, the hidden layer and
the output move more in the wider model (slopes near 1, far beyond the
tolerance): the rate tuned at width 32 is too large at 256. Under
`width_transfer` every slope is near 0. The plot shows the output's change
after each step: AdamW's two widths apart, `width_transfer`'s together.

Run: python examples/width_transfer.py
"""

import jax
import jax.numpy as jnp

import gradax

WIDTHS = (32, 256)


def init_params(key, width):
    """µP's initialization: hidden weights 1/fan_in, a zero output layer."""
    k1, k2 = jax.random.split(key)
    return {
        "inp": {"w": jax.random.normal(k1, (8, width)) / jnp.sqrt(8.0)},
        "hidden": {"w": jax.random.normal(k2, (width, width)) / jnp.sqrt(width)},
        "head": {"w": jnp.zeros((width, 1))},
    }


def loss_fn(params, batch):
    """The loss, and the activations the check watches."""
    x, y = batch
    h1 = jnp.tanh(x @ params["inp"]["w"])
    h2 = jnp.tanh(h1 @ params["hidden"]["w"])
    out = (h2 @ params["head"]["w"])[:, 0]
    return jnp.mean((out - y) ** 2), {"input layer": h1, "hidden": h2, "output": out}


def main(steps: int = 8) -> dict[str, list[float]]:
    key = jax.random.key(0)
    x = jax.random.normal(key, (64, 8))
    batch = (x, jnp.sin(x @ jnp.linspace(-1.0, 1.0, 8)))
    base = init_params(key, WIDTHS[0])
    adamw = gradax.adamw(1e-3, weight_decay=1e-4)
    transfer = gradax.width_transfer(adamw, base)
    # AdamW's rule: base fan-in over fan-in.
    gradax.width_multipliers(
        init_params(key, WIDTHS[-1]), base, adamw, print_report=True
    )

    curves = {}
    for name, tx in [("AdamW", adamw), ("width_transfer(AdamW)", transfer)]:
        check = gradax.coord_check(
            init_params,
            loss_fn,
            WIDTHS,
            tx,
            batch,
            steps=steps,
            seeds=2,
            print_table=False,
        )
        slopes, tolerance = check.slopes(), check.tolerance()
        shown = "  ".join(
            f"{layer} {slopes[layer]:+.2f} ({tolerance[layer]:.2f})"
            for layer in check.layers
        )
        print(f"{name + ':':23s} slope (tolerance) {shown}")
        output = check.layers.index("output")
        for w, width in enumerate(check.widths):
            # The mean over the seeds, after each step.
            rms = check.rms[w, :, :, output].mean(axis=0)
            curves[f"{name}, width {width}"] = [float(v) for v in rms]
    return curves


if __name__ == "__main__":
    main()
