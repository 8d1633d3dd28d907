"""Adadelta: steps scaled by the ratio of past update and gradient magnitudes."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .. import tree as gtree
from .._core.declarations import DECAY, LEARNING_RATE, NONNEGATIVE, Shared, hyper
from .._core.protocol import Alias, GradientTransformation
from .._core.pytree import static_field
from ..combinators.chain import chain
from ..transforms.scaling import scale_by_learning_rate
from ..transforms.weight_decay import add_decayed_weights


class ScaleByAdaDeltaState(NamedTuple):
    """State of :class:`scale_by_adadelta`."""

    e_g: Any  # moving average of squared gradients, like params
    e_x: Any  # moving average of squared updates, like params


# scale_by_adadelta's options, declared once: it and the optimizers that
# build it take each field from here and pass the values on with Alias.part.
_ADADELTA = Shared(
    rho=hyper(default=0.9, valid=DECAY),
    eps=hyper(default=1e-6, valid=NONNEGATIVE),
)


class scale_by_adadelta(GradientTransformation):
    """Rescales updates by Adadelta's ratio of moving averages (no learning rate).

    See :class:`adadelta` for the update rule.

    Args:
      rho: decay of both moving averages, in [0, 1).
      eps: added inside both square roots, >= 0.
    """

    rho: Any = _ADADELTA.field()
    eps: Any = _ADADELTA.field()

    def init_state(self, params):
        return ScaleByAdaDeltaState(
            e_g=gtree.zeros_like(params), e_x=gtree.zeros_like(params)
        )

    def update_state(self, updates, state, params=None, **extra_args):
        rho, eps = self.rho, self.eps
        e_g = gtree.update_moment(updates, state.e_g, rho, 2)
        new_updates = jax.tree.map(
            lambda g, eg, ex: (jnp.sqrt(ex + eps) / jnp.sqrt(eg + eps)) * g,
            updates,
            e_g,
            state.e_x,
        )
        e_x = gtree.update_moment(new_updates, state.e_x, rho, 2)
        return new_updates, ScaleByAdaDeltaState(e_g=e_g, e_x=e_x)


class adadelta(Alias):
    r"""Adadelta: an adaptive step that needs no learning rate.

    With gradient :math:`g_t` (plus :math:`\lambda \theta_{t-1}` when
    `weight_decay` is set):

    .. math::
      E[g^2]_t = \rho E[g^2]_{t-1} + (1 - \rho) g_t^2,\quad
      \Delta_t = \frac{\sqrt{E[\Delta^2]_{t-1} + \epsilon}}
      {\sqrt{E[g^2]_t + \epsilon}}\, g_t,\\
      E[\Delta^2]_t = \rho E[\Delta^2]_{t-1} + (1 - \rho) \Delta_t^2,\quad
      u_t = -\eta_t \Delta_t.

    Args:
      learning_rate: :math:`\eta`, a number, an array, a schedule, or
        None (no scaling: the update is :math:`+\Delta_t`, as in optax).
      rho: decay of both moving averages, in [0, 1).
      eps: :math:`\epsilon`, >= 0.
      weight_decay: :math:`\lambda >= 0`, added to the gradient first.
      weight_decay_mask: a tree of booleans like the params (or a function of
        the params returning one) selecting the leaves that decay.

    Returns:
      The optimizer, a gradient transformation.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.adadelta(1.0)
      >>> p = jnp.zeros(2)
      >>> u, _ = tx.update(jnp.array([2.0, -4.0]), tx.init(p), p)
      >>> u.round(5)
      Array([-0.00316,  0.00316], dtype=float32)

    References:
      Zeiler, ADADELTA: An Adaptive Learning Rate Method, 2012
      (arXiv:1212.5701).
    """

    learning_rate: Any = hyper(default=None, valid=LEARNING_RATE)
    rho: Any = _ADADELTA.field()
    eps: Any = _ADADELTA.field()
    weight_decay: Any = hyper(default=0.0, valid=NONNEGATIVE)
    weight_decay_mask: Any = static_field(default=None)

    def build(self):
        return chain(
            add_decayed_weights(self.weight_decay, self.weight_decay_mask),
            self.part(scale_by_adadelta),
            scale_by_learning_rate(self.learning_rate),
        )
