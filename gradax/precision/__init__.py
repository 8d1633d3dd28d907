"""Training in 16-bit parameters: an exact master, stochastic rounding, update dtypes.

Public modules: `master` (:class:`master_weights`), `rounding`
(:class:`stochastic_rounding`) and `update_dtype` (:class:`cast_updates`);
`_common` holds what they share.
"""

from .master import MasterWeightsState as MasterWeightsState
from .master import master_weights as master_weights
from .rounding import StochasticRoundingState as StochasticRoundingState
from .rounding import stochastic_rounding as stochastic_rounding
from .update_dtype import cast_updates as cast_updates
