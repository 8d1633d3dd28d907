"""optax.tree_utils' deprecated names: served with a DeprecationWarning that
names the replacement, computing optax's numbers."""

from __future__ import annotations

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradax.tree_utils as gtu

DEPRECATED = {
    # name: (the replacement the message names, a call, keyword arguments)
    "tree_scalar_mul": ("tree_scale", lambda f, x, y: f(-1.5, x), {}),
    "tree_add_scalar_mul": ("tree_add_scale", lambda f, x, y: f(x, 0.25, y), {}),
    "tree_l1_norm": ("ord=1", lambda f, x, y: f(x), {}),
    "tree_l2_norm": ("tree_norm", lambda f, x, y: f(x), {"squared": True}),
    "tree_linf_norm": ("ord=jnp.inf", lambda f, x, y: f(x), {}),
}


def trees():
    rng = np.random.default_rng(0)
    x = {
        "w": jnp.asarray(rng.normal(size=(3, 2)), jnp.float32),
        "b": (jnp.asarray(-4.0), None),
    }
    y = {
        "w": jnp.asarray(rng.normal(size=(3, 2)), jnp.float32),
        "b": (jnp.asarray(0.5), None),
    }
    return x, y


def fetch(module, name):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        function = getattr(module, name)
    return function, caught


@pytest.mark.parametrize("name", sorted(DEPRECATED))
def test_deprecated_name_warns_and_matches_optax(name):
    replacement, call, kwargs = DEPRECATED[name]
    ours, caught = fetch(gtu, name)
    theirs, _ = fetch(optax.tree_utils, name)
    assert [w.category for w in caught] == [DeprecationWarning]
    message = str(caught[0].message)
    assert name in message and replacement in message
    # stacklevel=2: the warning points at the line that reads the name.
    assert caught[0].filename == __file__
    x, y = trees()
    for extra in ({}, kwargs):
        got = call(functools.partial(ours, **extra), x, y)
        want = call(functools.partial(theirs, **extra), x, y)
        # Same operations in the same order on the same float32 inputs: the
        # same rounding, so equal bits.
        for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
            assert jnp.asarray(g).dtype == jnp.asarray(w).dtype


def test_from_import_and_unknown_names():
    with pytest.warns(DeprecationWarning, match="tree_norm"):
        from gradax.tree_utils import tree_l2_norm  # noqa: F401
    with pytest.raises(AttributeError, match="no_such_name"):
        gtu.no_such_name  # noqa: B018
