"""A transformation made of the user's own functions gets what optax gives it.

optax's `GradientTransformation(init_fn, update_fn)` hands `update`'s
arguments to the user's function untouched; trainers rely on it (a
sharpness-aware one passes `(grad_fn, params)` as params). gradax's checks at
the edge are for its own update rules only.
"""

import jax
import jax.numpy as jnp
import optax
import pytest

import gradax

PARAMS = {"w": jnp.arange(3.0)}
GRADS = {"w": jnp.ones(3)}


def recording(lib, seen):
    """A transformation that records the params and extra args it is given."""

    def update(updates, state, params=None, **extra):
        seen.append((params, extra))
        return jax.tree.map(lambda u: 2 * u, updates), state

    return lib.GradientTransformationExtraArgs(lambda p: lib.EmptyState(), update)


def sam_params():
    return (lambda q: q, PARAMS)


@pytest.mark.parametrize("lib", [optax, gradax], ids=["optax", "gradax"])
def test_params_and_extra_args_arrive_as_given(lib):
    seen = []
    tx = recording(lib, seen)
    given, token = sam_params(), object()
    out, _ = tx.update(GRADS, tx.init(PARAMS), given, token=token)
    assert seen[-1][0] is given and seen[-1][1]["token"] is token
    assert out["w"].tolist() == [2.0, 2.0, 2.0]
    # Inside a chain, next to a part that does not read params: optax's
    # chain hands the params on to every part as given.
    chain = lib.chain(tx, lib.scale(0.5))
    out, _ = chain.update(GRADS, chain.init(PARAMS), given, token=token)
    assert seen[-1][0] is given and seen[-1][1]["token"] is token
    assert out["w"].tolist() == [1.0, 1.0, 1.0]


def test_the_issue_repro_under_jit_and_eagerly():
    tx = gradax.GradientTransformation(
        lambda p: gradax.EmptyState(), lambda u, s, extra: (u, s)
    )
    state = tx.init(PARAMS)
    out, _ = tx.update(GRADS, state, (lambda q: q, PARAMS))
    assert out["w"].tolist() == [1.0, 1.0, 1.0]
    jitted = jax.jit(lambda g, s, p: tx.update(g, s, (None, p)))
    assert jitted(GRADS, state, PARAMS)[0]["w"].tolist() == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("lib", [optax, gradax], ids=["optax", "gradax"])
def test_no_tree_shape_or_dtype_check_on_the_users_function(lib):
    seen = []
    tx = recording(lib, seen)
    state = tx.init(PARAMS)
    other_shape = {"w": jnp.ones(5)}
    tx.update(GRADS, state, other_shape)
    assert seen[-1][0] is other_shape
    # Integer updates: the user's function decides what they mean.
    out, _ = tx.update({"w": jnp.arange(3)}, state, PARAMS)
    assert out["w"].dtype == jnp.arange(3).dtype


def test_named_keyword_without_kwargs_is_passed():
    def update(updates, state, params=None, value=None):
        return jax.tree.map(lambda u: u * value, updates), state

    for lib in (optax, gradax):
        tx = lib.GradientTransformationExtraArgs(lambda p: (), update)
        out, _ = tx.update(GRADS, tx.init(PARAMS), None, value=3.0)
        assert out["w"].tolist() == [3.0, 3.0, 3.0], lib.__name__


def test_an_optax_object_and_an_optax_style_subclass_get_params_as_given():
    seen = []

    def update(updates, state, params=None):
        seen.append(params)
        return updates, state

    class Staged(gradax.GradientTransformation):
        def stages(self):
            return 1

    given = sam_params()
    for part in (
        Staged(lambda p: (), update),
        optax.GradientTransformation(lambda p: (), update),
    ):
        chain = gradax.chain(part, gradax.scale(1.0))
        chain.update(GRADS, chain.init(PARAMS), given)
        assert seen[-1] is given


def test_gradax_rules_still_check_what_they_are_given():
    tx = gradax.adam(0.1)
    with pytest.raises(gradax.UpdateError, match="Tree mismatch"):
        tx.update(GRADS, tx.init(PARAMS), {"v": jnp.ones(3)})
    with pytest.raises(gradax.UpdateError, match="floating-point"):
        tx.update({"w": jnp.arange(3)}, tx.init(PARAMS), PARAMS)


def test_the_params_argument_given_by_its_own_name():
    # init2winit's SAM: `update(grads, state, grad_fn_params_tuple=(f, p))`.
    def update(updates, state, grad_fn_params_tuple):
        grad_fn, params = grad_fn_params_tuple
        return grad_fn(params), state

    given = (lambda q: jax.tree.map(lambda x: 3 * x, q), PARAMS)
    for lib in (optax, gradax):
        tx = lib.GradientTransformation(lambda p, lib=lib: lib.EmptyState(), update)
        out, _ = tx.update(GRADS, tx.init(PARAMS), grad_fn_params_tuple=given)
        assert out["w"].tolist() == [0.0, 3.0, 6.0], lib.__name__
