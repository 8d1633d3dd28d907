"""named_chain keeps optax's container: an OrderedDict in the pairs' order.

jax's treedefs (and so checkpoints) tell an OrderedDict from a dict, so the
state must be optax's container, not only hold its leaves.
"""

from __future__ import annotations

from collections import OrderedDict

import jax
import jax.numpy as jnp
import numpy as np
import optax

import gradax

PARAMS = {"w": jnp.arange(6.0).reshape(3, 2), "b": jnp.ones(2)}


def pairs(module):
    # Names out of sorted order: a dict's treedef would sort them.
    return (("zeta", module.trace(0.9)), ["alpha", module.scale(-0.1)])


def test_state_is_optax_ordered_dict():
    ours = gradax.named_chain(*pairs(gradax))
    theirs = optax.named_chain(*pairs(optax))
    state = ours.init(PARAMS)
    assert type(state) is OrderedDict
    assert list(state) == ["zeta", "alpha"]
    updates, new_state = ours.update(PARAMS, state, PARAMS)
    assert type(new_state) is OrderedDict
    assert list(new_state) == ["zeta", "alpha"]
    want_updates, want_state = theirs.update(PARAMS, theirs.init(PARAMS), PARAMS)
    # trace then scale: one multiply-add and one multiply per element, the
    # same operations on the same float32 inputs as optax's: equal bits.
    for got, want in zip(
        jax.tree.leaves((updates, new_state)),
        jax.tree.leaves((want_updates, want_state)),
        strict=True,
    ):
        np.testing.assert_array_equal(got, want)


def test_treedef_equals_optax_with_optax_parts():
    """With optax's own parts inside, the whole treedef is optax's exactly."""
    ours = gradax.named_chain(*pairs(optax))
    theirs = optax.named_chain(*pairs(optax))
    assert jax.tree.structure(ours.init(PARAMS)) == jax.tree.structure(
        theirs.init(PARAMS)
    )
