"""Checks every registry entry gets (see tests/registry.py).

CI time is spent compiling, so each group of checks that can share programs
is one test: the numbers (optax, a constant schedule, inject_hyperparams) come
from one compiled program per entry, the protocol checks from two, and the
state-type checks (what ``cond``/``while_loop``/``scan`` require) from tracing
alone, one trace per dtype (conformance_base.state_type_problems).
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance_base import (
    avals,
    control_flow_dtypes,
    counting_constructions,
    make_params,
    matrix_function_atol,
    mesh_and_shardings,
    one_axis_type_in_turn,
    quadratic_grads,
    run_history,
    sharding_params,
    state_type_problems,
)
from jax_versions import set_mesh
from registry import ENTRIES, Entry, entry_id, is_variant

import gradax
from gradax.orthogonal.groups import MuonGroups, routes_each_leaf

# GRADAX_TEST_SAMPLE=N checks every Nth registry entry only: CI's quick runs
# on the oldest and the newest supported jax (.ci/run). The default is all.
SAMPLE = max(1, int(os.environ.get("GRADAX_TEST_SAMPLE", "1")))
SAMPLED = ENTRIES[::SAMPLE]


SLOW = pytest.mark.slow


def builds_parts_per_call(entry: Entry, tx) -> bool:
    """Whether `tx`'s parts depend on what a call is given (see test_protocol):
    inject_hyperparams' on the hyperparameters (optax's contract: the factory
    is called with each step's values), a Muon optimizer's on the tree when
    its routing is a tree or a function of the params."""
    if entry.name == "inject_hyperparams":
        return True
    return isinstance(tx, MuonGroups) and not routes_each_leaf(
        tx.muon_weight_dimension_numbers
    )


def over(entries, *, variants_in_ci: bool):
    """Parametrize a check over the registry entries it applies to; the kwargs
    variants (registry.VARIANTS) with -m slow unless ``variants_in_ci``."""
    return pytest.mark.parametrize(
        "entry",
        [
            pytest.param(
                e,
                id=entry_id(e),
                marks=SLOW if is_variant(e) and not variants_in_ci else (),
            )
            for e in entries
        ],
    )


# Where the kwargs decide the outcome: every entry in CI.
ALL = over(SAMPLED, variants_in_ci=True)
# A mechanism the kwargs pass through: the variants with -m slow.
CANONICAL = over(SAMPLED, variants_in_ci=False)
OPTIMIZERS = over((e for e in SAMPLED if e.optimizer), variants_in_ci=False)


def _assert_trees_close(actual, expected, what, entry, *, rtol):
    leaves_a = jax.tree_util.tree_flatten_with_path(actual)[0]
    leaves_e = jax.tree.leaves(expected)
    assert len(leaves_a) == len(leaves_e), what
    for (path, a), e in zip(leaves_a, leaves_e, strict=True):
        np.testing.assert_allclose(
            a,
            e,
            rtol=rtol,
            atol=matrix_function_atol(entry, e),
            err_msg=f"{what} at {jax.tree_util.keystr(path)}",
        )


def _at_step(history, index):
    return jax.tree.map(lambda h: h[index], history)


# ---------------------------------------------------------------------------


OPTAX_STEPS = 20
FORM_STEPS = 5


def _forms_in_turn():
    """Every entry against optax's twin in CI. A constant schedule and
    inject_hyperparams go through the factory's hyperparameter handling, which
    the kwargs do not change: in CI on the canonical entries and on every
    entry without an optax twin; on the other variants with -m slow."""
    params = []
    for e in SAMPLED:
        if not is_variant(e) or e.optax_name == "":
            params.append(pytest.param(e, ALL_FORMS, id=entry_id(e)))
        else:
            params += [
                pytest.param(e, ("optax",), id=entry_id(e)),
                pytest.param(e, HYPER_FORMS, id=f"forms-{entry_id(e)}", marks=SLOW),
            ]
    return params


HYPER_FORMS = ("scheduled", "injected")
ALL_FORMS = ("optax", *HYPER_FORMS)


@pytest.mark.parametrize("entry, which", _forms_in_turn())
def test_same_numbers_in_every_form(entry: Entry, which: tuple[str, ...]):
    """Equal to optax's twin; a constant schedule and inject_hyperparams equal
    the plain transformation. One compiled program for all of them."""
    params = make_params()
    forms = {"plain": (entry.build(), OPTAX_STEPS)}
    if entry.optax_name != "" and "optax" in which:
        forms["optax"] = (entry.build_optax(), OPTAX_STEPS)
    if entry.schedule_arg and "scheduled" in which:
        value = entry.kwargs.get(entry.schedule_arg)
        if value is None:
            value = getattr(entry.build(), entry.schedule_arg)

        def constant(count):
            # Depends on the traced count, so the schedule path really runs.
            return jnp.asarray(value, jnp.float32) + 0.0 * count

        # Its state may hold a count the plain one lacks, as in optax
        # (test_optax_state_trees.py checks the trees).
        scheduled = entry.build(**{entry.schedule_arg: constant})
        forms["scheduled"] = (scheduled, FORM_STEPS)
    if entry.injectable and "injected" in which:
        injected = gradax.inject_hyperparams(entry.build_fn or entry.factory)(
            **entry.kwargs
        )
        forms["injected"] = (injected, FORM_STEPS)

    results = jax.jit(
        lambda p: {name: run_history(tx, p, n) for name, (tx, n) in forms.items()}
    )(params)
    plain = results["plain"]
    # assert_allclose counts NaN == NaN, so a check of two NaN runs would
    # pass without checking anything.
    for path, leaf in jax.tree_util.tree_flatten_with_path(results)[0]:
        assert np.all(np.isfinite(leaf)), f"not finite: {jax.tree_util.keystr(path)}"
    if "optax" in results:
        _assert_trees_close(
            plain, results["optax"], "against optax", entry, rtol=entry.rtol
        )
    if "scheduled" in results:
        # The scalar is folded into the compiled program as a constant, the
        # schedule's value is not, so XLA rounds the two computations
        # differently (constant folding, multiply-add contraction): two
        # programs computing the same math, as optax's twin is, with its
        # tolerance. 1 ulp of a moment grows through Adam's near-cancelling
        # moments and Newton-Schulz to 5e-6 relative (1.6e-7 absolute) on
        # small entries within 5 steps, on some compilers' code paths.
        _assert_trees_close(
            _at_step(results["scheduled"], slice(None)),
            _at_step(plain, slice(0, FORM_STEPS)),
            "constant schedule against the scalar",
            entry,
            rtol=entry.rtol,
        )
    if "injected" in results:
        # Injected values are float32 arrays, so ``1 - b2`` is computed in
        # float32 (1.3e-5 relative error for b2=0.999) where a Python float is
        # folded in float64 first. optax's inject_hyperparams differs from
        # plain optax by the same 6.7e-6 on this test.
        _assert_trees_close(
            results["injected"],
            _at_step(plain, slice(0, FORM_STEPS)),
            "inject_hyperparams against plain",
            entry,
            rtol=2e-5,
        )


def _loss_parabola(p):
    return sum(jnp.sum((x - 0.5) ** 2) for x in jax.tree.leaves(p))


def _rosenbrock(p):
    x, y = p["xy"][0], p["xy"][1]
    return (1 - x) ** 2 + 100 * (y - x**2) ** 2


def _run(tx, loss, params, steps):
    def body(carry, _):
        p, s = carry
        u, s = tx.update(jax.grad(loss)(p), s, p)
        return (gradax.apply_updates(p, u), s), None

    (params, _), _ = jax.lax.scan(body, (params, tx.init(params)), None, steps)
    return params


@OPTIMIZERS
def test_converges(entry: Entry):
    """Descends a parabola (500 steps) and, where the entry says, Rosenbrock."""
    tx = entry.build(**(entry.converge_kwargs or {}))
    parabola = make_params()
    rosenbrock = {"xy": jnp.array([-1.2, 1.0])}

    @jax.jit
    def both(parabola, rosenbrock):
        out = {"parabola": _run(tx, _loss_parabola, parabola, 500)}
        if entry.rosenbrock_steps:
            out["rosenbrock"] = _run(
                tx, _rosenbrock, rosenbrock, entry.rosenbrock_steps
            )
        return out

    final = both(parabola, rosenbrock)
    assert _loss_parabola(final["parabola"]) < 1e-3 * _loss_parabola(parabola)
    if entry.rosenbrock_steps:
        assert _rosenbrock(final["rosenbrock"]) < 1e-3, final["rosenbrock"]


@CANONICAL
def test_protocol(entry: Entry):
    """No device work at construction; a pytree that compares equal; ``init``
    on abstract arrays; built in one trace and used in another as a ``jit``
    argument; unknown extra arguments accepted; no recompile after the first
    step, even for a freshly built equal transformation."""
    with jax.transfer_guard("disallow"):
        entry.build()
    tx = entry.build()
    assert tx == entry.build()
    assert jax.tree.unflatten(*reversed(jax.tree.flatten(tx))) == tx

    params = make_params()
    abstract = jax.tree.map(lambda p: jax.ShapeDtypeStruct(p.shape, p.dtype), params)
    abstract_state = jax.eval_shape(tx.init, abstract)

    holder = {}

    @jax.jit
    def build_and_init(p):
        holder["tx"] = entry.build()
        return holder["tx"].init(p)

    state = build_and_init(params)
    assert avals(abstract_state) == avals(state), "init on ShapeDtypeStruct"

    traces = []

    @jax.jit
    def step(t, s, g, p):
        traces.append(None)
        return t.update(g, s, p, unknown_arg=3)

    fresh = entry.build()
    with counting_constructions() as made:
        for i, t in enumerate([holder["tx"], fresh, holder["tx"]]):
            _, state = step(t, state, quadratic_grads(params, float(i)), params)
    assert len(traces) == 1, "the step recompiled"
    # The transformation holds its parts: the trace (the transformation an
    # argument, unflattened by JAX) builds none, unless they depend on what
    # a call is given.
    if not builds_parts_per_call(entry, fresh):
        assert not made, f"built while tracing update: {dict(made)}"


@CANONICAL
def test_state_buffers_can_be_donated(entry: Entry):
    """Eager ``init`` gives each state leaf a buffer of its own: none is a
    param's, another leaf's or a leaf of an earlier ``init``'s state. A step
    jitted with ``donate_argnums`` for params and state refuses a buffer
    given twice ("Attempt to donate the same buffer twice"), and a buffer
    kept inside the transformation would be deleted by the first donation."""
    tx = entry.build()
    params = make_params()
    trees = {"params": params, "state": tx.init(params), "again": tx.init(params)}
    seen: dict[int, str] = {}
    named = jax.tree_util.tree_flatten_with_path(trees)[0]
    for path, leaf in named:
        if not isinstance(leaf, jax.Array):
            continue
        where = jax.tree_util.keystr(path)
        pointer = leaf.unsafe_buffer_pointer()
        assert pointer not in seen, f"{where} shares its buffer with {seen[pointer]}"
        seen[pointer] = where


def _odd_trees():
    """Trees real models give that the suite's params do not, with the same
    paths (the entries' masks, labels and base models fit them)."""
    params = make_params()
    return {
        # eqx.filter(model, eqx.is_inexact_array) leaves None where a
        # field is not an array: no leaf there, in optax's trees too.
        "a None leaf": {**params, "s": None},
        # A layer of width 0 (a configuration's edge case).
        "a leaf with no elements": {**params, "m": jnp.zeros((0, 3))},
        "no leaves": dict.fromkeys(params),
    }


ODD_TREES = CANONICAL


@ODD_TREES
def test_odd_trees(entry: Entry):
    """init and two updates trace on each of `_odd_trees`, the updates
    having the params' shapes and the state keeping its types. Tracing only
    (`eval_shape`): what breaks on these trees is Python code that reads
    shapes and structures."""
    tx = entry.build()

    def two_steps(params):
        state = tx.init(params)
        _, later = tx.update(quadratic_grads(params, 0.0), state, params)
        updates, later = tx.update(quadratic_grads(params, 1.0), later, params)
        return updates, state, later

    for name, params in _odd_trees().items():
        try:
            updates, state, later = jax.eval_shape(two_steps, params)
        except Exception as error:
            raise AssertionError(f"on {name}: {error!r}") from error
        assert avals(updates) == avals(params), name
        assert avals(later) == avals(state), name


@CANONICAL
def test_no_implicit_rank_promotion(entry: Entry):
    """init and two updates trace with `jax_numpy_rank_promotion="raise"`,
    which codebases set to catch broadcasting bugs: an array is broadcast
    to another's rank only where the code says so. Tracing only."""
    tx = entry.build()

    def two_steps(params):
        state = tx.init(params)
        _, state = tx.update(quadratic_grads(params, 0.0), state, params)
        return tx.update(quadratic_grads(params, 1.0), state, params)

    with jax.numpy_rank_promotion("raise"):
        jax.eval_shape(two_steps, make_params())


@ALL
def test_state_stable_under_control_flow(entry: Entry):
    """The state keeps its types through ``update`` (so ``lax.cond``,
    ``while_loop`` and ``scan`` accept it) for float16, bfloat16, float32,
    float64 and, where the entry handles it, complex64 parameters."""
    problems = state_type_problems(
        entry.build,
        control_flow_dtypes(entry.complex_ok),
        lambda params: quadratic_grads(params, 1.0),
        lambda params, value: {"value": value},
    )
    assert not problems, "\n".join(problems)


@CANONICAL
def test_gradients_in_another_dtype(entry: Entry):
    """float32 params with bfloat16 gradients (a loss computed in bfloat16):
    the state keeps its types through two updates, and the updates keep the
    gradients' dtype. Tracing only."""
    tx = entry.build()

    def two_steps(params):
        grads = jax.tree.map(
            lambda g: g.astype(jnp.bfloat16), quadratic_grads(params, 0.0)
        )
        state = tx.init(params)
        _, later = tx.update(grads, state, params)
        updates, later = tx.update(grads, later, params)
        return updates, state, later

    updates, state, later = jax.eval_shape(two_steps, make_params())
    assert avals(later) == avals(state)
    # cast_updates sets the updates' dtype itself: that is what it is for.
    if entry.name != "cast_updates":
        assert {u.dtype for u in jax.tree.leaves(updates)} == {jnp.dtype(jnp.bfloat16)}


# Each canonical entry on one kind of mesh axes in CI, in turn (each kind
# sees half of every registry file); the other kind, and the variants, with
# -m slow.
SHARDED = pytest.mark.parametrize(
    "entry, axis_type",
    one_axis_type_in_turn(SAMPLED, entry_id, lambda e: not is_variant(e)),
)


@SHARDED
def test_sharded_equals_unsharded(entry: Entry, axis_type: str):
    params = sharding_params()
    grads = quadratic_grads(params, 0.0)
    tx = entry.build()

    @jax.jit
    def first_step(g, p):
        state = tx.init(p)
        return tx.update(g, state, p)[0], state

    single, _ = first_step(grads, params)
    mesh, shardings = mesh_and_shardings(axis_type)
    with set_mesh(mesh):
        sharded_params = jax.device_put(params, shardings)
        sharded_grads = jax.device_put(grads, shardings)
        updates, state = first_step(sharded_grads, sharded_params)
        # State shaped like a parameter carries its sharding: from the types
        # under Explicit axes, from the init wrapper's tie to the parameter
        # under Auto.
        for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]:
            key = getattr(path[-1], "key", None)
            if key in params and leaf.shape == params[key].shape and leaf.ndim:
                sharding = shardings[key]
                assert leaf.sharding.is_equivalent_to(sharding, leaf.ndim), path
    # Sharded sums add in another order: see matrix_function_atol (seen up
    # to 5e-6 absolute on Shampoo's and Dion2's leaves of size ~0.1).
    for a, b in zip(jax.tree.leaves(single), jax.tree.leaves(updates), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=matrix_function_atol(entry, a))
