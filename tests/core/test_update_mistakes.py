"""Mistakes in what ``update`` is given get gradax's error, naming each path.

Each mistake a newcomer makes with the state or the gradients is raised at
the first ``update``, with and without ``jit``, as :class:`gradax.UpdateError`
(a ValueError and a TypeError), and the message says what was expected and
what was given. What optax accepts still works.
"""

from __future__ import annotations

import traceback
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest

import gradax

PARAMS = {"w": jnp.ones((3, 4)), "b": jnp.ones(4)}


def both(update):
    """``update`` called as it is and under jit."""
    return [update, jax.jit(update)]


def raises(call, *patterns):
    """Call, expect UpdateError, and find each regex pattern in its message."""
    with pytest.raises(gradax.UpdateError) as info:
        call()
    message = str(info.value)
    for pattern in patterns:
        assert _search(pattern, message), f"{pattern!r} not in:\n{message}"
    return message


def _search(pattern, text):
    import re

    return re.search(pattern, text) is not None


@pytest.mark.parametrize("jit", [False, True])
def test_gradient_tree_differs_from_the_params(jit):
    tx = gradax.adam(1e-3)
    state = tx.init(PARAMS)
    grads = {"w": jnp.ones((3, 4)), "c": jnp.ones(4)}
    update = jax.jit(tx.update) if jit else tx.update
    raises(
        lambda: update(grads, state, PARAMS),
        r"adam\.update: Tree mismatch",
        r"updates has leaves that params lacks: \['c'\]",
        r"params has leaves that updates lacks: \['b'\]",
    )


@pytest.mark.parametrize("jit", [False, True])
def test_gradient_tree_differs_without_params(jit):
    tx = gradax.adam(1e-3)
    state = tx.init(PARAMS)
    update = jax.jit(tx.update) if jit else tx.update
    grads = {"w": jnp.ones((3, 4)), "c": jnp.ones(4)}
    raises(
        lambda: update(grads, state),
        r"state\[0\]\.mu: expected \(for these updates\) a dict with keys 'c', "
        r"'w'; given a dict with keys 'b', 'w'",
        "without params",
    )
    wrong_shape = {"w": jnp.ones((4, 4)), "b": jnp.ones(4)}
    raises(
        lambda: update(wrong_shape, state),
        r"state\[0\]\.mu\['w'\]: expected \(for these updates\) an array of "
        r"shape \(4, 4\); given an array of shape \(3, 4\)",
    )


@pytest.mark.parametrize("jit", [False, True])
def test_state_of_another_transformation(jit):
    tx = gradax.adam(1e-3)
    other = gradax.sgd(0.1, momentum=0.9).init(PARAMS)
    update = jax.jit(tx.update) if jit else tx.update
    raises(
        lambda: update(PARAMS, other, PARAMS),
        r"state\[0\]: expected \(for these params\) ScaleByAdamState\(count, mu, "
        r"nu\); given TraceState\(trace\)",
        "another transformation",
        r"gradax\.tree\.carry_state\(old_state, tx, params\)",
    )
    muon = gradax.muon(0.02)
    raises(
        lambda: muon.update(PARAMS, tx.init(PARAMS), PARAMS),
        r"expected \(for these params\) PartitionState\(inner_states\); given a "
        r"tuple \(ScaleByAdamState, EmptyState\)",
    )


@pytest.mark.parametrize("jit", [False, True])
def test_state_restored_without_a_template(tmp_path, jit):
    tx = gradax.adamw(1e-3, weight_decay=0.1)
    state = tx.init(PARAMS)
    _, state = tx.update(PARAMS, state, PARAMS)
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(tmp_path / "ckpt", state)
    checkpointer.wait_until_finished()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # orbax warns about the missing target
        restored = checkpointer.restore(tmp_path / "ckpt")
    assert isinstance(restored, list)  # plain containers, no state classes
    update = jax.jit(tx.update) if jit else tx.update
    raises(
        lambda: update(PARAMS, restored, PARAMS),
        r"state\[0\]: expected \(for these params\) ScaleByAdamState\(count, mu, "
        r"nu\); given a dict with keys 'count', 'mu', 'nu'",
        "restored without a template",
        r"StandardRestore\(tx\.init\(params\)\)",
        r"gradax\.tree\.carry_state\(restored, tx, params\)",
    )
    # What the message points to works.
    carried, _ = gradax.tree.carry_state(restored, tx, PARAMS)
    np.testing.assert_array_equal(carried[0].mu["w"], state[0].mu["w"])
    update(PARAMS, carried, PARAMS)


@pytest.mark.parametrize("jit", [False, True])
def test_state_made_for_parameters_of_another_shape(jit):
    tx = gradax.adam(1e-3)
    state = tx.init({"w": jnp.ones((2, 4)), "b": jnp.ones(4)})
    update = jax.jit(tx.update) if jit else tx.update
    raises(
        lambda: update(PARAMS, state, PARAMS),
        r"state\[0\]\.mu\['w'\]: expected \(for these params\) an array of shape "
        r"\(3, 4\); given an array of shape \(2, 4\)",
        r"state\[0\]\.nu\['w'\]",
        "parameters of another tree or other shapes",
    )
    other_tree = tx.init({"w": jnp.ones((3, 4))})
    raises(
        lambda: update(PARAMS, other_tree, PARAMS),
        r"expected \(for these params\) a dict with keys 'b', 'w'; given a dict "
        r"with keys 'w'",
    )


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("dtype", [jnp.int32, jnp.uint8, jnp.bool_])
def test_integer_and_boolean_gradients(jit, dtype):
    tx = gradax.sgd(0.1)
    state = tx.init(PARAMS)
    grads = {"w": jnp.ones((3, 4), dtype), "b": jnp.ones(4)}
    update = jax.jit(tx.update) if jit else tx.update
    name = np.dtype(dtype).name
    for params in (PARAMS, None):
        raises(
            lambda p=params: update(grads, state, p),
            rf"sgd\.update expects floating-point \(or complex\) updates; given "
            rf"integer or boolean ones at \['w'\] \({name}\)",
        )


