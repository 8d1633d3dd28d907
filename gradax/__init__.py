"""gradax: gradient processing and optimization for JAX."""

from . import tree as tree
from ._core import Alias as Alias
from ._core import EmptyState as EmptyState
from ._core import GradientTransformation as GradientTransformation
from ._core import GradientTransformationExtraArgs as GradientTransformationExtraArgs
from ._core import OptState as OptState
from ._core import Params as Params
from ._core import ScheduleState as ScheduleState
from ._core import Updates as Updates
from ._core import apply_updates as apply_updates
from ._core import identity as identity
from ._core import incremental_update as incremental_update
from ._core import periodic_update as periodic_update
from ._core import set_to_zero as set_to_zero
from ._core import stateless as stateless
from ._core import stateless_with_tree_map as stateless_with_tree_map
from ._core import with_extra_args_support as with_extra_args_support
from ._hyper import FunctionSchedule as FunctionSchedule
from ._hyper import Schedule as Schedule
from ._hyper import StatefulSchedule as StatefulSchedule
from ._pytree import Module as Module
from ._pytree import static_field as static_field
from .combinators.chain import chain as chain
from .combinators.chain import named_chain as named_chain
from .combinators.conditional import ApplyIfFiniteState as ApplyIfFiniteState
from .combinators.conditional import ConditionallyMaskState as ConditionallyMaskState
from .combinators.conditional import (
    ConditionallyTransformState as ConditionallyTransformState,
)
from .combinators.conditional import ConditionFn as ConditionFn
from .combinators.conditional import apply_if_finite as apply_if_finite
from .combinators.conditional import conditionally_mask as conditionally_mask
from .combinators.conditional import conditionally_transform as conditionally_transform
from .combinators.inject import InjectHyperparamsState as InjectHyperparamsState
from .combinators.inject import (
    InjectStatefulHyperparamsState as InjectStatefulHyperparamsState,
)
from .combinators.inject import inject_hyperparams as inject_hyperparams
from .combinators.inject import (
    inject_stateful_hyperparams as inject_stateful_hyperparams,
)
from .combinators.lookahead import LookaheadParams as LookaheadParams
from .combinators.lookahead import LookaheadState as LookaheadState
from .combinators.lookahead import lookahead as lookahead
from .combinators.masked import MaskedNode as MaskedNode
from .combinators.masked import MaskedState as MaskedState
from .combinators.masked import PartitionState as PartitionState
from .combinators.masked import masked as masked
from .combinators.masked import multi_transform as multi_transform
from .combinators.masked import partition as partition
from .combinators.multi_steps import MultiSteps as MultiSteps
from .combinators.multi_steps import MultiStepsState as MultiStepsState
from .combinators.multi_steps import (
    ShouldSkipUpdateFunction as ShouldSkipUpdateFunction,
)
from .combinators.multi_steps import skip_large_updates as skip_large_updates
from .combinators.multi_steps import skip_not_finite as skip_not_finite
from .combinators.structure import ApplyEvery as ApplyEvery
from .combinators.structure import apply_every as apply_every
from .combinators.structure import flatten as flatten
from .combinators.structure import freeze as freeze
from .combinators.structure import selective_transform as selective_transform
from .optimizers.adam import ScaleByAdamState as ScaleByAdamState
from .optimizers.adam import adam as adam
from .optimizers.adam import adamw as adamw
from .optimizers.adam import scale_by_adam as scale_by_adam
from .optimizers.sgd import sgd as sgd
from .schedules import constant_schedule as constant_schedule
from .schedules import cosine_decay_schedule as cosine_decay_schedule
from .schedules import cosine_onecycle_schedule as cosine_onecycle_schedule
from .schedules import exponential_decay as exponential_decay
from .schedules import join_schedules as join_schedules
from .schedules import linear_onecycle_schedule as linear_onecycle_schedule
from .schedules import linear_schedule as linear_schedule
from .schedules import piecewise_constant_schedule as piecewise_constant_schedule
from .schedules import (
    piecewise_interpolate_schedule as piecewise_interpolate_schedule,
)
from .schedules import polynomial_schedule as polynomial_schedule
from .schedules import sgdr_schedule as sgdr_schedule
from .schedules import warmup_constant_schedule as warmup_constant_schedule
from .schedules import (
    warmup_cosine_decay_schedule as warmup_cosine_decay_schedule,
)
from .schedules import (
    warmup_exponential_decay_schedule as warmup_exponential_decay_schedule,
)
from .transforms.clipping import AdaptiveGradClipState as AdaptiveGradClipState
from .transforms.clipping import ClipByGlobalNormState as ClipByGlobalNormState
from .transforms.clipping import ClipState as ClipState
from .transforms.clipping import adaptive_grad_clip as adaptive_grad_clip
from .transforms.clipping import clip as clip
from .transforms.clipping import clip_by_block_rms as clip_by_block_rms
from .transforms.clipping import clip_by_global_norm as clip_by_global_norm
from .transforms.clipping import global_norm as global_norm
from .transforms.clipping import (
    per_example_global_norm_clip as per_example_global_norm_clip,
)
from .transforms.clipping import (
    per_example_layer_norm_clip as per_example_layer_norm_clip,
)
from .transforms.clipping import unitwise_clip as unitwise_clip
from .transforms.clipping import unitwise_norm as unitwise_norm
from .transforms.elementwise import AddNoiseState as AddNoiseState
from .transforms.elementwise import NonNegativeParamsState as NonNegativeParamsState
from .transforms.elementwise import ZeroNansState as ZeroNansState
from .transforms.elementwise import add_noise as add_noise
from .transforms.elementwise import centralize as centralize
from .transforms.elementwise import keep_params_nonnegative as keep_params_nonnegative
from .transforms.elementwise import zero_nans as zero_nans
from .transforms.momentum import EmaState as EmaState
from .transforms.momentum import TraceState as TraceState
from .transforms.momentum import ema as ema
from .transforms.momentum import trace as trace
from .transforms.scaling import scale as scale
from .transforms.scaling import scale_by_learning_rate as scale_by_learning_rate
from .transforms.scaling import scale_by_schedule as scale_by_schedule
from .transforms.weight_decay import add_decayed_weights as add_decayed_weights

__version__ = "0.1.0.dev0"
