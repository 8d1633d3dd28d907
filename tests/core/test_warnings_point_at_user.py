"""Every warning gradax gives points at the user's line, not at gradax's.

A warning's filename and line are what the user sees first; one that points
inside gradax (or JAX's tracing) sends them to read library code.
"""

import inspect
import warnings

import jax
import jax.numpy as jnp
import pytest

import gradax
from gradax.declare import HyperparameterWarning

PARAMS = {
    "embed": jnp.ones((50, 8)),
    "head": jnp.ones((8, 50)),
    "w": jnp.ones((8, 8)),
}


def _next_line() -> int:
    """The line after the caller's: where the call under test is written."""
    return inspect.currentframe().f_back.f_lineno + 1


def _all_at(caught, category, line):
    ours = [w for w in caught if issubclass(w.category, category)]
    assert ours, f"no {category.__name__} was given"
    for w in ours:
        assert (w.filename, w.lineno) == (__file__, line), (
            f"{category.__name__} points at {w.filename}:{w.lineno}: {w.message}"
        )


@pytest.mark.parametrize("jitted", [False, True], ids=["eager", "jit"])
def test_routing_warning_points_at_the_init_call(jitted):
    from gradax.orthogonal import routing

    routing._warned.clear()  # the warning is given once per path
    tx = gradax.muon(1e-3)
    init = jax.jit(tx.init) if jitted else tx.init
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = _next_line()
        init(PARAMS)
    assert any("routes" in str(w.message) for w in caught)
    _all_at(caught, UserWarning, line)


@pytest.mark.parametrize(
    "name, kwargs",
    [
        ("adam", {"learning_rate": -1e-3}),
        ("muon", {"learning_rate": -0.02}),
        ("sgd", {"learning_rate": -0.1, "momentum": 0.9}),
    ],
)
def test_negative_learning_rate_warning_points_at_the_call(name, kwargs):
    build = getattr(gradax, name)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = _next_line()
        build(**kwargs)
    assert any("negative learning rate" in str(w.message) for w in caught)
    _all_at(caught, HyperparameterWarning, line)


def test_negative_learning_rate_through_inject_hyperparams_points_at_the_call():
    build = gradax.inject_hyperparams(gradax.adamw)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = _next_line()
        build(learning_rate=-1e-3)
    assert any("negative learning rate" in str(w.message) for w in caught)
    _all_at(caught, HyperparameterWarning, line)