def test_float0_gradients_of_an_integer_input():
    params = {"w": jnp.ones(3), "steps": jnp.array(2)}
    grads = jax.grad(lambda p: jnp.sum(p["w"] ** 2), allow_int=True)(params)
    tx = gradax.adam(0.1)
    raises(
        lambda: tx.update(grads, tx.init(params), params),
        r"\[.steps.\] \(float0, the gradient of an integer input\)",
    )


def test_state_none_is_named():
    for tx in (gradax.adam(0.1), gradax.chain(gradax.clip(1.0), gradax.sgd(0.1))):
        raises(lambda t=tx: t.update(PARAMS, None, PARAMS), "given state=None")


def test_the_mistakes_are_value_and_type_errors():
    assert issubclass(gradax.UpdateError, ValueError)
    assert issubclass(gradax.UpdateError, TypeError)


def test_public_exception_classes_print_as_gradax():
    assert repr(gradax.HyperparameterError) == "<class 'gradax.HyperparameterError'>"
    assert repr(gradax.UpdateError) == "<class 'gradax.UpdateError'>"
    warning = gradax.declare.HyperparameterWarning
    assert repr(warning) == "<class 'gradax.declare.HyperparameterWarning'>"
    try:
        gradax.adam(0.1, b1=2.0)
    except gradax.HyperparameterError as error:
        shown = "".join(traceback.format_exception_only(type(error), error))
    assert shown.startswith("gradax.HyperparameterError: b1")


# -- what optax accepts keeps working ------------------------------------------


def test_stateless_transformations_take_none_or_an_empty_state():
    for state in (None, (), gradax.EmptyState(), optax.EmptyState()):
        updates, _ = gradax.clip(1.0).update(PARAMS, state)
        np.testing.assert_array_equal(updates["w"], PARAMS["w"])


def test_update_without_params_is_legal():
    tx = gradax.adam(0.1)
    with_params, _ = tx.update(PARAMS, tx.init(PARAMS), PARAMS)
    without, _ = tx.update(PARAMS, tx.init(PARAMS))
    np.testing.assert_array_equal(without["w"], with_params["w"])


def test_a_state_built_by_optax_is_named_and_carried():
    tx = gradax.adam(0.1)
    optax_tx = optax.adam(0.1)
    optax_state = optax_tx.init(PARAMS)
    raises(
        lambda: tx.update(PARAMS, optax_state, PARAMS),
        r"state\[0\]: expected \(for these params\) ScaleByAdamState\(count, mu, "
        r"nu\) \(from gradax\.optimizers\.adam\); given ScaleByAdamState\(count, "
        r"mu, nu\) \(from optax\.",
        r"gradax\.tree\.carry_state\(optax_state, tx, params\)",
    )
    carried, _ = gradax.tree.carry_state(optax_state, tx, PARAMS)
    gradax_updates, _ = tx.update(PARAMS, carried, PARAMS)
    optax_updates, _ = optax_tx.update(PARAMS, optax_state, PARAMS)
    np.testing.assert_allclose(gradax_updates["w"], optax_updates["w"], rtol=1e-6)
    # optax's count-only state of a scheduled stateless transformation is
    # read as it always was.
    schedule = optax.linear_schedule(1.0, 0.5, 10)
    state = optax.scale_by_schedule(schedule).init(PARAMS)
    updates, _ = gradax.scale_by_schedule(schedule).update(PARAMS, state)
    np.testing.assert_array_equal(updates["b"], PARAMS["b"])


def test_per_example_updates_without_params_are_not_a_mistake():
    tx = gradax.chain(
        gradax.contrib.differentially_private_aggregate(1.0, 0.0, key=0),
        gradax.adam(0.1),
    )
    per_example = {"w": jnp.ones((5, 3, 4)), "b": jnp.ones((5, 4))}
    updates, _ = tx.update(per_example, tx.init(PARAMS))
    assert updates["w"].shape == (3, 4)


def test_inner_parts_are_checked_once_by_the_outermost_update():
    # A gradax transformation inside optax's chain checks its own state.
    tx = optax.chain(optax.clip(1.0), gradax.adam(0.1))
    state = tx.init(PARAMS)
    bad = (state[0], gradax.sgd(0.1, momentum=0.9).init(PARAMS))
    with pytest.raises(gradax.UpdateError, match=r"(?s)adam\.update .*TraceState"):
        tx.update(PARAMS, bad, PARAMS)


def test_a_stateless_transformation_hands_any_state_back_as_optax_does():
    # maxdiffusion's trainers call clip_by_global_norm(...).update(grads,
    # train_state, None): optax's stateless update never reads the state and
    # returns it. gradax runs on its own empty state and hands the given one
    # back, eagerly and under jit; a transformation with state still refuses.
    grads = {"w": jnp.full((2,), 3.0)}
    train_state = {"params": grads, "step": jnp.zeros([], jnp.int32)}
    for lib in (optax, gradax):
        clip = lib.clip_by_global_norm(1.0)
        for run in (clip.update, jax.jit(clip.update)):
            clipped, state = run(grads, train_state, None)
            assert state is train_state or jax.tree.structure(state) == (
                jax.tree.structure(train_state)
            )
            np.testing.assert_allclose(clipped["w"], np.full(2, 0.5**0.5), rtol=1e-6)
    with pytest.raises(gradax.UpdateError, match="not the one its init makes"):
        gradax.adam(0.1).update(grads, train_state, None)
