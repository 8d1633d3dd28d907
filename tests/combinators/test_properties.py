"""Property tests for the combinators over random pytrees."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import gradax

shapes = st.lists(
    st.lists(st.integers(1, 4), min_size=0, max_size=3).map(tuple),
    min_size=1,
    max_size=4,
)


@st.composite
def trees(draw):
    """A dict of float32 arrays of random shapes and values."""
    leaf_shapes = draw(shapes)
    seed = draw(st.integers(0, 2**16))
    keys = jax.random.split(jax.random.key(seed), len(leaf_shapes))
    return {
        f"p{i}": jax.random.normal(k, s)
        for i, (k, s) in enumerate(zip(keys, leaf_shapes, strict=True))
    }


TRANSFORMS = [
    lambda: gradax.scale(0.5),
    lambda: gradax.scale_by_adam(b1=0.7),
    lambda: gradax.add_decayed_weights(0.1),
    lambda: gradax.adam(0.05),
    lambda: gradax.adamw(0.02, weight_decay=0.1),
]
pick = st.integers(0, len(TRANSFORMS) - 1)


def run(tx, params, steps=3):
    """The updates of ``steps`` steps (call it under ``jax.jit``: one compile
    per example, where running eagerly compiles every op for each new shape)."""
    state = tx.init(params)
    outputs = []
    for i in range(steps):
        grads = jax.tree.map(lambda p, i=i: jnp.sin(p + i), params)
        updates, state = tx.update(grads, state, params)
        params = gradax.apply_updates(params, updates)
        outputs.append(updates)
    return outputs


def assert_close(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7)


@given(trees(), pick, pick, pick)
def test_chain_is_associative(params, i, j, k):
    a, b, c = TRANSFORMS[i](), TRANSFORMS[j](), TRANSFORMS[k]()
    left = gradax.chain(gradax.chain(a, b), c)
    right = gradax.chain(a, gradax.chain(b, c))
    flat = gradax.chain(a, b, c)
    runs = jax.jit(lambda p: [run(tx, p) for tx in (left, right, flat)])(params)
    assert_close(runs[0], runs[2])
    assert_close(runs[1], runs[2])


@given(trees(), st.data())
def test_partition_equals_running_the_parts_separately(params, data):
    labels = {k: data.draw(st.sampled_from(["x", "y"])) for k in params}
    choice = {"x": data.draw(pick), "y": data.draw(pick)}
    tx = gradax.partition({lbl: TRANSFORMS[i]() for lbl, i in choice.items()}, labels)
    parts = {label: [k for k in params if labels[k] == label] for label in choice}

    def together_and_alone(p):
        alone = {
            label: run(TRANSFORMS[choice[label]](), {k: p[k] for k in names})
            for label, names in parts.items()
            if names
        }
        return run(tx, p), alone

    together, alone_by_label = jax.jit(together_and_alone)(params)
    for label, alone in alone_by_label.items():
        names = parts[label]
        for step_together, step_alone in zip(together, alone, strict=True):
            assert_close({k: step_together[k] for k in names}, step_alone)


@given(trees(), st.data())
def test_masked_leaves_are_untouched(params, data):
    mask = {k: data.draw(st.booleans()) for k in params}
    tx = gradax.masked(TRANSFORMS[data.draw(pick)](), mask)
    grads = jax.tree.map(lambda p: jnp.cos(p), params)
    updates, _ = jax.jit(lambda g, p: tx.update(g, tx.init(p), p))(grads, params)
    for name, selected in mask.items():
        if not selected:
            # Bit-identical: the gradient object passes straight through.
            np.testing.assert_array_equal(updates[name], grads[name])


@given(trees(), pick)
def test_state_structure_and_dtypes_never_change(params, i):
    tx = TRANSFORMS[i]()
    grads = jax.tree.map(jnp.cos, params)
    # eval_shape reports the types update returns, weak types included.
    state = jax.eval_shape(tx.init, params)
    _, new_state = jax.eval_shape(lambda s: tx.update(grads, s, params), state)
    avals = lambda t: jax.tree.map(lambda x: (x.shape, x.dtype, x.weak_type), t)  # noqa: E731
    assert avals(new_state) == avals(state)
