"""gradax: gradient processing and optimization for JAX."""

# First: on a Python or jax older than gradax supports, importing fails here
# with the version needed, not later inside an optimizer.
from . import _requirements as _requirements
from . import contrib as contrib
from . import declare as declare
from . import microbatching as microbatching
from . import tree as tree
from . import tree_utils as tree_utils
from ._core.declarations import HyperparameterError as HyperparameterError
from ._core.hyper import FunctionSchedule as FunctionSchedule
from ._core.hyper import Schedule as Schedule
from ._core.hyper import StatefulSchedule as StatefulSchedule
from ._core.numerics import safe_increment as safe_increment
from ._core.numerics import safe_int32_increment as safe_int32_increment
from ._core.numerics import safe_norm as safe_norm
from ._core.numerics import safe_root_mean_squares as safe_root_mean_squares
from ._core.protocol import Alias as Alias
from ._core.protocol import EmptyState as EmptyState
from ._core.protocol import FunctionTransformation as FunctionTransformation
from ._core.protocol import GradientTransformation as GradientTransformation
from ._core.protocol import (
    GradientTransformationExtraArgs as GradientTransformationExtraArgs,
)
from ._core.protocol import NamedTupleTransformation as NamedTupleTransformation
from ._core.protocol import OptState as OptState
from ._core.protocol import Params as Params
from ._core.protocol import ScheduleState as ScheduleState
from ._core.protocol import Updates as Updates
from ._core.protocol import WeightDecaySchedule as WeightDecaySchedule
from ._core.protocol import with_extra_args_support as with_extra_args_support
from ._core.pytree import Module as Module
from ._core.pytree import static_field as static_field
from ._core.simple import identity as identity
from ._core.simple import set_to_zero as set_to_zero
from ._core.simple import stateless as stateless
from ._core.simple import stateless_with_tree_map as stateless_with_tree_map
from ._core.state_guard import UpdateError as UpdateError
from ._core.updates import apply_updates as apply_updates
from ._core.updates import incremental_update as incremental_update
from ._core.updates import periodic_update as periodic_update
from ._optax.distributions import multi_normal as multi_normal
from ._optax.types import AddDecayedWeightsState as AddDecayedWeightsState
from ._optax.types import MaskOrFn as MaskOrFn
from ._optax.types import MultiTransformState as MultiTransformState
from ._optax.types import ScalarOrSchedule as ScalarOrSchedule
from ._optax.types import ScaleByScheduleState as ScaleByScheduleState
from ._optax.types import ScaleState as ScaleState
from ._optax.types import TransformInitFn as TransformInitFn
from ._optax.types import TransformUpdateExtraArgsFn as TransformUpdateExtraArgsFn
from ._optax.types import TransformUpdateFn as TransformUpdateFn
from ._optax.types import init_empty_state as init_empty_state
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
from .combinators.offload import OffloadedState as OffloadedState
from .combinators.offload import offload_state as offload_state
from .combinators.spikes import SkipLossSpikesState as SkipLossSpikesState
from .combinators.spikes import skip_loss_spikes as skip_loss_spikes
from .combinators.structure import ApplyEvery as ApplyEvery
from .combinators.structure import apply_every as apply_every
from .combinators.structure import flatten as flatten
from .combinators.structure import freeze as freeze
from .combinators.structure import selective_transform as selective_transform
from .contrib import COCOBState as COCOBState
from .contrib import DAdaptAdamWState as DAdaptAdamWState
from .contrib import (
    DifferentiallyPrivateAggregateState as DifferentiallyPrivateAggregateState,
)
from .contrib import DogInitStep as DogInitStep
from .contrib import DoGState as DoGState
from .contrib import DoWGState as DoWGState
from .contrib import GaLoreDimensionNumbers as GaLoreDimensionNumbers
from .contrib import GaLoreState as GaLoreState
from .contrib import HutchinsonState as HutchinsonState
from .contrib import MadgradState as MadgradState
from .contrib import MechanicState as MechanicState
from .contrib import MomoAdamState as MomoAdamState
from .contrib import MomoState as MomoState
from .contrib import NormalizeState as NormalizeState
from .contrib import ProdigyState as ProdigyState
from .contrib import ReduceLROnPlateauState as ReduceLROnPlateauState
from .contrib import SAMState as SAMState
from .contrib import ScaleByAdemamixState as ScaleByAdemamixState
from .contrib import ScaleBySimplifiedAdEMAMixState as ScaleBySimplifiedAdEMAMixState
from .contrib import ScheduleFreeState as ScheduleFreeState
from .contrib import SophiaState as SophiaState
from .contrib import SplitRealAndImaginaryState as SplitRealAndImaginaryState
from .contrib import acprop as acprop
from .contrib import ademamix as ademamix
from .contrib import adopt as adopt
from .contrib import cocob as cocob
from .contrib import dadapt_adamw as dadapt_adamw
from .contrib import (
    differentially_private_aggregate as differentially_private_aggregate,
)
from .contrib import dog as dog
from .contrib import dowg as dowg
from .contrib import dpsgd as dpsgd
from .contrib import galore as galore
from .contrib import (
    hutchinson_estimator_diag_hessian as hutchinson_estimator_diag_hessian,
)
from .contrib import madgrad as madgrad
from .contrib import mechanize as mechanize
from .contrib import momo as momo
from .contrib import momo_adam as momo_adam
from .contrib import normalize as normalize
from .contrib import prodigy as prodigy
from .contrib import reduce_on_plateau as reduce_on_plateau
from .contrib import sam as sam
from .contrib import scale_by_acprop as scale_by_acprop
from .contrib import scale_by_ademamix as scale_by_ademamix
from .contrib import scale_by_adopt as scale_by_adopt
from .contrib import scale_by_cocob as scale_by_cocob
from .contrib import scale_by_dog as scale_by_dog
from .contrib import scale_by_dowg as scale_by_dowg
from .contrib import scale_by_galore as scale_by_galore
from .contrib import scale_by_madgrad as scale_by_madgrad
from .contrib import scale_by_prodigy as scale_by_prodigy
from .contrib import scale_by_simplified_ademamix as scale_by_simplified_ademamix
from .contrib import scale_by_sophia as scale_by_sophia
from .contrib import schedule_free as schedule_free
from .contrib import schedule_free_adamw as schedule_free_adamw
from .contrib import schedule_free_eval_params as schedule_free_eval_params
from .contrib import schedule_free_sgd as schedule_free_sgd
from .contrib import simplified_ademamix as simplified_ademamix
from .contrib import sophia as sophia
from .contrib import split_real_and_imaginary as split_real_and_imaginary
from .diagnostics import MetricsState as MetricsState
from .diagnostics import group_labels as group_labels
from .diagnostics import metrics as metrics
from .diagnostics import with_metrics as with_metrics
from .linalg import matrix_inverse_pth_root as matrix_inverse_pth_root
from .linalg import nnls as nnls
from .linalg import power_iteration as power_iteration
from .linesearch import BacktrackingLinesearchInfo as BacktrackingLinesearchInfo
from .linesearch import MinimizeResult as MinimizeResult
from .linesearch import MinimizeStatus as MinimizeStatus
from .linesearch import (
    ScaleByBacktrackingLinesearchState as ScaleByBacktrackingLinesearchState,
)
from .linesearch import ScaleByLBFGSState as ScaleByLBFGSState
from .linesearch import ScaleByZoomLinesearchState as ScaleByZoomLinesearchState
from .linesearch import ZoomLinesearchInfo as ZoomLinesearchInfo
from .linesearch import lbfgs as lbfgs
from .linesearch import minimize as minimize
from .linesearch import (
    scale_by_backtracking_linesearch as scale_by_backtracking_linesearch,
)
from .linesearch import scale_by_lbfgs as scale_by_lbfgs
from .linesearch import scale_by_zoom_linesearch as scale_by_zoom_linesearch
from .linesearch import value_and_grad_from_state as value_and_grad_from_state
from .microbatching import microbatch as microbatch
from .optimizers.adabelief import ScaleByBeliefState as ScaleByBeliefState
from .optimizers.adabelief import adabelief as adabelief
from .optimizers.adabelief import scale_by_belief as scale_by_belief
from .optimizers.adadelta import ScaleByAdaDeltaState as ScaleByAdaDeltaState
from .optimizers.adadelta import adadelta as adadelta
from .optimizers.adadelta import scale_by_adadelta as scale_by_adadelta
from .optimizers.adafactor import FactoredState as FactoredState
from .optimizers.adafactor import adafactor as adafactor
from .optimizers.adafactor import scale_by_factored_rms as scale_by_factored_rms
from .optimizers.adagrad import adagrad as adagrad
from .optimizers.adam import ScaleByAdamState as ScaleByAdamState
from .optimizers.adam import adam as adam
from .optimizers.adam import adamw as adamw
from .optimizers.adam import nadam as nadam
from .optimizers.adam import nadamw as nadamw
from .optimizers.adam import scale_by_adam as scale_by_adam
from .optimizers.adam_mini import ScaleByAdamMiniState as ScaleByAdamMiniState
from .optimizers.adam_mini import adam_mini as adam_mini
from .optimizers.adam_mini import scale_by_adam_mini as scale_by_adam_mini
from .optimizers.adamax import adamax as adamax
from .optimizers.adamax import adamaxw as adamaxw
from .optimizers.adamax import scale_by_adamax as scale_by_adamax
from .optimizers.adan import ScaleByAdanState as ScaleByAdanState
from .optimizers.adan import adan as adan
from .optimizers.adan import scale_by_adan as scale_by_adan
from .optimizers.amsgrad import ScaleByAmsgradState as ScaleByAmsgradState
from .optimizers.amsgrad import amsgrad as amsgrad
from .optimizers.amsgrad import scale_by_amsgrad as scale_by_amsgrad
from .optimizers.distance_over_gradients import (
    ScaleByDistanceOverGradientsState as ScaleByDistanceOverGradientsState,
)
from .optimizers.distance_over_gradients import (
    scale_by_distance_over_gradients as scale_by_distance_over_gradients,
)
from .optimizers.fromage import fromage as fromage
from .optimizers.kron import KronIntervalState as KronIntervalState
from .optimizers.kron import KronState as KronState
from .optimizers.kron import kron as kron
from .optimizers.kron import scale_by_kron as scale_by_kron
from .optimizers.lamb import lamb as lamb
from .optimizers.lamb import lars as lars
from .optimizers.lion import ScaleByLionState as ScaleByLionState
from .optimizers.lion import lion as lion
from .optimizers.lion import scale_by_lion as scale_by_lion
from .optimizers.mars import MarsState as MarsState
from .optimizers.mars import mars as mars
from .optimizers.mars import scale_by_mars as scale_by_mars
from .optimizers.noisy_sgd import noisy_sgd as noisy_sgd
from .optimizers.novograd import ScaleByNovogradState as ScaleByNovogradState
from .optimizers.novograd import novograd as novograd
from .optimizers.novograd import scale_by_novograd as scale_by_novograd
from .optimizers.optimistic import (
    ScaleByOptimisticGradientState as ScaleByOptimisticGradientState,
)
from .optimizers.optimistic import optimistic_adam_v2 as optimistic_adam_v2
from .optimizers.optimistic import (
    optimistic_gradient_descent as optimistic_gradient_descent,
)
from .optimizers.optimistic import (
    scale_by_optimistic_gradient as scale_by_optimistic_gradient,
)
from .optimizers.optimistic_adam import optimistic_adam as optimistic_adam
from .optimizers.polyak import polyak_sgd as polyak_sgd
from .optimizers.polyak import scale_by_polyak as scale_by_polyak
from .optimizers.radam import radam as radam
from .optimizers.radam import scale_by_radam as scale_by_radam
from .optimizers.rmsprop import rmsprop as rmsprop
from .optimizers.rprop import ScaleByRpropState as ScaleByRpropState
from .optimizers.rprop import rprop as rprop
from .optimizers.rprop import scale_by_rprop as scale_by_rprop
from .optimizers.sgd import sgd as sgd
from .optimizers.shampoo import ShampooState as ShampooState
from .optimizers.shampoo import scale_by_shampoo as scale_by_shampoo
from .optimizers.shampoo import shampoo as shampoo
from .optimizers.sign import sign_sgd as sign_sgd
from .optimizers.sign import signum as signum
from .optimizers.sm3 import ScaleBySM3State as ScaleBySM3State
from .optimizers.sm3 import scale_by_sm3 as scale_by_sm3
from .optimizers.sm3 import sm3 as sm3
from .optimizers.soap import SoapState as SoapState
from .optimizers.soap import scale_by_soap as scale_by_soap
from .optimizers.soap import soap as soap
from .optimizers.yogi import scale_by_yogi as scale_by_yogi
from .optimizers.yogi import yogi as yogi
from .orthogonal.adamuon import AdaMuonState as AdaMuonState
from .orthogonal.adamuon import adamuon as adamuon
from .orthogonal.adamuon import scale_by_adamuon as scale_by_adamuon
from .orthogonal.blocks import MuonSplit as MuonSplit
from .orthogonal.coefficients import (
    polar_express_coefficients as polar_express_coefficients,
)
from .orthogonal.dimensions import MuonDimensionNumbers as MuonDimensionNumbers
from .orthogonal.dion import DionState as DionState
from .orthogonal.dion import dion as dion
from .orthogonal.dion import scale_by_dion as scale_by_dion
from .orthogonal.dion2 import Dion2State as Dion2State
from .orthogonal.dion2 import dion2 as dion2
from .orthogonal.dion2 import scale_by_dion2 as scale_by_dion2
from .orthogonal.groups import scale_by_shape as scale_by_shape
from .orthogonal.hyperball import adamh as adamh
from .orthogonal.hyperball import muonh as muonh
from .orthogonal.muon import MuonState as MuonState
from .orthogonal.muon import muon as muon
from .orthogonal.muon import scale_by_muon as scale_by_muon
from .orthogonal.newton_schulz import orthogonalize as orthogonalize
from .orthogonal.normuon import NorMuonState as NorMuonState
from .orthogonal.normuon import normuon as normuon
from .orthogonal.normuon import scale_by_normuon as scale_by_normuon
from .orthogonal.qk_clip import qk_clip as qk_clip
from .orthogonal.routing import muon_labels as muon_labels
from .orthogonal.routing_checks import MuonRoutingWarning as MuonRoutingWarning
from .orthogonal.scion import ScionState as ScionState
from .orthogonal.scion import scale_by_scion as scale_by_scion
from .orthogonal.scion import scion as scion
from .orthogonal.scion import scion_lmos as scion_lmos
from .orthogonal.via_newton_schulz import (
    orthogonalize_via_newton_schulz as orthogonalize_via_newton_schulz,
)
from .precision.int8 import QuantizedArray as QuantizedArray
from .precision.int8 import dynamic_code_map as dynamic_code_map
from .precision.int8 import int8_blockwise as int8_blockwise
from .precision.master import MasterWeightsState as MasterWeightsState
from .precision.master import master_weights as master_weights
from .precision.rounding import StochasticRoundingState as StochasticRoundingState
from .precision.rounding import stochastic_rounding as stochastic_rounding
from .precision.update_dtype import cast_updates as cast_updates
from .schedules import InjectHyperparamsState as InjectHyperparamsState
from .schedules import (
    InjectStatefulHyperparamsState as InjectStatefulHyperparamsState,
)
from .schedules import constant_schedule as constant_schedule
from .schedules import cosine_decay_schedule as cosine_decay_schedule
from .schedules import cosine_onecycle_schedule as cosine_onecycle_schedule
from .schedules import exponential_decay as exponential_decay
from .schedules import inject_hyperparams as inject_hyperparams
from .schedules import (
    inject_stateful_hyperparams as inject_stateful_hyperparams,
)
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
from .schedules import (
    warmup_stable_decay_schedule as warmup_stable_decay_schedule,
)
from .schedules.psgd import (
    precond_update_prob_schedule as precond_update_prob_schedule,
)
from .schedules.wrapped import WrappedSchedule as WrappedSchedule
from .sharding.zero import shard_state as shard_state
from .transforms.cautious import (
    add_cautious_decayed_weights as add_cautious_decayed_weights,
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
from .transforms.direction import normalize_by_update_norm as normalize_by_update_norm
from .transforms.direction import scale_by_sign as scale_by_sign
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
from .transforms.monitoring import MonitorState as MonitorState
from .transforms.monitoring import SnapshotState as SnapshotState
from .transforms.monitoring import measure_with_ema as measure_with_ema
from .transforms.monitoring import monitor as monitor
from .transforms.monitoring import snapshot as snapshot
from .transforms.rms import ScaleByRmsState as ScaleByRmsState
from .transforms.rms import ScaleByRmsWithCountState as ScaleByRmsWithCountState
from .transforms.rms import ScaleByRssState as ScaleByRssState
from .transforms.rms import ScaleByRStdDevState as ScaleByRStdDevState
from .transforms.rms import (
    ScaleByRStdDevWithCountState as ScaleByRStdDevWithCountState,
)
from .transforms.rms import scale_by_rms as scale_by_rms
from .transforms.rms import scale_by_rss as scale_by_rss
from .transforms.rms import scale_by_stddev as scale_by_stddev
from .transforms.scale_gradient import scale_gradient as scale_gradient
from .transforms.scaling import scale as scale
from .transforms.scaling import scale_by_learning_rate as scale_by_learning_rate
from .transforms.scaling import scale_by_schedule as scale_by_schedule
from .transforms.trust_ratio import ScaleByTrustRatioState as ScaleByTrustRatioState
from .transforms.trust_ratio import (
    scale_by_param_block_norm as scale_by_param_block_norm,
)
from .transforms.trust_ratio import (
    scale_by_param_block_rms as scale_by_param_block_rms,
)
from .transforms.trust_ratio import scale_by_trust_ratio as scale_by_trust_ratio
from .transforms.weight_decay import add_decayed_weights as add_decayed_weights
from .tree import bias_correction as bias_correction
from .tree import map_params as tree_map_params  # noqa: F401 - optax name
from .tree import update_infinity_moment as update_infinity_moment
from .tree import update_moment as update_moment
from .tree import update_moment_per_elem_norm as update_moment_per_elem_norm
from .width.coord_check import CoordCheck as CoordCheck
from .width.coord_check import coord_check as coord_check
from .width.parametrization import width_multipliers as width_multipliers
from .width.parametrization import width_transfer as width_transfer

__version__ = "0.1.0.dev0"

# Projections, perturbations, assignment, second order, experimental.
from . import assignment as assignment  # noqa: E402
from . import experimental as experimental  # noqa: E402

# Losses (optax.losses).
from . import losses as losses  # noqa: E402
from . import perturbations as perturbations  # noqa: E402
from . import projections as projections  # noqa: E402
from . import second_order as second_order  # noqa: E402
from .losses import convex_kl_divergence as convex_kl_divergence  # noqa: E402
from .losses import cosine_distance as cosine_distance  # noqa: E402
from .losses import cosine_similarity as cosine_similarity  # noqa: E402
from .losses import ctc_loss as ctc_loss  # noqa: E402
from .losses import (  # noqa: E402
    ctc_loss_with_forward_probs as ctc_loss_with_forward_probs,
)
from .losses import generalized_kl_divergence as generalized_kl_divergence  # noqa: E402
from .losses import hinge_loss as hinge_loss  # noqa: E402
from .losses import huber_loss as huber_loss  # noqa: E402
from .losses import kl_divergence as kl_divergence  # noqa: E402
from .losses import l2_loss as l2_loss  # noqa: E402
from .losses import log_cosh as log_cosh  # noqa: E402
from .losses import ntxent as ntxent  # noqa: E402
from .losses import (  # noqa: E402
    safe_softmax_cross_entropy as safe_softmax_cross_entropy,
)
from .losses import (  # noqa: E402
    sigmoid_binary_cross_entropy as sigmoid_binary_cross_entropy,
)
from .losses import sigmoid_focal_loss as sigmoid_focal_loss  # noqa: E402
from .losses import smooth_labels as smooth_labels  # noqa: E402
from .losses import softmax_cross_entropy as softmax_cross_entropy  # noqa: E402
from .losses import (  # noqa: E402
    softmax_cross_entropy_with_integer_labels as softmax_cross_entropy_with_integer_labels,  # noqa: E501
)
from .losses import squared_error as squared_error  # noqa: E402


def __getattr__(name: str) -> object:
    # optax code writes ``optax._src.base.X`` after a bare ``import optax``;
    # the compatibility layer loads on that first use, not at import time.
    if name == "_src":
        import importlib

        return importlib.import_module("gradax._src")
    if name == "monte_carlo":
        # optax 0.2.8 raises the same way: the module is gone there too.
        raise AttributeError(
            "optax.monte_carlo is deprecated (optax v0.2.7 or newer), and "
            "gradax has no monte_carlo: use jax.random and jax.grad"
        )
    raise AttributeError(f"module 'gradax' has no attribute {name!r}")


# optax's private module paths (``optax.contrib._muon``, ...): a finder that
# builds each compatibility module on first import (gradax/_optax/paths.py).
from ._optax.paths import install as _install_optax_paths  # noqa: E402

_install_optax_paths()
