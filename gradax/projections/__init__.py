"""Euclidean projections onto convex sets, for pytrees: `optax.projections`.

Each function returns the point of a set nearest (in the l2 norm over all
leaves together) to its input, with the structure of the input. They serve
projected gradient descent: `params = projection(apply_updates(params, u))`.
"""

from ._affine import projection_halfspace as projection_halfspace
from ._affine import projection_hyperplane as projection_hyperplane
from ._affine import projection_vector as projection_vector
from ._box import projection_box as projection_box
from ._box import projection_hypercube as projection_hypercube
from ._box import projection_linf_ball as projection_linf_ball
from ._box import projection_non_negative as projection_non_negative
from ._l2 import projection_l2_ball as projection_l2_ball
from ._l2 import projection_l2_sphere as projection_l2_sphere
from ._simplex import projection_l1_ball as projection_l1_ball
from ._simplex import projection_l1_sphere as projection_l1_sphere
from ._simplex import projection_simplex as projection_simplex
