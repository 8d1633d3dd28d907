"""The Module base: one construction path, converters, checks at every level."""

from __future__ import annotations

import inspect
from typing import Any

import jax
import jax.numpy as jnp
import optax
import pytest

import gradax
from gradax._core.pytree import Module
from gradax.declare import NONNEGATIVE, hyper


def test_replace_converts_like_the_constructor():
    # The case: an optax transformation given to replace is wrapped as
    # the constructor wraps it, so an update with extra arguments works.
    params = jnp.ones(2)
    unit = optax.scale(1.0)
    built = gradax.chain(unit, gradax.scale(2.0))
    replaced = gradax.chain(gradax.adam(1e-3)).replace(
        transforms=(unit, gradax.scale(2.0))
    )
    assert replaced == built
    for tx in (built, replaced):
        updates, _ = tx.update(params, tx.init(params), value=1.0)
        assert jnp.array_equal(updates, 2 * params)


def test_replace_runs_the_declared_checks():
    with pytest.raises(gradax.HyperparameterError, match="b1"):
        gradax.adam(1e-3).replace(b1=1.5)
    with pytest.raises(TypeError, match=r"transforms\[0\] must be a gradient"):
        gradax.chain(gradax.adam(1e-3)).replace(transforms=(3.0,))


SEEN: list[str] = []  # which __check_init__ ran, in order


class _Base(Module):
    low: Any = hyper(default=0.0, valid=NONNEGATIVE)

    def __check_init__(self):
        SEEN.append("base")


class _Child(_Base):
    high: Any = hyper(default=1.0, valid=NONNEGATIVE)

    def __check_init__(self):
        SEEN.append("child")
        if self.high < self.low:
            raise ValueError("high must be >= low")


def test_check_init_runs_at_every_level_base_first():
    SEEN.clear()
    _Child(low=0.5, high=1.0)
    assert SEEN == ["base", "child"]
    with pytest.raises(ValueError, match="high must be >= low"):
        _Child(low=2.0, high=1.0)
    child = _Child()
    SEEN.clear()
    child.replace(high=3.0)
    assert SEEN == ["base", "child"]


def test_unflatten_converts_and_checks_nothing():
    # jit rebuilds the object from tracers: no converter, range or check may
    # run on them (they would fail on a tracer, or cost a device sync).
    SEEN.clear()
    obj = _Child(low=0.5, high=1.0)
    SEEN.clear()
    out = jax.jit(lambda o: o.high - o.low)(obj)
    assert float(out) == 0.5
    assert SEEN == []
    leaves, treedef = jax.tree.flatten(obj)
    rebuilt = jax.tree.unflatten(treedef, [-1.0, -2.0])  # out of range: unchecked
    assert (rebuilt.low, rebuilt.high) == (-1.0, -2.0)


def test_old_hooks_are_refused_at_class_creation():
    with pytest.raises(TypeError, match="__check_init__"):

        class _Old(Module):
            def _check(self):
                pass

    with pytest.raises(TypeError, match="converter"):

        class _Older(Module):
            def __post_init__(self):
                pass


def test_a_custom_init_gets_the_same_finish():
    # chain has its own __init__(*transforms); the field converter still runs.
    tx = gradax.chain(optax.sgd(0.1))
    assert isinstance(tx.transforms[0], gradax.GradientTransformation)


def test_signatures_are_the_constructors():
    assert list(inspect.signature(gradax.adam).parameters)[:3] == [
        "learning_rate",
        "b1",
        "b2",
    ]
    assert list(inspect.signature(gradax.chain).parameters) == ["transforms"]
    assert list(inspect.signature(gradax.GradientTransformation).parameters) == [
        "init",
        "update",
    ]
    # An instance keeps its own signature (a schedule is called with a count).
    schedule = gradax.linear_schedule(1.0, 0.0, 10)
    assert list(inspect.signature(schedule).parameters) == ["count"]
