"""L-BFGS on a full-batch problem: the step loop, and `gradax.minimize`.

L-BFGS builds a curvature estimate from its last steps and picks each step
length by a line search, so on a smooth deterministic objective it needs far
fewer steps than a first-order method. Its `update` takes the loss function
and the current value and gradient (`value_fn`, `value`, `grad`);
`value_and_grad_from_state` reuses those the line search has already
computed. `gradax.minimize` runs the same loop in one compiled call.

The objective is the Rosenbrock function in 10 dimensions (minimum 0 at all
ones); Adam runs beside it with the same number of steps.

Run: python examples/lbfgs.py
"""

import jax
import jax.numpy as jnp

import gradax


def rosenbrock(x):
    return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def run_lbfgs(x, steps):
    tx = gradax.lbfgs()
    value_and_grad = gradax.value_and_grad_from_state(rosenbrock)

    @jax.jit
    def step(x, state):
        value, grad = value_and_grad(x, state=state)
        updates, state = tx.update(
            grad, state, x, value=value, grad=grad, value_fn=rosenbrock
        )
        return gradax.apply_updates(x, updates), state, value

    state = tx.init(x)
    values = []
    for _ in range(steps):
        x, state, value = step(x, state)
        values.append(float(value))
    return x, values


def run_adam(x, steps):
    tx = gradax.adam(0.05)

    @jax.jit
    def step(x, state):
        value, grad = jax.value_and_grad(rosenbrock)(x)
        updates, state = tx.update(grad, state, x)
        return gradax.apply_updates(x, updates), state, value

    state = tx.init(x)
    values = []
    for _ in range(steps):
        x, state, value = step(x, state)
        values.append(float(value))
    return x, values


def main(steps: int = 60) -> dict[str, list[float]]:
    x0 = jnp.zeros(10)
    x, lbfgs_values = run_lbfgs(x0, steps)
    _, adam_values = run_adam(x0, steps)
    for k in range(0, steps, 10):
        print(f"step {k:3d}  L-BFGS {lbfgs_values[k]:9.3g}  Adam {adam_values[k]:9.3g}")
    print(f"L-BFGS's point after {steps} steps: {x.round(3)}")

    result = gradax.minimize(rosenbrock, x0, tol=1e-5)
    print(
        f"minimize: {result.steps} steps, value {float(result.value):.2g}, "
        f"converged {bool(result.converged)}"
    )
    return {"L-BFGS": lbfgs_values, "Adam": adam_values}


if __name__ == "__main__":
    main()
