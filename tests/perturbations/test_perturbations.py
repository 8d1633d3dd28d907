"""gradax.perturbations against optax.

Perturbed functions: values and derivatives equal to optax's (the same random
draws and the same arithmetic).
"""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import optax
from compile_once import jit_once

import gradax
from gradax import perturbations as gpert

EPS32 = float(jnp.finfo(jnp.float32).eps)


def _signature(fn):
    parameters = inspect.signature(fn).parameters.values()
    return [(p.name, p.kind) for p in parameters]


def _defaults(fn):
    """Defaults that are plain values; objects (noise instances) by type name."""
    out = []
    for p in inspect.signature(fn).parameters.values():
        d = p.default
        plain = d is inspect.Parameter.empty or isinstance(d, (int, float, str))
        out.append(d if plain else type(d).__name__)
    return out


def test_same_names_and_signatures_as_optax(module="perturbations"):
    theirs, ours = getattr(optax, module), getattr(gradax, module)
    names = sorted(n for n in dir(theirs) if not n.startswith("_"))
    assert sorted(n for n in dir(ours) if not n.startswith("_")) == names
    for name in names:
        if inspect.isclass(getattr(theirs, name)):
            continue  # the noise classes take no arguments in either library
        assert _signature(getattr(ours, name)) == _signature(getattr(theirs, name))
        assert _defaults(getattr(ours, name)) == _defaults(getattr(theirs, name))


# ---------------------------------------------------------------------------
# Perturbations.


def _one_hot_argmax(x):
    """Piecewise constant in ``x``: the perturbed version smooths it."""
    scores = x["a"] + jnp.sum(x["b"])
    return {"hot": jax.nn.one_hot(jnp.argmax(scores), scores.shape[-1]), "s": x["b"]}


def _perturbed_outputs(lib, key, x):
    """Values, Jacobians and a Hessian: both noises, with and without baseline."""
    out = {}
    for noise, baseline in (("Gumbel", True), ("Normal", False)):
        fn = lib.make_perturbed_fun(
            _one_hot_argmax, 64, 0.5, getattr(lib, noise)(), baseline
        )
        out[f"{noise}-{baseline}"] = (fn(key, x), jax.jacrev(fn, 1)(key, x))
    # Second derivatives, with the defaults (Gumbel noise, a baseline).
    smooth_max = lib.make_perturbed_fun(lambda v: jnp.max(v), 64, 0.5)
    out["hessian"] = jax.hessian(smooth_max, 1)(key, x["a"])
    return out


def test_perturbed_fun_matches_optax():
    # Any key works the same in both libraries; "rbg" keys compile faster on
    # CPU than the default threefry ones.
    key = jax.random.key(3, impl="rbg")
    x = {"a": jnp.array([0.2, -0.1, 0.4, 0.35]), "b": jnp.array([0.1, -0.3])}
    run = jit_once(_perturbed_outputs, static_argnums=0)
    ours = run(gpert, key, x)
    theirs = run(optax.perturbations, key, x)
    # Same keys, same samples and the same operations in the same order: the
    # results agree to the last bit up to XLA's freedom to fuse; allow 4 ulps
    # of the largest magnitude (means of 64 terms of size <= 10).
    leaves_ours, leaves_theirs = jax.tree.leaves(ours), jax.tree.leaves(theirs)
    assert jax.tree.structure(ours) == jax.tree.structure(theirs)
    for a, b in zip(leaves_ours, leaves_theirs, strict=True):
        np.testing.assert_allclose(a, b, rtol=4 * EPS32, atol=40 * EPS32)


def test_noise_distributions_match_optax():
    key = jax.random.key(0)
    z = jnp.linspace(-3.0, 3.0, 7)
    for name in ("Gumbel", "Normal"):
        ours, theirs = getattr(gpert, name)(), getattr(optax.perturbations, name)()
        np.testing.assert_array_equal(ours.sample(key, (5,)), theirs.sample(key, (5,)))
        np.testing.assert_allclose(ours.log_prob(z), theirs.log_prob(z), rtol=EPS32)
        assert ours == getattr(gpert, name)()  # value objects


def test_perturbed_fun_is_unbiased_on_a_linear_function():
    """For linear f, E f(x + s z) = f(x) + s E z and the gradient is exact in mean."""
    w = jnp.array([1.0, -2.0, 0.5])
    fn = gpert.make_perturbed_fun(lambda x: jnp.dot(w, x), 4000, 0.1, gpert.Normal())
    grad = jit_once(jax.grad(fn, 1))(jax.random.key(1, impl="rbg"), jnp.zeros(3))
    # The score-function estimate of a gradient of size |w| ~ 2.3 from 4000
    # samples has a standard error of about |w| / sqrt(4000) ~ 0.04: 5 sigma.
    np.testing.assert_allclose(grad, w, atol=0.2)


def test_top_level_module():
    assert gradax.perturbations is gpert
