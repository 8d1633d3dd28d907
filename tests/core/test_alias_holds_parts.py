"""An alias builds its parts once, at construction, and holds them.

Its numeric fields are read through the parts (found by identity), so JAX's
unflatten, ``init``, ``update`` and a trace build nothing, and every
operation on the pytree reaches the leaves the update reads.
"""

from __future__ import annotations

import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance_base import counting_constructions
from registry import ENTRIES, entry_id

import gradax
from gradax.declare import LEARNING_RATE, HyperparameterWarning, hyper


def test_the_leaves_are_the_parts_and_the_fields_read_them():
    tx = gradax.adamw(1e-3, b1=0.8, eps=0.0, eps_root=0.0, weight_decay=0.05)
    # eps and eps_root are one literal 0.0 object: still told apart.
    assert jax.tree.leaves(tx) == [0.8, 0.999, 0.0, 0.0, 0.05, 1e-3]
    doubled = jax.tree.map(lambda x: 2 * x, tx)
    assert (doubled.b1, doubled.weight_decay, doubled.learning_rate) == (1.6, 0.1, 2e-3)
    assert doubled.parts().transforms[0].b1 == 1.6
    marks = [0.125, 0.25, 0.375, 0.5, 0.625, 0.75]
    marked = jax.tree.unflatten(jax.tree.structure(tx), marks)
    assert (marked.b1, marked.b2, marked.eps, marked.eps_root) == tuple(marks[:4])
    assert (marked.weight_decay, marked.learning_rate) == tuple(marks[4:])
    # replace builds the parts again, from the fields read through the old.
    assert marked.replace(b1=0.5).parts().transforms[0].b1 == 0.5


def test_a_trace_builds_nothing_and_a_new_rate_does_not_recompile():
    params = {"w": jnp.ones((3, 2)), "b": jnp.ones(2)}
    txs = [
        gradax.chain(
            gradax.clip_by_global_norm(1.0),
            gradax.adamw(gradax.cosine_decay_schedule(rate, 10)),
        )
        for rate in (1e-2, 3e-2)
    ]
    state = txs[0].init(params)
    traces = []

    @jax.jit
    def step(t, s):
        traces.append(None)
        return t.update(params, s, params)

    with counting_constructions() as made:
        for tx in txs:
            step(tx, state)
    assert len(traces) == 1
    assert not made, dict(made)


def test_a_gradient_reaches_the_learning_rate():
    params = jnp.array([1.0, -2.0])
    weights = jnp.array([1.0, 3.0])
    tx = gradax.adam(0.1)
    state = tx.init(params)

    def moved(t):
        updates = t.update(params, state, params)[0]
        return (weights * gradax.apply_updates(params, updates)).sum()

    grads = jax.grad(moved)(tx)
    # d/d lr of -lr * direction: the first Adam direction is sign(g).
    np.testing.assert_allclose(grads.learning_rate, -(weights * jnp.sign(params)).sum())
    assert grads.parts().transforms[1].learning_rate is grads.learning_rate


class _negated(gradax.Alias):
    """An alias whose build computes from its field: held as fields instead."""

    rate: Any = hyper(valid=LEARNING_RATE)

    def build(self):
        return gradax.scale(-self.rate)


def test_an_alias_that_computes_from_a_field_keeps_its_fields_as_leaves():
    tx = _negated(0.5)
    assert jax.tree.leaves(tx) == [0.5]
    halved = jax.tree.map(lambda x: x / 2, tx)
    assert halved.rate == 0.25
    out, _ = halved.update(jnp.ones(2), halved.init(jnp.ones(2)))
    np.testing.assert_array_equal(out, -0.25 * jnp.ones(2))


def _is_none(x: Any) -> bool:
    return x is None


def test_every_entry_maps_with_none_as_a_leaf():
    """A map with `None` a leaf gives a value where a part has a `None`
    field (optimistix's implicit JVP marks its solver's missing tangents so,
    through equinox's `partition`): the alias still reads its fields from the
    mapped parts, and mapping back gives an equal transformation."""
    failures = []
    for entry in ENTRIES:
        tx = entry.build()
        try:
            marked = jax.tree.map(_is_none, tx, is_leaf=_is_none)
            kept = jax.tree.map(
                lambda x, none: None if none else x, tx, marked, is_leaf=_is_none
            )
            assert kept == tx
        except Exception as error:  # noqa: BLE001 - each entry reported
            failures.append(f"{entry_id(entry)}: {type(error).__name__}: {error}")
    assert not failures, "\n".join(failures[:10])


