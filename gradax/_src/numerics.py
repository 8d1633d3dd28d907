"""Compatibility shim for `optax._src.numerics`: numerically safe helpers.

Maps `safe_norm`, `safe_root_mean_squares`, `safe_increment`,
`safe_int32_increment` and `abs_sq`, all of the optax module. Counters in
hand-written optimizers (`numerics.safe_int32_increment(state.count)`) and
`abs_sq` in Adafactor variants are what real code uses.

Each name is gradax's own object, defined nowhere here:
`numerics.safe_norm is gradax.safe_norm`. `abs_sq` is gradax's internal
one (`|x|**2` in the real dtype of `x`), which gradax does not export.
See docs/optax-private-paths.md for the measured use of each name.
"""

from gradax import safe_increment as safe_increment
from gradax import safe_int32_increment as safe_int32_increment
from gradax import safe_norm as safe_norm
from gradax import safe_root_mean_squares as safe_root_mean_squares
from gradax._core.numerics import abs_sq as abs_sq
