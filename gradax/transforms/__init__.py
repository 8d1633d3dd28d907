"""Building blocks: small transformations that optimizers are made of.

The package also offers `optax.transforms`' names, so `optax.transforms.masked`
code keeps working after `import gradax as optax`; the combinators among them
(`chain`, `masked`, `MultiSteps`, ...) are defined in `gradax.combinators`
and imported here.
"""

from .._optax.paths import package_getattr
from ..combinators.chain import chain as chain
from ..combinators.chain import named_chain as named_chain
from ..combinators.conditional import ApplyIfFiniteState as ApplyIfFiniteState
from ..combinators.conditional import ConditionallyMaskState as ConditionallyMaskState
from ..combinators.conditional import (
    ConditionallyTransformState as ConditionallyTransformState,
)
from ..combinators.conditional import ConditionFn as ConditionFn
from ..combinators.conditional import apply_if_finite as apply_if_finite
from ..combinators.conditional import conditionally_mask as conditionally_mask
from ..combinators.conditional import conditionally_transform as conditionally_transform
from ..combinators.masked import MaskedNode as MaskedNode
from ..combinators.masked import MaskedState as MaskedState
from ..combinators.masked import PartitionState as PartitionState
from ..combinators.masked import masked as masked
from ..combinators.masked import partition as partition
from ..combinators.multi_steps import MultiSteps as MultiSteps
from ..combinators.multi_steps import MultiStepsState as MultiStepsState
from ..combinators.multi_steps import (
    ShouldSkipUpdateFunction as ShouldSkipUpdateFunction,
)
from ..combinators.multi_steps import skip_large_updates as skip_large_updates
from ..combinators.multi_steps import skip_not_finite as skip_not_finite
from ..combinators.structure import flatten as flatten
from ..combinators.structure import freeze as freeze
from ..combinators.structure import selective_transform as selective_transform
from .clipping import adaptive_grad_clip as adaptive_grad_clip
from .clipping import clip as clip
from .clipping import clip_by_block_rms as clip_by_block_rms
from .clipping import clip_by_global_norm as clip_by_global_norm
from .clipping import per_example_global_norm_clip as per_example_global_norm_clip
from .clipping import per_example_layer_norm_clip as per_example_layer_norm_clip
from .clipping import unitwise_clip as unitwise_clip
from .clipping import unitwise_norm as unitwise_norm
from .elementwise import AddNoiseState as AddNoiseState
from .elementwise import NonNegativeParamsState as NonNegativeParamsState
from .elementwise import ZeroNansState as ZeroNansState
from .elementwise import add_noise as add_noise
from .elementwise import keep_params_nonnegative as keep_params_nonnegative
from .elementwise import zero_nans as zero_nans
from .momentum import EmaState as EmaState
from .momentum import TraceState as TraceState
from .momentum import ema as ema
from .momentum import trace as trace
from .monitoring import MonitorState as MonitorState
from .monitoring import SnapshotState as SnapshotState
from .monitoring import measure_with_ema as measure_with_ema
from .monitoring import monitor as monitor
from .monitoring import snapshot as snapshot
from .weight_decay import add_decayed_weights as add_decayed_weights

# optax's private module paths (``optax.transforms._masking``) load on first access.
__getattr__ = package_getattr(__name__)
