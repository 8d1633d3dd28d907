"""gradax.cast_updates: updates in the gradients', parameters' or promoted dtype."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradax

BF, F32 = jnp.bfloat16, jnp.float32


@pytest.mark.parametrize(
    "to, param, grad, expected",
    [
        ("grads", F32, BF, BF),
        ("grads", BF, F32, F32),
        ("params", F32, BF, F32),
        ("params", BF, F32, BF),
        ("promote", F32, BF, F32),
        ("promote", BF, F32, F32),
        ("promote", BF, BF, BF),
    ],
)
def test_dtype_of_the_updates(to, param, grad, expected):
    params = {"w": jnp.linspace(-1, 1, 6, dtype=param)}
    grads = {"w": jnp.linspace(0.5, -0.5, 6, dtype=grad)}
    tx = gradax.cast_updates(gradax.adamw(1e-2), to=to)
    updates, state = tx.update(grads, tx.init(params), params)
    assert updates["w"].dtype == expected
    # The state stays init's: the same tree as the inner transformation's.
    assert type(state) is type(gradax.adamw(1e-2).init(params))


def test_promote_gives_optax_dtypes_for_mixed_precision():
    """optax's stateful optimizers promote: float32 updates for float32
    params and bfloat16 grads, where gradax alone gives bfloat16."""
    params = jnp.linspace(-1, 1, 6, dtype=F32)
    grads = jnp.linspace(0.5, -0.5, 6, dtype=BF)
    for name, kwargs in [("adamw", {}), ("sgd", dict(momentum=0.9)), ("lion", {})]:
        theirs = getattr(optax, name)(1e-2, **kwargs)
        ours = gradax.cast_updates(getattr(gradax, name)(1e-2, **kwargs), to="promote")
        want = theirs.update(grads, theirs.init(params), params)[0].dtype
        assert ours.update(grads, ours.init(params), params)[0].dtype == want, name
        plain = getattr(gradax, name)(1e-2, **kwargs)
        assert plain.update(grads, plain.init(params), params)[0].dtype == BF


def test_widening_first_is_the_inner_transformation_on_exact_float32_grads():
    """to="params" with float32 params and bfloat16 grads: the inner
    transformation runs on the grads widened (exactly), bit for bit."""
    params = jnp.linspace(-1, 1, 6, dtype=F32)
    grads = jnp.linspace(0.5, -0.5, 6, dtype=BF)
    inner = gradax.adamw(1e-2, weight_decay=0.1)
    tx = gradax.cast_updates(inner, to="params")
    got, _ = tx.update(grads, tx.init(params), params)
    want, _ = inner.update(grads.astype(F32), inner.init(params), params)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="to"):
        gradax.cast_updates(gradax.sgd(0.1), to="float32")
    tx = gradax.cast_updates(gradax.sgd(0.1), to="params")
    with pytest.raises(ValueError, match="needs the parameters"):
        tx.update(jnp.ones(2), tx.init(jnp.ones(2)))
