"""The protocol: optax's idioms, clear tree errors, schedule-independent state."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest
from registry import ENTRIES

import gradax


def _params():
    return {"a": jnp.array([1.0, -2.0]), "b": jnp.array([[0.5, 0.25], [1.0, 2.0]])}


def _double_init(params):
    return {"calls": jnp.zeros([], jnp.int32)}


def _double_update(updates, state, params=None):
    calls = state["calls"] + 1
    return jax.tree.map(lambda g: 2.0 * g, updates), {"calls": calls}


@pytest.mark.parametrize(
    "make",
    [
        lambda: gradax.GradientTransformation(_double_init, _double_update),
        lambda: gradax.GradientTransformation(init=_double_init, update=_double_update),
        lambda: gradax.GradientTransformationExtraArgs(_double_init, _double_update),
    ],
    ids=["positional", "keywords", "extra-args"],
)
def test_transformation_from_two_functions(make):
    tx = make()
    assert isinstance(tx, gradax.GradientTransformation)
    params = _params()
    grads = jax.tree.map(jnp.ones_like, params)

    # Alone, with extra arguments its update does not take, under jit with the
    # transformation as an argument, and as a pytree.
    updates, state = tx.update(grads, tx.init(params), params, value=1.0)
    assert float(updates["a"][0]) == 2.0 and int(state["calls"]) == 1
    step = jax.jit(lambda tx, g, s: tx.update(g, s))
    updates, state = step(tx, grads, tx.init(params))
    assert float(updates["b"][1, 1]) == 2.0
    leaves, treedef = jax.tree.flatten(tx)
    assert leaves == [] and jax.tree.unflatten(treedef, leaves) == tx

    # Inside gradax's and optax's combinators.
    for chain in (
        gradax.chain(tx, gradax.scale(3.0)),
        optax.chain(tx, optax.scale(3.0)),
    ):
        updates, _ = chain.update(grads, chain.init(params), params)
        np.testing.assert_array_equal(updates["a"], jnp.full(2, 6.0))


def test_update_function_without_params_argument():
    tx = gradax.GradientTransformation(lambda p: (), lambda u, s: (u, s))
    updates, _ = tx.update(jnp.ones(2), tx.init(jnp.ones(2)), jnp.ones(2))
    np.testing.assert_array_equal(updates, jnp.ones(2))


def test_function_transformation_refuses_non_functions():
    with pytest.raises(TypeError, match="update"):
        gradax.GradientTransformation(_double_init, 3)


def _built_entries():
    return [(entry, entry.build()) for entry in ENTRIES]


def test_every_transformation_is_an_init_update_pair():
    for entry, tx in _built_entries():
        assert isinstance(tx, gradax.GradientTransformation), entry
        init, update = tx
        assert init == tx.init and update == tx.update, entry
        assert tx[0] == tx.init and tx[1] == tx.update and len(tx) == 2, entry


def test_replace_works_on_every_transformation():
    for entry, tx in _built_entries():
        assert tx.replace() == tx, entry
    tx = gradax.chain(gradax.adam(0.1))
    swapped = tx.replace(transforms=(gradax.sgd(1.0),))
    assert swapped.transforms == (gradax.sgd(1.0),)
    assert gradax.adam(0.1).replace(b1=0.5).b1 == 0.5
    with pytest.raises(gradax.HyperparameterError, match="b1"):
        gradax.adam(0.1).replace(b1=1.5)
    with pytest.raises(TypeError, match="unknown field"):
        gradax.adam(0.1).replace(beta1=0.5)


def test_tree_mismatch_names_every_differing_path():
    tx = gradax.sgd(0.1)
    params = {"a": jnp.ones(2), "b": jnp.ones(2)}
    updates = {"a": jnp.ones(2), "extra": jnp.ones(2)}
    with pytest.raises(ValueError) as info:
        tx.update(updates, tx.init(params), params)
    message = str(info.value)
    assert "['extra']" in message and "['b']" in message


def test_state_none_works_when_stateless_and_is_named_otherwise():
    params = {"a": jnp.array([3.0, -0.5])}
    # As optax: a stateless transformation ignores the state it is given.
    updates, _ = gradax.clip(1.0).update(params, None)
    np.testing.assert_array_equal(updates["a"], [1.0, -0.5])
    for tx in (gradax.sgd(0.1), gradax.adam(0.1), gradax.muon(0.1)):
        with pytest.raises(TypeError, match=r"given state=None: pass the state"):
            tx.update(params, None, params)


def test_shape_mismatch_names_the_leaf():
    tx = gradax.adam(0.1)
    params = {"a": jnp.ones(2), "b": jnp.ones((2, 3))}
    updates = {"a": jnp.ones(2), "b": jnp.ones((3, 2))}
    with pytest.raises(ValueError, match=r"\['b'\]: \(3, 2\) vs \(2, 3\)"):
        tx.update(updates, tx.init(params), params)


def test_checkpoint_resumes_across_a_switch_to_a_schedule(tmp_path):
    """A schedule adds optax's counts to the tree; carry_state bridges it."""
    params = _params()
    grads = jax.tree.map(lambda p: 0.1 * p, params)
    constant = gradax.adamw(1e-3, weight_decay=0.1)
    scheduled = gradax.adamw(
        gradax.warmup_cosine_decay_schedule(0.0, 1e-3, 5, 50),
        weight_decay=gradax.linear_schedule(0.1, 0.0, 50),
    )
    checkpointer = ocp.StandardCheckpointer()
    for i, (saver, loader) in enumerate([(constant, scheduled), (scheduled, constant)]):
        state = saver.init(params)
        for _ in range(2):
            _, state = saver.update(grads, state, params)
        path = tmp_path / f"ckpt{i}"
        checkpointer.save(path, state)
        checkpointer.wait_until_finished()
        # Restored against the saver's tree, as the checkpoint was written.
        restored = checkpointer.restore(path, jax.eval_shape(saver.init, params))
        assert jax.tree.structure(jax.eval_shape(loader.init, params)) != (
            jax.tree.structure(restored)
        )
        carried, report = gradax.tree.carry_state(restored, loader, params)
        assert jax.tree.structure(carried) == jax.tree.structure(loader.init(params))
        # Adam's moments and count came over; a new schedule count takes it.
        np.testing.assert_array_equal(carried[0].mu["a"], state[0].mu["a"])
        for _, count in gradax.tree.get_all_with_path(carried, "count"):
            assert int(count) == 2, report
        updates, _ = loader.update(grads, carried, params)
        assert all(jnp.all(jnp.isfinite(u)) for u in jax.tree.leaves(updates))


