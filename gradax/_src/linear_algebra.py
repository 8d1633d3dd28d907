"""Compatibility shim for `optax._src.linear_algebra`.

Maps `global_norm` (by far the most used: gradient-norm logging),
`power_iteration`, `matrix_inverse_pth_root` and `nnls`. Left out:
`get_spectral_radius_upper_bound`, which gradax does not have.

Each name is gradax's own object, defined nowhere here:
`linear_algebra.global_norm is gradax.global_norm`.
See docs/optax-private-paths.md for the measured use of each name.
"""

from gradax import global_norm as global_norm
from gradax import matrix_inverse_pth_root as matrix_inverse_pth_root
from gradax import nnls as nnls
from gradax import power_iteration as power_iteration
