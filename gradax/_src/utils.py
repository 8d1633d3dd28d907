"""Compatibility shim for `optax._src.utils`.

Maps `canonicalize_dtype` (what real code imports from here most: the
`mu_dtype` argument of hand-written Adam and PSGD variants),
`scale_gradient`, `multi_normal` with its `MultiNormalDiagFromLogScale`,
and `safe_norm` and `safe_int32_increment` (optax's module has them by
import). `canonicalize_dtype` is gradax's internal `canonical_dtype`: None
stays None, any other dtype becomes the one JAX stores (float64 is float32
without x64), as in optax.

Left out, as gradax has no counterpart: `canonicalize_key`,
`check_subdtype`, `check_shapes_equal`, `check_rank`,
`tile_second_to_last_dim`, `set_diags` and `x64_precision`; removed by
optax itself: `cast_tree` (`gradax.tree.cast` is the public one).
See docs/optax-private-paths.md for the measured use of each name.
"""

from gradax import multi_normal as multi_normal
from gradax import safe_int32_increment as safe_int32_increment
from gradax import safe_norm as safe_norm
from gradax import scale_gradient as scale_gradient
from gradax._core.numerics import (  # noqa: F401 - optax's name
    canonical_dtype as canonicalize_dtype,
)
from gradax._optax.distributions import (
    MultiNormalDiagFromLogScale as MultiNormalDiagFromLogScale,
)