def test_schedule_state_reads_through_to_its_inner_state():
    # A schedule for trace's decay is gradax-only: trace keeps no count of
    # its own, so one is kept around its state.
    tx = gradax.trace(decay=gradax.linear_schedule(0.9, 0.5, 10))
    state = tx.init(_params())
    assert isinstance(state, gradax.ScheduleState)
    np.testing.assert_array_equal(state.trace["a"], jnp.zeros(2))
    assert int(state.count) == 0
    _, state = tx.update(_params(), state)
    assert int(state.count) == 1
    # With a number, optax's tree: the TraceState alone.
    assert isinstance(gradax.trace(decay=0.9).init(_params()), gradax.TraceState)


def test_shapes_are_checked_by_the_part_that_receives_the_updates():
    params = {"a": jnp.ones(2), "b": jnp.ones((2, 3))}
    wrong = {"a": jnp.ones(2), "b": jnp.ones((3, 2))}
    tx = gradax.chain(gradax.clip(1.0), gradax.adam(0.1))
    with pytest.raises(ValueError, match=r"\['b'\]"):
        tx.update(wrong, tx.init(params), params)
    # Per-example gradients carry a batch axis into a chain: the private
    # aggregate takes them, the parts after it see ordinary gradients.
    private = gradax.chain(
        gradax.contrib.differentially_private_aggregate(1.0, 0.0, key=0),
        gradax.sgd(0.1),
    )
    per_example = {"a": jnp.ones((4, 2)), "b": jnp.ones((4, 2, 3))}
    updates, _ = private.update(per_example, private.init(params), params)
    assert updates["b"].shape == (2, 3)
