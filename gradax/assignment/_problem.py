"""What the two Hungarian solvers share: shapes, dtypes and the output form."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp


def solve_rectangular(
    cost_matrix: jax.Array, solve_wide: Callable[[jax.Array], jax.Array]
) -> tuple[jax.Array, jax.Array]:
    """Runs a solver for `n <= m` matrices on any matrix; pairs sorted by row.

    Args:
      cost_matrix: an `n x m` matrix of finite costs.
      solve_wide: maps an `n x m` matrix with `n <= m`, in a floating
        dtype, to the column assigned to each row (an int array of length n).

    Returns:
      `(rows, cols)`, each of length `min(n, m)`, rows increasing.
    """
    cost_matrix = jnp.asarray(cost_matrix)
    n, m = cost_matrix.shape
    if n == 0 or m == 0:
        return jnp.zeros(0, int), jnp.zeros(0, int)
    # Dual potentials are differences of costs: at least float32 keeps
    # them exact enough for integer and half-precision costs.
    dtype = jnp.promote_types(cost_matrix.dtype, jnp.float32)
    cost_matrix = cost_matrix.astype(dtype)
    if n <= m:
        return jnp.arange(n), solve_wide(cost_matrix)
    # More rows than columns: assign rows to the columns, then sort by row.
    row_of_col = solve_wide(cost_matrix.T)
    order = jnp.argsort(row_of_col)
    return row_of_col[order], order
