"""Learning-rate and hyperparameter schedules.

Each schedule is a pytree: its values are leaves (so `jit` can take it as an
argument and `grad` can differentiate through it), while the steps where it
changes are static.
"""

from .._core.hyper import Schedule as Schedule
from .._core.hyper import StatefulSchedule as StatefulSchedule
from .._optax.paths import package_getattr
from ._basic import constant_schedule as constant_schedule
from ._basic import exponential_decay as exponential_decay
from ._basic import linear_schedule as linear_schedule
from ._basic import piecewise_constant_schedule as piecewise_constant_schedule
from ._basic import piecewise_interpolate_schedule as piecewise_interpolate_schedule
from ._basic import polynomial_schedule as polynomial_schedule
from ._cosine import cosine_decay_schedule as cosine_decay_schedule
from ._cosine import sgdr_schedule as sgdr_schedule
from ._cosine import warmup_cosine_decay_schedule as warmup_cosine_decay_schedule
from ._inject import InjectHyperparamsState as InjectHyperparamsState
from ._inject import InjectStatefulHyperparamsState as InjectStatefulHyperparamsState
from ._inject import inject_hyperparams as inject_hyperparams
from ._inject import inject_stateful_hyperparams as inject_stateful_hyperparams
from ._join import join_schedules as join_schedules
from ._join import warmup_constant_schedule as warmup_constant_schedule
from ._join import (
    warmup_exponential_decay_schedule as warmup_exponential_decay_schedule,
)
from ._onecycle import cosine_onecycle_schedule as cosine_onecycle_schedule
from ._onecycle import linear_onecycle_schedule as linear_onecycle_schedule
from ._wsd import warmup_stable_decay_schedule as warmup_stable_decay_schedule
from .wrapped import WrappedSchedule as WrappedSchedule

# optax's private module paths (``optax.schedules._schedule``) load on first access.
__getattr__ = package_getattr(__name__)
