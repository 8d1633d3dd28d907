"""Sharded equals unsharded for the public transformations the registry cannot run.

tests/conformance/test_conformance.py runs this check on every registry entry; the ones
below need more than gradients (the objective's value, its gradient and
function, a pair of parameters) and are listed in NOT_IN_REGISTRY
(tests/core/test_package_structure.py). Each runs two steps under ``jit`` on one
device and on a 4x2 mesh with Auto or with Explicit axes (one kind each in CI,
in turn; the other with -m slow): the same numbers, and state shaped like a
parameter carries that parameter's sharding.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance_base import (
    mesh_and_shardings,
    one_axis_type_in_turn,
    sharding_params,
)
from jax_versions import P, set_mesh

import gradax


def objective(params):
    """Smooth and not quadratic, so the line searches and L-BFGS have work."""
    total = 0.0
    for weight, x in enumerate(jax.tree.leaves(params), start=1):
        total = total + weight * jnp.sum((x - 0.5) ** 2) + 0.1 * jnp.sum(x**4)
    return total


@dataclass(frozen=True)
class Case:
    build: Callable[[], Any]
    step: Callable[[Any, Any, Any, Any], tuple[Any, Any]]  # tx, grads, state, params
    wrap: Callable[[Any], Any] = lambda p: p  # params as the transformation takes them
    point: Callable[[Any], Any] = lambda p: p  # where the gradient is taken


def _search(tx, g, s, p):
    return tx.update(g, s, p, value=objective(p), grad=g, value_fn=objective)


def _descent_search(tx, g, s, p):
    return tx.update(
        jax.tree.map(jnp.negative, g), s, p, value=objective(p), grad=g,
        value_fn=objective,
    )  # fmt: skip


def _with_value(tx, g, s, p):
    return tx.update(g, s, p, value=objective(p))


CASES = {
    "lbfgs": Case(gradax.lbfgs, _search),
    "scale_by_lbfgs": Case(
        lambda: gradax.scale_by_lbfgs(memory_size=3),
        lambda tx, g, s, p: tx.update(g, s, p),
    ),
    "scale_by_zoom_linesearch": Case(
        lambda: gradax.scale_by_zoom_linesearch(max_linesearch_steps=8), _descent_search
    ),
    "scale_by_backtracking_linesearch": Case(
        lambda: gradax.scale_by_backtracking_linesearch(max_backtracking_steps=8),
        _descent_search,
    ),
    "lookahead": Case(
        lambda: gradax.lookahead(gradax.adam(0.05), sync_period=2, slow_step_size=0.5),
        lambda tx, g, s, p: tx.update(g, s, p),
        wrap=gradax.LookaheadParams.init_synced,
        point=lambda p: p.fast,
    ),
    "polyak_sgd": Case(lambda: gradax.polyak_sgd(max_learning_rate=0.5), _with_value),
    "scale_by_polyak": Case(gradax.scale_by_polyak, _with_value),
    "momo": Case(lambda: gradax.contrib.momo(0.1), _with_value),
    "momo_adam": Case(lambda: gradax.contrib.momo_adam(0.05), _with_value),
    "reduce_on_plateau": Case(
        lambda: gradax.chain(
            gradax.sgd(0.05), gradax.contrib.reduce_on_plateau(patience=0)
        ),
        _with_value,
    ),
    "hutchinson_estimator_diag_hessian": Case(
        gradax.contrib.hutchinson_estimator_diag_hessian,
        lambda tx, g, s, p: tx.update(g, s, p, obj_fn=objective),
    ),
    "FunctionTransformation": Case(
        lambda: gradax.GradientTransformation(
            lambda p: {"trace": jax.tree.map(jnp.zeros_like, p)},
            lambda u, s, p=None: (
                jax.tree.map(lambda x, t: -0.1 * (x + 0.9 * t), u, s["trace"]),
                {"trace": jax.tree.map(lambda x, t: x + 0.9 * t, u, s["trace"])},
            ),
        ),
        lambda tx, g, s, p: tx.update(g, s, p),
    ),
    "stateless": Case(
        lambda: gradax.stateless(lambda u, p: jax.tree.map(lambda x, y: -x * y, u, p)),
        lambda tx, g, s, p: tx.update(g, s, p),
    ),
    "stateless_with_tree_map": Case(
        lambda: gradax.stateless_with_tree_map(lambda u, p: -0.1 * u),
        lambda tx, g, s, p: tx.update(g, s, p),
    ),
    # bfloat16 parameters, float32 gradients (taken at the widened point).
    "master_weights": Case(
        lambda: gradax.master_weights(gradax.adamw(0.05, weight_decay=0.01)),
        lambda tx, g, s, p: tx.update(g, s, p),
        wrap=lambda p: jax.tree.map(lambda x: x.astype(jnp.bfloat16), p),
        point=lambda p: jax.tree.map(lambda x: x.astype(jnp.float32), p),
    ),
}

# Checked elsewhere, with the reason.
ELSEWHERE = {
    "shard_state": "splits state over a mesh axis, so it has no unsharded run "
    "here; tests/sharding/test_zero1*.py compare it with the unwrapped run",
    "NamedTupleTransformation": "the base of a user's optax-style subclass: "
    "two user functions, run as they are (tests/core/test_optax_subclasses.py)",
}


def _two_steps(case: Case, tx):
    @jax.jit
    def run(params):
        params = case.wrap(params)
        state = tx.init(params)
        first_state = state
        for _ in range(2):
            grads = jax.grad(objective)(case.point(params))
            updates, state = case.step(tx, grads, state, params)
            params = gradax.apply_updates(params, updates)
        return params, first_state, state

    return run


def _param_key(path, params) -> str | None:
    key = getattr(path[-1], "key", None)
    return key if key in params else None


# Each case on one kind of mesh axes in CI, in turn; the other with -m slow
# (as tests/conformance/test_conformance.py does).
@pytest.mark.parametrize(
    "name, axis_type", one_axis_type_in_turn(list(CASES), lambda name: name)
)
def test_sharded_equals_unsharded(name, axis_type):
    case = CASES[name]
    tx = case.build()
    run = _two_steps(case, tx)
    params = sharding_params()
    single, _, _ = run(params)
    mesh, shardings = mesh_and_shardings(axis_type)
    with set_mesh(mesh):
        sharded, first_state, state = run(jax.device_put(params, shardings))
    for leaves in (first_state, state):
        for path, leaf in jax.tree_util.tree_flatten_with_path(leaves)[0]:
            key = _param_key(path, params)
            if key is None or not leaf.ndim:
                continue
            spec = shardings[key].spec
            if leaf.shape == params[key].shape:
                expected = shardings[key]
            elif leaf.shape[1:] == params[key].shape:
                # A memory of past values, stacked (L-BFGS).
                expected = jax.NamedSharding(mesh, P(None, *spec))
            else:
                continue
            assert leaf.sharding.is_equivalent_to(expected, leaf.ndim), (
                axis_type,
                jax.tree_util.keystr(path),
                leaf.sharding,
            )
    for a, b in zip(jax.tree.leaves(single), jax.tree.leaves(sharded), strict=True):
        # Sharded sums add in another order (float32, values ~1).
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=axis_type)


def test_every_transformation_outside_the_registry_is_checked_here():
    from registry import NOT_IN_REGISTRY

    bases = {"GradientTransformation", "GradientTransformationExtraArgs", "Alias"}
    missing = set(NOT_IN_REGISTRY) - bases - set(CASES) - set(ELSEWHERE)
    assert not missing, f"add a case above for {sorted(missing)}"
