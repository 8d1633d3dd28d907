"""Compatibility shim for `optax._src.schedule`, optax's old home of schedules.

Maps the names the optax module still re-exports: the fourteen schedules
(`linear_schedule`, `cosine_decay_schedule`, `join_schedules`, ...),
`inject_hyperparams` and `InjectHyperparamsState`.

Each name is gradax's own object, defined nowhere here:
`schedule.linear_schedule is gradax.linear_schedule`.
See docs/optax-private-paths.md for the measured use of each name.
"""

from gradax import InjectHyperparamsState as InjectHyperparamsState
from gradax import constant_schedule as constant_schedule
from gradax import cosine_decay_schedule as cosine_decay_schedule
from gradax import cosine_onecycle_schedule as cosine_onecycle_schedule
from gradax import exponential_decay as exponential_decay
from gradax import inject_hyperparams as inject_hyperparams
from gradax import join_schedules as join_schedules
from gradax import linear_onecycle_schedule as linear_onecycle_schedule
from gradax import linear_schedule as linear_schedule
from gradax import piecewise_constant_schedule as piecewise_constant_schedule
from gradax import piecewise_interpolate_schedule as piecewise_interpolate_schedule
from gradax import polynomial_schedule as polynomial_schedule
from gradax import sgdr_schedule as sgdr_schedule
from gradax import warmup_constant_schedule as warmup_constant_schedule
from gradax import warmup_cosine_decay_schedule as warmup_cosine_decay_schedule
from gradax import (
    warmup_exponential_decay_schedule as warmup_exponential_decay_schedule,
)
