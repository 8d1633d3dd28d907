"""The Hungarian algorithm as shortest augmenting paths (Crouse 2016)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ._problem import solve_rectangular


def _augment_from(cost, u, v, col_of, row_of, start):
    """Assigns row `start`; returns the new duals and matching.

    A Dijkstra search over columns, with reduced costs
    `cost[i, j] - u[i] - v[j] >= 0` as edge lengths, finds the nearest free
    column; the matching is flipped along the path and the duals are moved so
    that every reduced cost stays non-negative.
    """
    n, m = cost.shape
    inf = jnp.array(jnp.inf, cost.dtype)

    def not_done(state):
        return state[-1] < 0

    def scan_row(state):
        dist, came_from, seen_rows, seen_cols, row, reach, sink = state
        seen_rows = seen_rows.at[row].set(True)
        through_row = reach + cost[row] - u[row] - v
        # A column reached for the first time records its row even at an
        # infinite distance (a forbidden pair), so every path can be followed.
        better = ~seen_cols & ((through_row < dist) | (came_from < 0))
        dist = jnp.where(better, through_row, dist)
        came_from = jnp.where(better, row, came_from)
        # Closest unscanned column; among equals, a free one ends the search.
        # Without a closest one (NaN), any unscanned column keeps the search
        # moving: each step scans a new column, so it ends within m steps.
        open_dist = jnp.where(seen_cols, inf, dist)
        reach = jnp.min(open_dist)
        nearest = ~seen_cols & (open_dist == reach)
        free_nearest = nearest & (row_of < 0)
        col = jnp.where(
            jnp.any(free_nearest),
            jnp.argmax(free_nearest),
            jnp.where(jnp.any(nearest), jnp.argmax(nearest), jnp.argmax(~seen_cols)),
        )
        seen_cols = seen_cols.at[col].set(True)
        is_free = row_of[col] < 0
        sink = jnp.where(is_free, col, sink)
        row = jnp.where(is_free, row, row_of[col])
        return dist, came_from, seen_rows, seen_cols, row, reach, sink

    state = (
        jnp.full(m, inf),
        jnp.full(m, -1, int),
        jnp.zeros(n, bool),
        jnp.zeros(m, bool),
        start,
        jnp.zeros((), cost.dtype),
        jnp.full((), -1, int),
    )
    dist, came_from, seen_rows, seen_cols, _, reach, sink = jax.lax.while_loop(
        not_done, scan_row, state
    )

    # Dual update: u_i + v_j stays <= cost[i, j], with equality on the path.
    u = u.at[start].add(reach)
    others = seen_rows & (jnp.arange(n) != start)
    u = jnp.where(others, u + reach - dist[col_of], u)
    v = jnp.where(seen_cols, v + dist - reach, v)

    def flip(state):
        col, row_of, col_of, _ = state
        row = came_from[col]
        row_of = row_of.at[col].set(row)
        next_col = col_of[row]
        col_of = col_of.at[row].set(col)
        return next_col, row_of, col_of, row == start

    _, row_of, col_of, _ = jax.lax.while_loop(
        lambda s: ~s[-1], flip, (sink, row_of, col_of, jnp.array(False))
    )
    return u, v, col_of, row_of


def _solve_wide(cost: jax.Array) -> jax.Array:
    """Columns assigned to the rows of an `n x m` cost matrix, `n <= m`."""
    n, m = cost.shape

    def body(row, carry):
        u, v, col_of, row_of = carry
        return _augment_from(cost, u, v, col_of, row_of, row)

    init = (
        jnp.zeros(n, cost.dtype),
        jnp.zeros(m, cost.dtype),
        jnp.full(n, -1, int),
        jnp.full(m, -1, int),
    )
    _, _, col_of, _ = jax.lax.fori_loop(0, n, body, init)
    return col_of


def base_hungarian_algorithm(cost_matrix):
    r"""Solves the linear assignment problem by shortest augmenting paths.

    The same problem and answer as :func:`hungarian_algorithm`: for an
    :math:`n \times m` cost matrix :math:`C`, a matching of :math:`\min(n, m)`
    rows to distinct columns minimizing

    .. math::
      \sum_{ij} C_{ij} X_{ij},\quad X \in \{0, 1\}^{n \times m},\
      \sum_j X_{ij} \le 1,\ \sum_i X_{ij} \le 1,\
      \sum_{ij} X_{ij} = \min(n, m).

    Each row in turn is matched along a shortest augmenting path, found by
    Dijkstra's algorithm on the reduced costs :math:`C_{ij} - u_i - v_j \ge 0`
    (the algorithm of Crouse's survey, also behind
    `scipy.optimize.linear_sum_assignment`), in :math:`O(n^2 m)` time.
    Pure JAX: works under `jit` and `vmap`. An infinite cost forbids a
    pair; when every assignment uses a forbidden pair, some assignment is
    returned (not a meaningful one).

    Args:
      cost_matrix: an :math:`n \times m` array of costs.

    Returns:
      `(i, j)`: integer arrays of length :math:`\min(n, m)`, the rows
      (increasing) and their columns. The total cost is
      `cost_matrix[i, j].sum()`.

    Example:
      >>> import jax.numpy as jnp
      >>> from gradax.assignment import base_hungarian_algorithm
      >>> cost = jnp.array([[90, 80, 75, 70], [35, 85, 55, 65],
      ...                   [125, 95, 90, 95], [45, 110, 95, 115]])
      >>> i, j = base_hungarian_algorithm(cost)
      >>> print(j, cost[i, j].sum())
      [3 2 1 0] 265

    References:
      Crouse, `On implementing 2D rectangular assignment algorithms
      <https://doi.org/10.1109/TAES.2016.140952>`_, IEEE Transactions on
      Aerospace and Electronic Systems, 2016.
    """
    return solve_rectangular(cost_matrix, _solve_wide)
