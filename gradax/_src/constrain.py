"""Compatibility shim for `optax._src.constrain`: constraints on parameters.

Maps `keep_params_nonnegative`, `NonNegativeParamsState`, `zero_nans`
and `ZeroNansState`, all of the optax module.

Each name is gradax's own object, defined nowhere here:
`constrain.zero_nans is gradax.zero_nans`.
See docs/optax-private-paths.md for the measured use of each name.
"""

from gradax import NonNegativeParamsState as NonNegativeParamsState
from gradax import ZeroNansState as ZeroNansState
from gradax import keep_params_nonnegative as keep_params_nonnegative
from gradax import zero_nans as zero_nans
