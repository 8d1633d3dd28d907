"""Second-order utilities: `optax.second_order` (deprecated there and here).

:func:`hvp` (Hessian-vector product), :func:`hessian_diag` and
:func:`fisher_diag`. optax deprecated them in 0.2.7; like optax, each call
warns with a :class:`DeprecationWarning`.
"""

from ._deprecated import fisher_diag as fisher_diag
from ._deprecated import hessian_diag as hessian_diag
from ._deprecated import hvp as hvp
