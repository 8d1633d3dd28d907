"""An alias builds its parts once, at construction, and holds them.

Its numeric fields are read through the parts (found by identity), so JAX's
unflatten, ``init``, ``update`` and a trace build nothing, and every
operation on the pytree reaches the leaves the update reads.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from conformance_base import counting_constructions
from registry import ENTRIES, entry_id

import gradax
from gradax.declare import LEARNING_RATE, hyper


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
