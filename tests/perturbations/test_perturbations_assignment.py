"""gradax.perturbations and gradax.assignment against optax and SciPy.

Perturbed functions: values and derivatives equal to optax's (the same random
draws and the same arithmetic). Assignment: the optimal total cost equals
SciPy's on random and degenerate matrices of several shapes; the permutation
itself is compared only where the optimum is unique, and its order (what a
printed result shows) is optax's.
"""

from __future__ import annotations

import functools
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from scipy.optimize import linear_sum_assignment

import gradax
from gradax import assignment as ga
from gradax import perturbations as gpert

EPS32 = float(jnp.finfo(jnp.float32).eps)

# Each test program is compiled once and run once: without LLVM's optimization
# of the generated code it compiles in about half the time. Both libraries are
# compiled alike, so comparisons are like with like.
jit_once = functools.partial(
    jax.jit, compiler_options={"xla_backend_optimization_level": 0}
)


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


@pytest.mark.parametrize("module", ["perturbations", "assignment"])
def test_same_names_and_signatures_as_optax(module):
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


# ---------------------------------------------------------------------------
# Assignment.


def _degenerate_batch(n: int, m: int, seed: int) -> np.ndarray:
    """Random and tie-heavy cost matrices of one shape."""
    rng = np.random.default_rng(seed)
    mats = [
        rng.normal(size=(n, m)),  # a unique optimum (almost surely)
        rng.normal(size=(n, m)) * 1e3 - 5e2,  # large, negative
        rng.integers(0, 3, size=(n, m)),  # many ties
        np.ones((n, m)),  # every assignment optimal
        np.zeros((n, m)),
        np.outer(rng.integers(0, 3, n), rng.integers(0, 3, m)),  # rank one
        np.tile(rng.normal(size=(1, m)), (n, 1)),  # identical rows
        np.tile(rng.normal(size=(n, 1)), (1, m)),  # identical columns
        -np.arange(n * m).reshape(n, m),  # a maximization in disguise
        _forbidden_pairs(rng, n, m),
    ]
    return np.stack(mats).astype(np.float32)


def _forbidden_pairs(rng, n, m):
    """About half the pairs forbidden (infinite cost), an assignment still open."""
    cost = np.where(rng.random((n, m)) < 0.5, np.inf, rng.normal(size=(n, m)))
    k = min(n, m)
    rows, cols = rng.permutation(n)[:k], rng.permutation(m)[:k]
    cost[rows, cols] = rng.normal(size=k)
    return cost


SHAPES = [(5, 5), (3, 6), (6, 3), (1, 4)]
SOLVERS = ["hungarian_algorithm", "base_hungarian_algorithm"]


@pytest.mark.parametrize("solver", SOLVERS)
def test_optimal_cost_matches_scipy(solver):
    solve = jit_once(jax.vmap(getattr(ga, solver)))
    for seed, (n, m) in enumerate(SHAPES):
        batch = _degenerate_batch(n, m, seed)
        rows, cols = map(np.asarray, solve(jnp.asarray(batch)))
        k = min(n, m)
        assert rows.shape == cols.shape == (len(batch), k)
        for cost, r, c in zip(batch, rows, cols, strict=True):
            _assert_optax_order(solver, n, m, r, c)
            r, c = _by_row(r, c)
            assert len(set(c.tolist())) == k, "distinct columns"
            assert r.min() >= 0 and r.max() < n and c.min() >= 0 and c.max() < m
            sr, sc = linear_sum_assignment(cost)
            best = cost[sr, sc].sum()
            # Sums of k <= 5 float32 entries of size <= 1e3 (scaled by the
            # entries' magnitude): different orders differ by k ulps each.
            size = np.abs(cost[np.isfinite(cost)]).max()
            tol = 8 * k * EPS32 * max(1.0, float(size))
            assert cost[r, c].sum() == pytest.approx(best, abs=tol)
        # Random normal costs have a unique optimum: the same pairs as SciPy.
        sr, sc = linear_sum_assignment(batch[0])
        r, c = _by_row(rows[0], cols[0])
        np.testing.assert_array_equal(r, sr)
        np.testing.assert_array_equal(c, sc)


def _by_row(rows, cols):
    """The pairs sorted by row (SciPy's order)."""
    order = np.argsort(rows)
    return rows[order], cols[order]


def _pair_set(rows, cols):
    return set(zip(rows.tolist(), cols.tolist(), strict=True))


def _assert_optax_order(solver, n, m, rows, cols):
    """The order each optax solver lists its pairs in (measured on optax).

    base_hungarian_algorithm: by increasing row. hungarian_algorithm: by
    increasing column for a square matrix, by decreasing row for a wide one,
    by decreasing column for a tall one.
    """
    if solver == "base_hungarian_algorithm":
        assert np.all(np.diff(rows) > 0), "rows increase"
    elif n == m:
        assert np.all(np.diff(cols) > 0), "columns increase"
    elif n < m:
        assert np.all(np.diff(rows) < 0), "rows decrease"
    else:
        assert np.all(np.diff(cols) < 0), "columns decrease"


@pytest.mark.parametrize("solver", SOLVERS)
def test_pairs_come_in_optax_order(solver):
    """The same arrays as optax's, element for element, for every shape.

    Random costs have a unique optimum, so both libraries find the same pairs
    and the order alone can differ. Costs with ties can have several optima:
    there the order is compared whenever the pair sets agree.
    """
    ours, theirs = getattr(ga, solver), getattr(optax.assignment, solver)
    rng = np.random.default_rng(7)
    shapes = [(4, 4), (1, 1), (3, 7), (1, 5), (7, 3), (5, 1), (6, 6), (2, 9)]
    for n, m in shapes:
        unique = rng.normal(size=(n, m))
        ties = rng.integers(0, 3, size=(n, m))
        for cost, must_agree in ((unique, True), (ties, False)):
            cost = jnp.asarray(cost, jnp.float32)
            i, j = map(np.asarray, ours(cost))
            oi, oj = map(np.asarray, theirs(cost))
            same_pairs = _pair_set(i, j) == _pair_set(oi, oj)
            assert same_pairs or not must_agree, (n, m)
            if same_pairs:
                np.testing.assert_array_equal(i, oi)
                np.testing.assert_array_equal(j, oj)


@pytest.mark.parametrize("solver", SOLVERS)
def test_assignment_edge_inputs(solver):
    ours = getattr(ga, solver)
    # Integer costs, eagerly: optax's documentation example (optimum 15).
    cost = jnp.array([[8, 4, 7], [5, 2, 3], [9, 6, 7], [9, 4, 8]])
    i, j = ours(cost)
    assert i.dtype == j.dtype == jnp.arange(1).dtype
    assert int(cost[i, j].sum()) == 15
    # Every assignment uses a forbidden pair: still a valid matching (optax's
    # base_hungarian_algorithm does not return on this one).
    i, j = ours(jnp.array([[jnp.inf, jnp.inf], [1.0, 1.0]]))
    assert sorted(np.asarray(j).tolist()) == [0, 1]
    # Empty matrices give empty assignments.
    for shape in ((0, 3), (3, 0), (0, 0)):
        i, j = ours(jnp.zeros(shape))
        assert i.shape == j.shape == (0,)


def test_top_level_modules():
    assert gradax.perturbations is gpert
    assert gradax.assignment is ga