def test_a_none_field_of_a_part_marked_reads_the_fields_around_it():
    tx = gradax.lbfgs(learning_rate=0.5, memory_size=4)
    marked = jax.tree.map(lambda x: "none" if x is None else x, tx, is_leaf=_is_none)
    assert marked.learning_rate == 0.5 and marked.memory_size == 4
    assert jax.tree.leaves(marked) != jax.tree.leaves(tx)  # the marks are leaves


def test_every_field_is_found_by_tree_surgery():
    """`eqx.tree_at(lambda t: t.<field>, tx, value)` finds each numeric field
    in the tree, where the parts hold it (a schedule as the node itself), and
    setting the value it has gives back an equal transformation, unwarned."""
    import equinox as eqx

    failures = []
    with warnings.catch_warnings():
        warnings.simplefilter("error", HyperparameterWarning)
        for entry in ENTRIES:
            tx = entry.build()
            # A field the build does not read stays structure (Muon's
            # adam_* options beside adam=): not in the tree to be found.
            unused = tx.unused_fields() if isinstance(tx, gradax.Alias) else ()
            for name in type(tx)._data_fields:
                value = getattr(tx, name)
                if name in unused or not jax.tree.leaves(value):
                    continue
                try:
                    edited = eqx.tree_at(lambda t, n=name: getattr(t, n), tx, value)
                    assert edited == tx
                except Exception as error:  # noqa: BLE001 - each entry reported
                    failures.append(
                        f"{entry_id(entry)}.{name}: {type(error).__name__}: {error}"
                    )
    assert not failures, "\n".join(failures[:10])


def test_tree_surgery_sets_a_schedule_of_another_kind():
    import equinox as eqx

    params = {"w": jnp.ones((4, 3)), "b": jnp.zeros(3)}
    grads = jax.tree.map(lambda x: 0.1 * jnp.ones_like(x), params)
    cosine = gradax.cosine_decay_schedule(1e-3, 100)
    warmup = gradax.warmup_cosine_decay_schedule(0.0, 2e-3, 10, 100)
    step = jax.jit(lambda tx, *args: tx.update(*args))
    for old, new in [(1e-3, cosine), (cosine, 2e-3), (cosine, warmup)]:
        for make in (gradax.adamw, lambda lr: gradax.sgd(lr, momentum=0.9)):
            edited = eqx.tree_at(lambda t: t.learning_rate, make(old), new)
            built = make(new)
            assert edited == built and edited.learning_rate == new
            state, built_state = edited.init(params), built.init(params)
            assert jax.tree.structure(state) == jax.tree.structure(built_state)
            for _ in range(3):  # past the warmup's first step
                # One compiled program for both (equal tree definitions), so
                # the numbers are bit for bit the same.
                got, state = step(edited, grads, state, params)
                want, built_state = step(built, grads, built_state, params)
                np.testing.assert_array_equal(got["w"], want["w"])


def test_tree_surgery_on_a_field_two_parts_hold_warns():
    """Muon passes `learning_rate` to both groups; an edit of one place
    reaches only the AdamW group, and the alias says so."""
    import equinox as eqx

    tx = gradax.muon(1e-3)
    with pytest.warns(HyperparameterWarning, match=r"learning_rate: 0\.002 at .*adam"):
        eqx.tree_at(lambda t: t.learning_rate, tx, 2e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", HyperparameterWarning)
        assert jax.tree.map(lambda x: 2 * x, tx).learning_rate == 2e-3
        assert tx.replace(learning_rate=2e-3) == gradax.muon(2e-3)


def test_a_shared_schedule_passed_to_jit_is_not_warned_about():
    """Under `jit` each copy of a shared schedule's numbers is a tracer of
    its own: the copies cannot be compared, and are not said to differ."""
    tx = gradax.muon(gradax.cosine_decay_schedule(0.02, 100))
    params = {"w": jnp.ones((4, 3)), "b": jnp.zeros(3)}
    state = tx.init(params)
    with warnings.catch_warnings():
        warnings.simplefilter("error", HyperparameterWarning)
        jax.jit(lambda tx, s: tx.update(params, s, params))(tx, state)
