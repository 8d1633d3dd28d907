"""A state restored without a template, from another configuration: one cause.

A checkpoint saved by `adamw(schedule)` and restored by orbax without a
target is plain dicts and lists, with a `{'count': ...}` where the constant
learning rate's `init` makes an `EmptyState`. The update's error says it was
restored without a template and saved by another configuration, and points to
`carry_state`; it used to add "The state was made for parameters of another
tree or other shapes", which was wrong: the parameters are the same.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest

import gradax

PARAMS = {"w": jnp.ones((3, 4)), "b": jnp.ones(4)}
SCHEDULED = gradax.adamw(gradax.linear_schedule(1e-2, 1e-3, 100), weight_decay=0.1)
CONSTANT = gradax.adamw(1e-4, weight_decay=0.1)


def _restored_without_a_template(tx, path):
    _, state = tx.update(PARAMS, tx.init(PARAMS), PARAMS)  # count 1, not init's
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, state)
    checkpointer.wait_until_finished()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # orbax warns about the missing target
        return checkpointer.restore(path)


def _message(update, state):
    with pytest.raises(gradax.UpdateError) as raised:
        update(PARAMS, state, PARAMS)
    return str(raised.value)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_a_restore_from_another_configuration_is_one_diagnosis(tmp_path, jit):
    for saved_by, tx, where, expected, given in [
        # A schedule's count where the constant makes no state ...
        (SCHEDULED, CONSTANT, 2, "EmptyState()", "a dict with keys 'count'"),
        # ... and none where the schedule makes one.
        (CONSTANT, SCHEDULED, 2, "ScaleByScheduleState(count)", "None"),
    ]:
        restored = _restored_without_a_template(saved_by, tmp_path / f"{where}{given}")
        update = jax.jit(tx.update) if jit else tx.update
        message = _message(update, restored)
        line = f"state[{where}]: expected (for these params) {expected}; given {given}"
        assert line in message, message
        assert "restored without a template" in message
        assert "saved by another configuration" in message
        assert "gradax.tree.carry_state(restored, tx, params)" in message
        # The wrong second diagnosis, and the repeated "another
        # transformation" hint, are gone.
        assert "another tree or other shapes" not in message
        assert "made by another transformation" not in message
        # What the message points to works: the moments and the count carry.
        carried, _ = gradax.tree.carry_state(restored, tx, PARAMS)
        assert int(carried[0].count) == 1
        np.testing.assert_array_equal(carried[0].mu["w"], restored[0]["mu"]["w"])
        update(PARAMS, carried, PARAMS)


def test_a_restore_of_this_configuration_still_asks_for_the_template(tmp_path):
    restored = _restored_without_a_template(SCHEDULED, tmp_path / "same")
    message = _message(SCHEDULED.update, restored)
    assert "StandardRestore(tx.init(params))" in message
    assert "another tree or other shapes" not in message
    assert "saved by another configuration" not in message


def test_a_dict_where_a_parameter_has_an_array_is_another_params_tree():
    # The other params tree is still diagnosed: mu['w'] is an array for these
    # params, a dict in the state given.
    state = CONSTANT.init({"w": {"a": jnp.ones((3, 4))}, "b": jnp.ones(4)})
    message = _message(CONSTANT.update, state)
    assert "state[0].mu['w']: expected (for these params) an array" in message
    assert "parameters of another tree or other shapes" in message
