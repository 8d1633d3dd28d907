"""Compatibility shim for `optax._src.wrappers`, optax's old home of wrappers.

Maps the names the optax module still re-exports: `apply_if_finite`,
`conditionally_mask`, `conditionally_transform`, `flatten`, `masked`,
`MultiSteps`, `skip_not_finite`, `skip_large_updates`, their states,
`MaskedNode`, `ConditionFn` and `ShouldSkipUpdateFunction`.

Each name is gradax's own object, defined nowhere here:
`wrappers.MultiStepsState is gradax.MultiStepsState`.
See docs/optax-private-paths.md for the measured use of each name.
"""

from gradax import ApplyIfFiniteState as ApplyIfFiniteState
from gradax import ConditionallyMaskState as ConditionallyMaskState
from gradax import ConditionallyTransformState as ConditionallyTransformState
from gradax import ConditionFn as ConditionFn
from gradax import MaskedNode as MaskedNode
from gradax import MaskedState as MaskedState
from gradax import MultiSteps as MultiSteps
from gradax import MultiStepsState as MultiStepsState
from gradax import ShouldSkipUpdateFunction as ShouldSkipUpdateFunction
from gradax import apply_if_finite as apply_if_finite
from gradax import conditionally_mask as conditionally_mask
from gradax import conditionally_transform as conditionally_transform
from gradax import flatten as flatten
from gradax import masked as masked
from gradax import skip_large_updates as skip_large_updates
from gradax import skip_not_finite as skip_not_finite
