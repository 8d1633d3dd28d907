"""The problem and the comparison the reference-fixture tests share.

benchmarks/reference_suite.py runs each reference (repository, commit and
file in each fixture) and writes its trajectory: the parameters after a few
of 20 steps of a perturbed quadratic. A test rebuilds the same problem from
the fixture's seed, runs gradax on it in float64 and compares.

The inputs, drawn as each fixture's "how" says: rng =
numpy.random.default_rng(seed); x0, target and 0.1 * noise (one per step)
from rng.standard_normal in that order, then what the case draws (Dion's
Q0); g_t = (x_t - target) + noise_t in the reference's layout.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax_versions import enable_x64

import gradax

FIXTURES = pathlib.Path(__file__).parent / "fixtures"


def same(a):
    return a


def transpose(a):
    """torch's (..., fan_out, fan_in) <-> gradax's (..., fan_in, fan_out)."""
    return a.swapaxes(-1, -2)


def problem(seed, shape, steps):
    rng = np.random.default_rng(seed)
    x0 = rng.standard_normal(shape)
    target = rng.standard_normal(shape)
    noise = 0.1 * rng.standard_normal((steps, *shape))
    return rng, x0, target, noise


def trajectory(
    tx,
    x0,
    target,
    noise,
    layout: Callable = same,
    back: Callable | None = None,
    key="w",
    edit_state=None,
    quiet_steps=0,
):
    """x_t for every step, in the reference's layout (traced: runs in jit).

    `layout` maps the reference's layout to gradax's; `back` maps it back
    (None: `layout` is its own inverse, as a transpose is). The first
    `quiet_steps` gradients are zero (benchmarks/references/_harness.py's
    `Problem.quiet_steps`).
    """
    back = layout if back is None else back
    params = {key: layout(x0)}
    state = tx.init(params)
    if edit_state is not None:
        state = edit_state(state)

    def step(carry, inputs):
        params, state = carry
        n, t = inputs
        g = layout(back(params[key]) - target + n)
        g = {key: jnp.where(t < quiet_steps, jnp.zeros_like(g), g)}
        updates, state = tx.update(g, state, params)
        params = gradax.apply_updates(params, updates)
        return (params, state), back(params[key])

    steps = jnp.arange(len(noise))
    return jax.lax.scan(step, (params, state), (noise, steps))[1]


def check_fixture(name, build, tolerance):
    """gradax within `tolerance` of every case of fixture `name`, relative
    to how far the reference moved (max over the kept steps, Frobenius).

    `build(case, steps)` returns `(x0, run)`, `run()` the trajectory; every
    case of a fixture runs in one compiled program.
    """
    fixture = json.loads((FIXTURES / name).read_text())
    kept = np.asarray(fixture["kept_steps"]) - 1
    with enable_x64(True):
        built = [build(case, fixture["steps"]) for case in fixture["cases"]]
        got = jax.jit(lambda: [run() for _, run in built])()
        for case, (x0, _), ours in zip(fixture["cases"], built, got, strict=True):
            ref = np.asarray(case["x"])
            ours = np.asarray(ours)[kept]
            assert ours.dtype == np.float64
            moved = max(np.linalg.norm(r - x0) for r in ref)
            gap = max(np.linalg.norm(a - b) for a, b in zip(ours, ref, strict=True))
            assert gap / moved < tolerance, (case["name"], gap / moved)
