"""Compatibility shim for `optax._src.factorized`: Adafactor's factored moments.

Maps `scale_by_factored_rms` and `FactoredState`. optax's private helpers
(`_factored_dims`, `_decay_rate_pow`) have no counterpart.

Each name is gradax's own object, defined nowhere here:
`factorized.FactoredState is gradax.FactoredState`.
See docs/optax-private-paths.md for the measured use of each name.
"""

from gradax import FactoredState as FactoredState
from gradax import scale_by_factored_rms as scale_by_factored_rms
