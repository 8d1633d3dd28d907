"""A NaN or an infinite gradient on one step leaves no trace.

For every registry entry (and the contrib optimizers whose update needs
extra arguments), under ``apply_if_finite`` or under ``MultiSteps`` with
``skip_not_finite`` (each canonical entry under one of them in CI; under
both, and the kwargs variants too, with ``-m slow``): a step whose gradients
hold a NaN, and later one that holds an infinity, leave the parameters and
every leaf of the inner optimizer's state bit-identical, and each following
finite step gives exactly what a run that never saw the bad steps gives.
The guarded run and the reference run are one scan in one compiled program
per entry and guard."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance_base import make_params, quadratic_grads
from registry import ENTRIES, EXTRA_ARG_CASES, entry_id, is_variant
from registry_base import loss_fn

import gradax

CLEAN, NAN, INF = 0, 1, 2

# One scan per guard runs two trajectories from the same start: first the
# guarded one (finite step 0, a NaN, finite step 1, an infinity, finite step
# 2), then, after a reset, the reference that never sees a bad step (finite
# steps 0, 1, 2). Both go through the same compiled loop body, so the only
# thing that can tell them apart is the guard; two separately compiled loops
# may round differently (XLA contracts multiply-adds per fusion).
STEPS = np.array([0, 1, 1, 2, 2, 0, 1, 2], np.int32)
KINDS = np.array([CLEAN, NAN, CLEAN, INF, CLEAN, CLEAN, CLEAN, CLEAN], np.int32)
RESETS = np.array([0, 0, 0, 0, 0, 1, 0, 0], bool)
GUARDED = slice(0, 5)
# The reference step each guarded step must match: after steps 0, 0, 1, 1, 2.
MATCHING_REFERENCE = np.array([5, 5, 6, 6, 7])

GUARDS = {
    "apply_if_finite": (
        lambda inner: gradax.apply_if_finite(inner, max_consecutive_errors=2),
        lambda state: state.inner_state,
    ),
    "MultiSteps(skip_not_finite)": (
        lambda inner: gradax.MultiSteps(
            inner, 1, should_skip_update_fn=gradax.skip_not_finite
        ),
        lambda state: state.inner_opt_state,
    ),
}


def _poisoned(grads: dict[str, jax.Array], kind: jax.Array) -> dict[str, jax.Array]:
    """A NaN in the matrix, or -inf in the vector; the gradients otherwise."""
    m, v = grads["m"], grads["v"]
    m = m.at[0, 0].set(jnp.where(kind == NAN, jnp.nan, m[0, 0]))
    v = v.at[1].set(jnp.where(kind == INF, -jnp.inf, v[1]))
    return {**grads, "m": m, "v": v}


def _run(tx, inner_state, extra, params, steps, kinds, resets):
    """Params and inner state after each step, in one scan."""
    start = (params, tx.init(params))

    def body(carry, x):
        step, kind, reset = x
        p, s = jax.lax.cond(reset, lambda: start, lambda: carry)
        grads = _poisoned(quadratic_grads(p, step.astype(jnp.float32)), kind)
        updates, s = tx.update(grads, s, p, **extra(p, step))
        p = gradax.apply_updates(p, updates)
        return (p, s), (p, inner_state(s))

    _, out = jax.lax.scan(body, start, (steps, kinds, resets))
    return out


def _no_extra(params: Any, step: jax.Array) -> dict[str, Any]:
    del params, step
    return {}


def _scenario(build: Callable[[], Any], extra, guards) -> Callable[..., Any]:
    """The runs under each guard, in one compiled program."""

    # The steps and kinds are arguments, not constants: XLA would fold
    # constant inputs at compile time, with its own sin.
    def scenario(params, steps, kinds, resets):
        inner = build()
        return {
            name: _run(wrap(inner), inner_state, extra, params, steps, kinds, resets)
            for name, (wrap, inner_state) in guards.items()
        }

    return jax.jit(scenario)


def _bits(x: Any) -> np.ndarray:
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    return np.asarray(x)


def _check(build, extra, guards) -> None:
    runs = _scenario(build, extra, guards)(make_params(), STEPS, KINDS, RESETS)
    problems = []
    for guard, run in runs.items():
        # The premise: the run that sees no bad step stays finite (an entry
        # whose own steps give NaN would be compared NaN against NaN).
        reference_params = jax.tree.leaves(run[0])
        if not all(
            np.isfinite(_bits(x)[MATCHING_REFERENCE]).all() for x in reference_params
        ):
            problems.append(f"{guard}: the reference run's params are not finite")
        for path, leaf in jax.tree_util.tree_flatten_with_path(run)[0]:
            bits = _bits(leaf)
            guarded, reference = bits[GUARDED], bits[MATCHING_REFERENCE]
            for i in range(len(guarded)):
                # Bitwise: NaN equals NaN, and -0.0 differs from 0.0.
                if guarded[i].tobytes() != reference[i].tobytes():
                    label = ("params", "inner state")[path[0].idx]
                    where = jax.tree_util.keystr(path[1:])
                    problems.append(f"{guard} step {i}: {label}{where}")
    assert not problems, "\n".join(problems)


def _only(name: str) -> dict[str, Any]:
    return {name: GUARDS[name]}


# In CI each canonical entry (registry.CANONICAL) is checked under one
# guard: every MULTI_STEPS_STRIDE-th (spread over the registry modules) under
# MultiSteps, the others under apply_if_finite; each under the other guard,
# and the kwargs variants under both, with -m slow. Each check is a compile
# of its own.
MULTI_STEPS_STRIDE = 6
SLOW = pytest.mark.slow


def _guarded_entries(multi_steps: bool):
    params, turn = [], 0
    for e in ENTRIES:
        in_ci = not is_variant(e) and (turn % MULTI_STEPS_STRIDE == 0) == multi_steps
        params.append(pytest.param(e, id=entry_id(e), marks=() if in_ci else SLOW))
        turn += not is_variant(e)
    return params


@pytest.mark.parametrize("entry", _guarded_entries(multi_steps=False))
def test_apply_if_finite_skips_a_bad_step_without_a_trace(entry):
    _check(entry.build, _no_extra, _only("apply_if_finite"))


@pytest.mark.parametrize("entry", _guarded_entries(multi_steps=True))
def test_skip_not_finite_skips_a_bad_step_without_a_trace(entry):
    _check(entry.build, _no_extra, _only("MultiSteps(skip_not_finite)"))


def _value_extra(case):
    # The objective's value as test_contrib_extra_args gives it.
    def extra(params, step):
        value = loss_fn(params).astype(jnp.float32) + 0.01 * jnp.sin(step)
        return case.extra(params, value)

    return extra


@pytest.mark.parametrize("case", EXTRA_ARG_CASES, ids=str)
def test_a_bad_step_is_skipped_with_extra_args(case):
    _check(case.make, _value_extra(case), GUARDS)
