"""Shared declarations, Alias.part, and the tree-difference engine.

A direction and the optimizers that build it declare their common options
once (`gradax._core.declarations.Shared`) and pass them on by name (`Alias.part`);
every comparison of two trees goes through `gradax._core.treecheck.differences`.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import KW_ONLY
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import pytest

import gradax
from gradax._core.declarations import (
    DECAY,
    NONNEGATIVE,
    HyperparameterError,
    Shared,
    hyper,
    static_field,
)
from gradax._core.protocol import Alias, EmptyState, GradientTransformation
from gradax._core.treecheck import differences, shape_differences, tree_difference

_OPTIONS = Shared(
    beta=hyper(default=0.5, valid=DECAY),
    flag=static_field(default=False),
)


class _direction(GradientTransformation):
    beta: Any = _OPTIONS.field()
    _: KW_ONLY
    flag: bool = _OPTIONS.field()

    def update_state(self, updates, state, params=None, **extra_args):
        scale = -self.beta if self.flag else self.beta
        return jax.tree.map(lambda g: scale * g, updates), state


class _alias(Alias):
    learning_rate: Any = hyper(default=1.0, valid=NONNEGATIVE)
    beta: Any = _OPTIONS.field()
    _: KW_ONLY
    flag: bool = _OPTIONS.field()

    def build(self):
        return self.part(_direction)


def test_each_class_gets_the_shared_declaration_of_its_own_name():
    for cls in (_direction, _alias):
        fields = {f.name: f for f in dataclasses.fields(cls)}
        assert fields["beta"].default == 0.5
        assert fields["flag"].default is False
        # A range is enforced, naming the user's argument.
        with pytest.raises(HyperparameterError, match="beta"):
            cls(beta=1.5)
    beta_fields = [
        next(f for f in dataclasses.fields(cls) if f.name == "beta")
        for cls in (_direction, _alias)
    ]
    assert beta_fields[0] is not beta_fields[1]  # a fresh copy for each class


def test_a_shared_field_after_kw_only_is_keyword_only_and_static():
    parameters = inspect.signature(_alias).parameters
    assert parameters["beta"].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert parameters["flag"].kind is inspect.Parameter.KEYWORD_ONLY
    # flag is structure (no leaf), beta a leaf.
    assert len(jax.tree.leaves(_alias(flag=True))) == 2


def test_an_unknown_shared_name_fails_at_class_creation():
    # Python 3.11 wraps an error of __set_name__ in a RuntimeError (its cause).
    with pytest.raises((TypeError, RuntimeError)) as info:

        class _bad(GradientTransformation):
            gamma: Any = _OPTIONS.field()

    # Python before 3.12 wraps an error raised in __set_name__ in a
    # RuntimeError (the declaration's error is its cause); 3.12 and later
    # raise it as it is.
    cause = info.value.__cause__
    message = str(info.value) if cause is None else f"{info.value} {cause}"
    assert "_bad.gamma: no shared declaration of 'gamma'" in message


def test_a_class_may_change_a_shared_default_within_the_valid_values():
    class _other(GradientTransformation):
        beta: Any = _OPTIONS.field(default=0.25)
        _: KW_ONLY
        flag: bool = _OPTIONS.field(default=True)

    assert (_other().beta, _other().flag) == (0.25, True)
    assert _direction().beta == 0.5  # the declaration itself is unchanged
    with pytest.raises(HyperparameterError, match="beta"):
        _other(beta=1.0)  # the valid values are the declared ones
    # A default outside them fails as the class is made, naming it.
    with pytest.raises((HyperparameterError, RuntimeError)) as info:

        class _bad(GradientTransformation):
            beta: Any = _OPTIONS.field(default=1.0)

    # Python before 3.12 wraps an error raised in __set_name__ in a
    # RuntimeError (the declaration's error is its cause); 3.12 and later
    # raise it as it is.
    cause = info.value.__cause__
    message = str(info.value) if cause is None else f"{info.value} {cause}"
    assert "_bad.beta's default must be in [0, 1)" in message
    assert message.endswith("got 1.0")


def test_alias_part_passes_the_same_named_fields_and_overrides():
    tx = _alias(0.5, 0.25, flag=True)
    part = tx.part(_direction)
    assert (part.beta, part.flag) == (0.25, True)
    assert tx.part(_direction, beta=0.125).beta == 0.125
    updates, _ = tx.update(jnp.ones(2), tx.init(jnp.ones(2)))
    assert updates.tolist() == [-0.25, -0.25]


def test_adam_aliases_build_their_direction_from_their_own_fields():
    tx = gradax.adamw(0.1, b1=0.8, eps_root=1e-9, nesterov=True, cautious=True)
    direction = tx.parts().transforms[0]
    assert isinstance(direction, gradax.scale_by_adam)
    assert (direction.b1, direction.eps_root) == (0.8, 1e-9)
    assert direction.nesterov and direction.cautious


class _State(NamedTuple):
    count: Any
    mu: Any


def test_differences_name_each_kind_of_difference_with_its_path():
    expected = {"a": _State(jnp.zeros(()), jnp.zeros(3)), "b": jnp.zeros(2)}
    given = {"a": _State(jnp.zeros(()), jnp.zeros(4)), "b": {"x": jnp.zeros(2)}}
    found = differences(expected, given)
    assert [(d.kind, jax.tree_util.keystr(d.path)) for d in found] == [
        ("shape", "['a'].mu"),
        ("leaf", "['b']"),
    ]
    # Another class of the same fields: the node differs, nothing below it.
    other = {"a": tuple(expected["a"]), "b": jnp.zeros(2)}
    assert [d.kind for d in differences(expected, other)] == ["node"]
    # Empty trees stand for each other; an empty node against a leaf does not.
    assert differences((EmptyState(), None), ((), ())) == []
    assert [d.kind for d in differences({}, jnp.zeros(()))] == ["shape"]


def test_one_structure_is_compared_leaf_by_leaf_like_the_walk():
    a = {"w": jnp.zeros((2, 3)), "b": [jnp.zeros(3), 1.0]}
    b = {"w": jnp.zeros((3, 2)), "b": [jnp.zeros(3), 2.0]}
    assert shape_differences(a, b) == ["['w']: (2, 3) vs (3, 2)"]
    assert tree_difference(a, b, "a", "b") is None
    # The same pair with one more leaf in b takes the walk, and finds both.
    b["c"] = jnp.zeros(1)
    assert [d.kind for d in differences(a, b)] == ["node"]
    assert tree_difference(a, b, "a", "b") == "b has leaves that a lacks: ['c']"
