"""The Hungarian algorithm with dual potentials, one row added at a time."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ._problem import solve_rectangular


def _in_optax_order(
    rows: jax.Array, cols: jax.Array, n: int, m: int
) -> tuple[jax.Array, jax.Array]:
    """Reorders pairs sorted by row into the order optax returns them in.

    optax lists the pairs of a square matrix by increasing column, and those
    of a rectangular one by decreasing index along its shorter side: rows of
    a wide matrix, columns of a tall one. Code that prints or zips the arrays
    sees the order, so it is part of the drop-in result.
    """
    if n == m:
        order = jnp.argsort(cols)
    elif n < m:
        order = jnp.arange(n)[::-1]  # rows are 0..n-1 already
    else:
        order = jnp.argsort(cols)[::-1]  # the m columns are distinct
    return rows[order], cols[order]


def _solve_wide(cost: jax.Array) -> jax.Array:
    """Columns assigned to the rows of an `n x m` cost matrix, `n <= m`.

    Index 0 of the column arrays is a virtual column holding the row being
    inserted; real column `j` is index `j + 1`, and rows are 1-based in
    `row_of`, 0 meaning "free". Row potentials `u` have two spare slots:
    index 0 is never read and index `n + 1` absorbs masked-out updates.
    """
    n, m = cost.shape
    dtype = cost.dtype
    inf = jnp.array(jnp.inf, dtype)
    columns = jnp.arange(m + 1)

    def insert_row(carry, row):
        u, v, row_of = carry
        row_of = row_of.at[0].set(row + 1)

        # Dijkstra-like growth of a tree of tight edges from the new row until
        # it reaches a free column, shifting potentials by the smallest slack.
        def grow(state):
            u, v, visited, slack, came_from, col = state
            visited = visited.at[col].set(True)
            i = row_of[col]
            reduced = cost[i - 1] - u[i] - v[1:]
            open_cols = ~visited[1:]
            better = open_cols & (reduced < slack)
            slack = jnp.where(better, reduced, slack)
            came_from = jnp.where(better, col, came_from)
            masked = jnp.where(open_cols, slack, inf)
            nxt = jnp.argmin(masked)
            # Only if every open slack is infinite can argmin land on a
            # visited column; any open one then keeps the search moving.
            nxt = jnp.where(open_cols[nxt], nxt, jnp.argmax(open_cols)) + 1
            delta = masked[nxt - 1]
            # Visited columns and their rows move by delta; the others' slack
            # shrinks by it.
            u = u.at[jnp.where(visited, row_of, n + 1)].add(delta)
            v = jnp.where(visited, v - delta, v)
            slack = jnp.where(open_cols, slack - delta, slack)
            return u, v, visited, slack, came_from, nxt

        state = (
            u,
            v,
            jnp.zeros(m + 1, bool),
            jnp.full(m, inf),
            jnp.zeros(m, int),
            jnp.zeros((), int),
        )
        u, v, _, _, came_from, col = jax.lax.while_loop(
            lambda s: row_of[s[-1]] != 0, grow, state
        )

        # Flip the alternating path back to the virtual column.
        def flip(state):
            row_of, col = state
            prev = came_from[col - 1]
            return row_of.at[col].set(row_of[prev]), prev

        row_of, _ = jax.lax.while_loop(lambda s: s[1] != 0, flip, (row_of, col))
        return (u, v, row_of), None

    init = (jnp.zeros(n + 2, dtype), jnp.zeros(m + 1, dtype), jnp.zeros(m + 1, int))
    (_, _, row_of), _ = jax.lax.scan(insert_row, init, jnp.arange(n))
    # Invert column -> row; free columns (row 0) scatter out of bounds.
    target = jnp.where(row_of[1:] > 0, row_of[1:] - 1, n)
    return jnp.zeros(n, int).at[target].set(columns[:-1], mode="drop")


def hungarian_algorithm(cost_matrix):
    r"""Solves the linear assignment problem (the Hungarian algorithm).

    Given an :math:`n \times m` cost matrix :math:`C`, finds a matching of
    :math:`\min(n, m)` rows to distinct columns of least total cost:

    .. math::
      \min_{X \in \{0, 1\}^{n \times m}} \sum_{ij} C_{ij} X_{ij}
      \quad\text{s.t.}\quad \sum_j X_{ij} \le 1,\
      \sum_i X_{ij} \le 1,\ \sum_{ij} X_{ij} = \min(n, m).

    Rows are inserted one at a time; each finds a shortest augmenting path
    while keeping dual potentials :math:`u_i + v_j \le C_{ij}` feasible, in
    :math:`O(n^2 m)` time for :math:`n \le m` (a wide matrix; a tall one is
    transposed). Each step updates whole rows of arrays, so this is
    usually faster than :func:`base_hungarian_algorithm`. Pure JAX: works
    under `jit` and `vmap`. An infinite cost forbids a pair; when every
    assignment uses a forbidden pair, some assignment is returned (not a
    meaningful one).

    Args:
      cost_matrix: an :math:`n \times m` array of costs.

    Returns:
      `(i, j)`: integer arrays of length :math:`\min(n, m)`, the rows and
      their columns, in optax's order: by increasing column for a square
      matrix, by decreasing row for a wide one (:math:`n < m`), by decreasing
      column for a tall one (:math:`n > m`). The total cost is
      `cost_matrix[i, j].sum()`.

    Example:
      >>> import jax.numpy as jnp
      >>> from gradax.assignment import hungarian_algorithm
      >>> cost = jnp.array([[8, 4, 7], [5, 2, 3], [9, 6, 7], [9, 4, 8]])
      >>> i, j = hungarian_algorithm(cost)
      >>> print(i, j, cost[i, j].sum())
      [1 3 0] [2 1 0] 15

    References:
      Kuhn, `The Hungarian method for the assignment problem
      <https://doi.org/10.1002/nav.3800020109>`_, 1955; Dehghani et al.,
      `Scenic: A JAX Library for Computer Vision Research and Beyond
      <https://arxiv.org/abs/2110.11403>`_, 2022.
    """
    rows, cols = solve_rectangular(cost_matrix, _solve_wide)
    n, m = jnp.shape(cost_matrix)
    return _in_optax_order(rows, cols, n, m)
