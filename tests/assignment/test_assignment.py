"""gradax.assignment against optax and SciPy.

The optimal total cost equals SciPy's on random and degenerate matrices of
several shapes; the permutation itself is compared only where the optimum is
unique, and its order (what a printed result shows) is optax's.
"""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from compile_once import jit_once
from scipy.optimize import linear_sum_assignment

import gradax
from gradax import assignment as ga

EPS32 = float(jnp.finfo(jnp.float32).eps)


def test_same_names_and_signatures_as_optax():
    names = sorted(n for n in dir(optax.assignment) if not n.startswith("_"))
    assert sorted(n for n in dir(ga) if not n.startswith("_")) == names
    for name in names:
        theirs, ours = getattr(optax.assignment, name), getattr(ga, name)
        assert inspect.signature(ours) == inspect.signature(theirs), name


def test_top_level_module():
    assert gradax.assignment is ga


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
