"""The linear assignment problem: `optax.assignment`.

Two pure-JAX solvers of the same problem (match rows to columns at least total
cost): :func:`hungarian_algorithm`, usually the faster, and
:func:`base_hungarian_algorithm`, shortest augmenting paths as in SciPy.
"""

from ._potentials import hungarian_algorithm as hungarian_algorithm
from ._shortest_path import base_hungarian_algorithm as base_hungarian_algorithm
