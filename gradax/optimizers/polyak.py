"""The Polyak step size: scale_by_polyak and polyak_sgd."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from .. import tree as gtree
from .._core.declarations import (
    ANY,
    LEARNING_RATE,
    NONNEGATIVE,
    OneOf,
    Range,
    Shared,
    hyper,
)
from .._core.protocol import Alias, GradientTransformation
from ..combinators.chain import chain
from .sgd import sgd

# A cap on the step size; inf is plain SPS, without a cap. A negative cap
# would replace every Polyak step by itself (always ascending, whatever the
# gap), so it stays refused, unlike a negative learning rate.
_MAX_LEARNING_RATE = Range(0.0, allow_inf=True)


# scale_by_polyak's options, declared once: it and the optimizers that
# build it take each field from here and pass the values on with Alias.part.
_POLYAK = Shared(
    f_min=hyper(default=0.0, valid=ANY),
    max_learning_rate=hyper(default=1.0, valid=_MAX_LEARNING_RATE),
    eps=hyper(default=0.0, valid=NONNEGATIVE),
    variant=hyper(default="sps", valid=OneOf(("sps", "sps+")), static=True),
)


class scale_by_polyak(GradientTransformation):
    """Multiplies the updates by the Polyak step size (needs `value=`).

    See :class:`polyak_sgd` for the step size. `update` must be given the
    objective's value at the current parameters as `value=`.

    Differences from optax: an unknown `variant` raises ValueError when the
    transformation is built, not at its first update.

    Args:
      f_min: a lower bound on the objective (its minimum, if known), any
        real number.
      max_learning_rate: the largest step size, >= 0 (inf: no cap).
      eps: added to the squared norm of the updates, >= 0.
      variant: `"sps"`, or `"sps+"` to clip a negative gap
        `value - f_min` to 0.
    """

    _required_extra_args = ("value",)

    f_min: Any = _POLYAK.field()
    max_learning_rate: Any = _POLYAK.field()
    eps: Any = _POLYAK.field()
    variant: str = _POLYAK.field()

    def update_state(self, updates, state, params=None, **extra_args):
        value = extra_args["value"]  # required: the base checked it is given
        grad_sq_norm = gtree.norm(updates, squared=True)
        gap = jnp.asarray(value - self.f_min).astype(grad_sq_norm.dtype)
        if self.variant == "sps+":
            gap = jnp.maximum(gap, 0)
        denominator = grad_sq_norm + self.eps
        # A (numerically) zero gradient gets no step instead of a division by 0.
        step = jnp.where(
            denominator <= np.finfo(np.float64).eps,
            jnp.array(0.0),
            jnp.minimum(gap / denominator, self.max_learning_rate),
        )
        return gtree.scale(step, updates), state


class polyak_sgd(Alias):
    r"""SGD with the Polyak step size (SPS); `update` needs `value=`.

    With the objective's value :math:`f(\theta_{t-1})` passed as `value`,
    a lower bound :math:`f^*` and the scaled gradient :math:`s_t g_t`:

    .. math::
      \gamma_t = \min\Big(\frac{f(\theta_{t-1}) - f^*}
        {\|s_t g_t\|^2 + \epsilon},\ \gamma_{\max}\Big),\qquad
      u_t = -\gamma_t\, s_t g_t,

    with :math:`\gamma_t = 0` when :math:`\|s_t g_t\|^2 + \epsilon` is below
    float64's machine epsilon. `"sps+"` uses :math:`\max(f - f^*, 0)`.

    Args:
      max_learning_rate: :math:`\gamma_{\max} \ge 0` (inf: no cap).
      scaling: :math:`s_t`, a number, an array or a schedule multiplying the
        gradient first (as `sgd(learning_rate=scaling)`); a negative one
        ascends, as in optax, and building the optimizer warns.
      f_min: :math:`f^*`, a lower bound on the objective, any real number.
      eps: :math:`\epsilon \ge 0`.
      variant: `"sps"` or `"sps+"`.

    Returns:
      The optimizer: `chain(sgd(scaling), scale_by_polyak(...))`.

    Example:
      >>> import jax, jax.numpy as jnp, gradax
      >>> params = jnp.array([1.0, -2.0])
      >>> tx = gradax.polyak_sgd()
      >>> state = tx.init(params)
      >>> loss, grads = jax.value_and_grad(lambda p: (p**2).sum())(params)
      >>> updates, state = tx.update(grads, state, params, value=loss)
      >>> gradax.apply_updates(params, updates)
      Array([ 0.5, -1. ], dtype=float32)

    References:
      Loizou et al., Stochastic Polyak Step-size for SGD: An Adaptive
      Learning Rate for Fast Convergence, AISTATS 2021 (arXiv:2002.10542);
      Garrigos et al., Function value learning: Adaptive learning rates based
      on the Polyak stepsize and function splitting in ERM, 2023
      (arXiv:2307.14528).
    """

    max_learning_rate: Any = _POLYAK.field()
    scaling: Any = hyper(
        default=1.0, valid=LEARNING_RATE
    )  # sgd's learning rate, as in optax
    f_min: Any = _POLYAK.field()
    eps: Any = _POLYAK.field()
    variant: str = _POLYAK.field()

    def build(self):
        return chain(
            sgd(learning_rate=self.scaling),
            self.part(scale_by_polyak),
        )
