"""Compatibility shim for `optax._src.transform`: the building blocks.

Maps every `scale_by_*` transformation of the optax module and its state
(`ScaleByAdamState` is the name real code uses most, to read or build Adam's
state), `scale`, `trace`, `ema`, `add_noise`, `add_decayed_weights`,
`apply_every`, `centralize`, `normalize_by_update_norm`, their states,
and `abs_sq` (optax's module has it by import). Removed by optax itself and
absent here too: `cast_tree`, `update_moment` and `bias_correction`
(`gradax.tree.cast`, `gradax.tree.update_moment` and
`gradax.tree.bias_correction` are the public ones).

Each name is gradax's own object, defined nowhere here:
`transform.ScaleByAdamState is gradax.ScaleByAdamState`.
See docs/optax-private-paths.md for the measured use of each name.
"""

from gradax import AddDecayedWeightsState as AddDecayedWeightsState
from gradax import AddNoiseState as AddNoiseState
from gradax import ApplyEvery as ApplyEvery
from gradax import EmaState as EmaState
from gradax import ScaleByAdaDeltaState as ScaleByAdaDeltaState
from gradax import ScaleByAdamState as ScaleByAdamState
from gradax import ScaleByAdanState as ScaleByAdanState
from gradax import ScaleByAmsgradState as ScaleByAmsgradState
from gradax import ScaleByBeliefState as ScaleByBeliefState
from gradax import (
    ScaleByDistanceOverGradientsState as ScaleByDistanceOverGradientsState,
)
from gradax import ScaleByLBFGSState as ScaleByLBFGSState
from gradax import ScaleByLionState as ScaleByLionState
from gradax import ScaleByNovogradState as ScaleByNovogradState
from gradax import ScaleByOptimisticGradientState as ScaleByOptimisticGradientState
from gradax import ScaleByRmsState as ScaleByRmsState
from gradax import ScaleByRmsWithCountState as ScaleByRmsWithCountState
from gradax import ScaleByRpropState as ScaleByRpropState
from gradax import ScaleByRssState as ScaleByRssState
from gradax import ScaleByRStdDevState as ScaleByRStdDevState
from gradax import ScaleByRStdDevWithCountState as ScaleByRStdDevWithCountState
from gradax import ScaleByScheduleState as ScaleByScheduleState
from gradax import ScaleBySM3State as ScaleBySM3State
from gradax import ScaleByTrustRatioState as ScaleByTrustRatioState
from gradax import ScaleState as ScaleState
from gradax import TraceState as TraceState
from gradax import add_decayed_weights as add_decayed_weights
from gradax import add_noise as add_noise
from gradax import apply_every as apply_every
from gradax import centralize as centralize
from gradax import ema as ema
from gradax import normalize_by_update_norm as normalize_by_update_norm
from gradax import scale as scale
from gradax import scale_by_adadelta as scale_by_adadelta
from gradax import scale_by_adam as scale_by_adam
from gradax import scale_by_adamax as scale_by_adamax
from gradax import scale_by_adan as scale_by_adan
from gradax import scale_by_amsgrad as scale_by_amsgrad
from gradax import scale_by_belief as scale_by_belief
from gradax import scale_by_distance_over_gradients as scale_by_distance_over_gradients
from gradax import scale_by_lbfgs as scale_by_lbfgs
from gradax import scale_by_learning_rate as scale_by_learning_rate
from gradax import scale_by_lion as scale_by_lion
from gradax import scale_by_novograd as scale_by_novograd
from gradax import scale_by_optimistic_gradient as scale_by_optimistic_gradient
from gradax import scale_by_param_block_norm as scale_by_param_block_norm
from gradax import scale_by_param_block_rms as scale_by_param_block_rms
from gradax import scale_by_polyak as scale_by_polyak
from gradax import scale_by_radam as scale_by_radam
from gradax import scale_by_rms as scale_by_rms
from gradax import scale_by_rprop as scale_by_rprop
from gradax import scale_by_rss as scale_by_rss
from gradax import scale_by_schedule as scale_by_schedule
from gradax import scale_by_sign as scale_by_sign
from gradax import scale_by_sm3 as scale_by_sm3
from gradax import scale_by_stddev as scale_by_stddev
from gradax import scale_by_trust_ratio as scale_by_trust_ratio
from gradax import scale_by_yogi as scale_by_yogi
from gradax import trace as trace

# optax's module has it by import from numerics; code reaches it from here too.
from gradax._core.numerics import abs_sq as abs_sq
