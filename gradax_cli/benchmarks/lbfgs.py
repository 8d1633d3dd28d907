"""Time L-BFGS on a regularized logistic regression: gradax against scipy, optax.

The problem: 4000 samples, 2000 features, L2-regularized logistic loss, in
float64, solved from zero to a gradient norm of 1e-5 by

- ``gradax.minimize`` (the whole run is one compiled ``lax.while_loop``);
- scipy's L-BFGS-B, fed a jitted ``value_and_grad`` and stopped by a callback
  at the same gradient norm (its own ``ftol``/``gtol`` tests switched off);
- a hand-written jitted ``lax.while_loop`` over ``optax.lbfgs`` with
  ``optax.value_and_grad_from_state``, as optax's documentation suggests.

All three take the same memory size (10); scipy and optax are left out where
they are not installed. Times are medians of interleaved runs (see
``common.time_interleaved``). ``--quick`` solves a 1000x500 problem instead.
``run`` turns on float64 for the whole process (``gradax bench`` runs each
benchmark in a process of its own).

Run: python benchmarks/bench_lbfgs.py [--quick] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import gradax

from .common import comparisons_against, optional_optax, time_interleaved

TOL = 1e-5
MAX_STEPS = 2000


def make_problem(samples: int = 4000, features: int = 2000, seed: int = 0):
    """Features of uneven scales, +-1 labels from a noisy linear model, the loss.

    Feature scales spread over about two orders of magnitude make the problem
    ill-conditioned enough for L-BFGS to need tens of iterations.
    """
    rng = np.random.default_rng(seed)
    scales = 3.0 * np.exp(rng.normal(size=features)) / np.sqrt(features)
    x = rng.normal(size=(samples, features)) * scales
    w_true = rng.normal(size=features)
    logits = x @ w_true
    y = np.where(rng.random(samples) < 1 / (1 + np.exp(-logits)), 1.0, -1.0)
    reg = 1e-3

    def loss(w, x, y):
        return jnp.mean(jax.nn.softplus(-y * (x @ w))) + 0.5 * reg * jnp.sum(w * w)

    return loss, jnp.asarray(x), jnp.asarray(y), jnp.zeros(features)


def solve_gradax(loss, x, y, w0):
    result = gradax.minimize(loss, w0, args=(x, y), tol=TOL, max_steps=MAX_STEPS)
    return result.params, result.value, result.steps, result.num_fun_evals


def make_solve_scipy(loss):
    import scipy.optimize

    value_and_grad = jax.jit(jax.value_and_grad(loss))

    def solve(x, y, w0):
        last = {}

        def fun(w):
            value, grad = value_and_grad(w, x, y)
            last["w"], last["grad"] = w.copy(), np.asarray(grad)
            return float(value), last["grad"]

        def callback(intermediate_result):
            if np.array_equal(intermediate_result.x, last["w"]) and (
                np.linalg.norm(last["grad"]) <= TOL
            ):
                raise StopIteration

        result = scipy.optimize.minimize(
            fun,
            np.asarray(w0),
            jac=True,
            method="L-BFGS-B",
            callback=callback,
            options=dict(maxiter=MAX_STEPS, maxcor=10, ftol=0.0, gtol=0.0),
        )
        return result.x, result.fun, result.nit, result.nfev

    return solve


def make_solve_optax(loss):
    import optax

    solver = optax.lbfgs()
    value_and_grad = optax.value_and_grad_from_state(loss)

    @jax.jit
    def solve(x, y, w0):
        def step(carry):
            w, state, k, evals = carry
            value, grad = value_and_grad(w, x, y, state=state)
            updates, state = solver.update(
                grad, state, w, value=value, grad=grad, value_fn=loss, x=x, y=y
            )
            evals += optax.tree.get(state, "info").num_linesearch_steps
            return optax.apply_updates(w, updates), state, k + 1, evals

        def keep_going(carry):
            _, state, k, _ = carry
            grad = optax.tree.get(state, "grad")
            first = k == 0
            return (first | (optax.tree.norm(grad) > TOL)) & (k < MAX_STEPS)

        # One evaluation before the first step, then the line searches'.
        start = (w0, solver.init(w0), 0, 1)
        w, state, k, evals = jax.lax.while_loop(keep_going, step, start)
        return w, optax.tree.get(state, "value"), k, evals

    return solve


def _optional_scipy():
    try:
        import scipy.optimize  # noqa: F401
    except ModuleNotFoundError as error:
        if error.name != "scipy":
            raise
        return False
    return True


def run(quick: bool = False) -> dict:
    jax.config.update("jax_enable_x64", True)
    samples, features = (1000, 500) if quick else (4000, 2000)
    loss, x, y, w0 = make_problem(samples, features)
    solvers = {"gradax": lambda: solve_gradax(loss, x, y, w0)}
    if _optional_scipy():
        solve_scipy = make_solve_scipy(loss)
        solvers["scipy"] = lambda: solve_scipy(x, y, w0)
    if optional_optax() is not None:
        solve_optax = make_solve_optax(loss)
        solvers["optax"] = lambda: solve_optax(x, y, w0)
    # One compiled program for the checks (eager grad compiles each op).
    grad_norm_of = jax.jit(lambda w, x, y: jnp.linalg.norm(jax.grad(loss)(w, x, y)))
    outcomes = {}
    for name, solve in solvers.items():
        w, value, steps, evals = jax.block_until_ready(solve())
        grad_norm = grad_norm_of(jnp.asarray(w), x, y)
        outcomes[name] = dict(
            loss=float(value),
            iterations=int(steps),
            evaluations=int(evals),
            grad_norm=float(grad_norm),
        )
    # Each solver has run once above: compiled and warm.
    times = time_interleaved(solvers, repeats=3 if quick else 10, inner=1, warmup=False)
    label = f"lbfgs {samples}x{features}"
    steps = ", ".join(f"{name} {o['iterations']}" for name, o in outcomes.items())
    return {
        "benchmark": (
            f"L-BFGS, logistic regression {samples}x{features}, float64, to |g| <= 1e-5"
        ),
        "device": str(jax.devices()[0]),
        "seconds": times,
        "outcomes": outcomes,
        "ratio_gradax_over_scipy": (
            times["gradax"] / times["scipy"] if "scipy" in times else None
        ),
        "ratio_gradax_over_optax": (
            times["gradax"] / times["optax"] if "optax" in times else None
        ),
        "comparisons": comparisons_against(label, times, ["scipy", "optax"]),
        "notes": [f"L-BFGS iterations: {steps}; no floor (a whole solve)"],
    }


def main() -> None:
    """Print the timings (``--json FILE`` writes them too)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = run(args.quick)
    print(result["benchmark"], "on", result["device"])
    for name, seconds in result["seconds"].items():
        o = result["outcomes"][name]
        print(
            f"  {name:7s} {seconds:8.3f} s  {o['iterations']:4d} iterations  "
            f"{o['evaluations']:4d} evaluations  loss {o['loss']:.12f}  "
            f"|grad| {o['grad_norm']:.2e}"
        )
    for row in result["comparisons"]:
        if row["reference"] is not None:
            print(f"  gradax/{row['reference']} {row['ratio']:.3f}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
