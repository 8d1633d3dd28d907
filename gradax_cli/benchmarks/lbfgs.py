"""Time L-BFGS on a regularized logistic regression: gradax against scipy, optax.

The problem: 4000 samples, 2000 features, L2-regularized logistic loss, in
float64 (``--dtype float32`` for float32), solved from zero to a gradient norm
of 1e-5 in at most ``--max-steps`` iterations (2000 by default) by

- ``gradax.minimize`` (the whole run is one compiled ``lax.while_loop``);
- scipy's L-BFGS-B, fed a jitted ``value_and_grad`` and stopped by a callback
  at the same gradient norm (its own ``ftol``/``gtol`` tests switched off);
- a hand-written jitted ``lax.while_loop`` over ``optax.lbfgs`` with
  ``optax.value_and_grad_from_state``, as optax's documentation suggests.

All three take the same memory size (10); scipy and optax are left out where
they are not installed. Each solver's iterations, evaluations of the objective
and gradient, and final loss are printed beside its time. Times are medians of
15 interleaved runs (see ``common.time_interleaved``). ``--quick`` solves a
1000x500 problem instead. ``run`` sets float64 on for the whole process in
float64 and off in float32, so that float32 is the plain JAX setting
(``gradax bench`` runs each benchmark in a process of its own).

Run: python benchmarks/bench_lbfgs.py [--quick] [--dtype float32]
[--max-steps 300] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import gradax

from .common import comparisons_against, optional_optax, time_interleaved

TOL = 1e-5
MAX_STEPS = 2000


def make_problem(
    samples: int = 4000, features: int = 2000, seed: int = 0, dtype: str = "float64"
):
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

    # Drawn in float64 with NumPy, then rounded once: both dtypes solve the
    # same problem.
    return (
        loss,
        jnp.asarray(x.astype(dtype)),
        jnp.asarray(y.astype(dtype)),
        jnp.zeros(features, dtype),
    )


def solve_gradax(loss, x, y, w0, max_steps: int = MAX_STEPS):
    result = gradax.minimize(loss, w0, args=(x, y), tol=TOL, max_steps=max_steps)
    return result.params, result.value, result.steps, result.num_fun_evals


def make_solve_scipy(loss, max_steps: int = MAX_STEPS):
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
            options=dict(maxiter=max_steps, maxcor=10, ftol=0.0, gtol=0.0),
        )
        return result.x, result.fun, result.nit, result.nfev

    return solve


def make_solve_optax(loss, max_steps: int = MAX_STEPS):
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
            return (first | (optax.tree.norm(grad) > TOL)) & (k < max_steps)

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


DTYPES = ("float64", "float32")


def run(
    quick: bool = False, dtype: str = "float64", max_steps: int = MAX_STEPS
) -> dict:
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    jax.config.update("jax_enable_x64", dtype == "float64")
    samples, features = (1000, 500) if quick else (4000, 2000)
    loss, x, y, w0 = make_problem(samples, features, dtype=dtype)
    solvers = {"gradax": lambda: solve_gradax(loss, x, y, w0, max_steps)}
    if _optional_scipy():
        solve_scipy = make_solve_scipy(loss, max_steps)
        solvers["scipy"] = lambda: solve_scipy(x, y, w0)
    if optional_optax() is not None:
        solve_optax = make_solve_optax(loss, max_steps)
        solvers["optax"] = lambda: solve_optax(x, y, w0)
    # One compiled program for the checks (eager grad compiles each op).
    grad_norm_of = jax.jit(lambda w, x, y: jnp.linalg.norm(jax.grad(loss)(w, x, y)))
    outcomes = {}
    for name, solve in solvers.items():
        w, value, steps, evals = jax.block_until_ready(solve())
        grad_norm = grad_norm_of(jnp.asarray(w, dtype), x, y)
        outcomes[name] = dict(
            loss=float(value),
            iterations=int(steps),
            evaluations=int(evals),
            grad_norm=float(grad_norm),
        )
    # Each solver has run once above: compiled and warm.
    times = time_interleaved(solvers, repeats=3 if quick else 15, inner=1, warmup=False)
    label = f"lbfgs {samples}x{features}" + ("" if dtype == "float64" else f" {dtype}")
    steps = ", ".join(f"{name} {o['iterations']}" for name, o in outcomes.items())
    return {
        "benchmark": (
            f"L-BFGS, logistic regression {samples}x{features}, {dtype}, "
            f"to |g| <= 1e-5 in at most {max_steps} iterations"
        ),
        "device": str(jax.devices()[0]),
        # Timings on a shared machine mean little without its load.
        "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "dtype": dtype,
        "max_steps": max_steps,
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
    parser.add_argument("--dtype", choices=DTYPES, default="float64")
    parser.add_argument("--max-steps", type=int, default=MAX_STEPS)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = run(args.quick, args.dtype, args.max_steps)
    print(result["benchmark"], "on", result["device"])
    if result["load_average"] is not None:
        print("  load average (1, 5, 15 min):", *result["load_average"])
    for name, seconds in result["seconds"].items():
        o = result["outcomes"][name]
        print(
            f"  {name:7s} {seconds:8.3f} s  {o['iterations']:4d} iterations  "
            f"{o['evaluations']:4d} evaluations  loss {o['loss']!r}  "
            f"|grad| {o['grad_norm']:.2e}"
        )
    for row in result["comparisons"]:
        if row["reference"] is not None:
            print(f"  gradax/{row['reference']} {row['ratio']:.3f}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
