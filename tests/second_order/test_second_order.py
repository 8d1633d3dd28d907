"""gradax.second_order against optax."""

from __future__ import annotations

import functools
import inspect
import types
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from compile_once import jit_once

import gradax
from gradax import second_order as gso

EPS32 = float(jnp.finfo(jnp.float32).eps)


def _public(module):
    return sorted(
        n
        for n in dir(module)
        if not n.startswith("_")
        and not isinstance(getattr(module, n), types.ModuleType)
        and getattr(getattr(module, n), "__module__", "").startswith(
            module.__name__.split(".")[0]
        )
    )


def _parameters(fn):
    return [
        (p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()
    ]


def test_names_match_optax():
    assert _public(gso) == sorted(
        n for n in dir(optax.second_order) if not n.startswith("_")
    )


def test_signatures_match_optax():
    for name in ("hvp", "hessian_diag", "fisher_diag"):
        assert _parameters(getattr(gso, name)) == _parameters(
            getattr(optax.second_order, name)
        )


# ---------------------------------------------------------------------------
# Second order.


def _mlp_loss(params, inputs, targets):
    hidden = jnp.tanh(inputs @ params["w1"] + params["b1"])
    return jnp.mean((hidden @ params["w2"] - targets) ** 2)


@functools.partial(jit_once, static_argnums=0)
def _second_order_outputs(lib, params, inputs, targets, v):
    return (
        lib.hvp(_mlp_loss, v, params, inputs, targets),
        lib.hessian_diag(_mlp_loss, params, inputs, targets),
        lib.fisher_diag(_mlp_loss, params, inputs, targets),
    )


def test_second_order_values_and_warnings_match_optax():
    rng = np.random.default_rng(0)
    params = {
        "w1": jnp.asarray(rng.normal(size=(3, 4)), jnp.float32),
        "b1": jnp.asarray(rng.normal(size=4), jnp.float32),
        "w2": jnp.asarray(rng.normal(size=(4, 2)), jnp.float32),
    }
    inputs = jnp.asarray(rng.normal(size=(5, 3)), jnp.float32)
    targets = jnp.asarray(rng.normal(size=(5, 2)), jnp.float32)
    v = jnp.asarray(rng.normal(size=3 * 4 + 4 + 4 * 2), jnp.float32)
    args = (params, inputs, targets, v)

    with warnings.catch_warnings(record=True) as ours_caught:
        warnings.simplefilter("always")
        ours = _second_order_outputs(gso, *args)
    with warnings.catch_warnings(record=True) as theirs_caught:
        warnings.simplefilter("always")
        theirs = _second_order_outputs(optax.second_order, *args)

    # The same arithmetic (autodiff of the same loss): equal up to rounding of
    # sums of ~20 products of size ~1, a few ulps each.
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True):
        np.testing.assert_allclose(a, b, rtol=16 * EPS32, atol=16 * EPS32)

    # One DeprecationWarning per call, pointing at the caller (this file).
    assert [w.category for w in ours_caught] == [DeprecationWarning] * 3
    names = ("hvp", "hessian_diag", "fisher_diag")
    for w, name in zip(ours_caught, names, strict=True):
        assert name in str(w.message)
        assert w.filename == __file__
    assert {w.category for w in theirs_caught} == {DeprecationWarning}


def test_second_order_warns_under_pytest_warns():
    with pytest.warns(DeprecationWarning, match="fisher_diag"):
        gso.fisher_diag(
            _mlp_loss,
            {"w1": jnp.ones((1, 1)), "b1": jnp.ones(1), "w2": jnp.ones((1, 1))},
            jnp.ones((2, 1)),
            jnp.ones((2, 1)),
        )


def test_top_level_module():
    assert gradax.second_order is gso
