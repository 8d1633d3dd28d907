"""Fromage: frobenius-matched gradient descent."""

from __future__ import annotations

from typing import Any

import jax

from .._core.declarations import LEARNING_RATE, NONNEGATIVE, hyper
from .._core.protocol import Alias, GradientTransformation, WeightDecaySchedule
from ..combinators.chain import chain
from ..transforms.trust_ratio import scale_by_trust_ratio


def _fromage_factors(learning_rate: Any) -> tuple[Any, Any]:
    """`(lr / sqrt(1 + lr^2), 1 / sqrt(1 + lr^2) - 1)` without cancellation.

    Python numbers stay Python numbers (float64, as optax computes them);
    arrays and tracers, e.g. a schedule's value, use their own dtype.
    """
    root = (1 + learning_rate**2) ** 0.5
    step = learning_rate / root
    shrink = -(learning_rate**2) / (root * (1 + root))
    return step, shrink


class _fromage_step(GradientTransformation):
    """Multiplies updates by `-lr / sqrt(1 + lr^2)`, Fromage's step.

    optax's stage is `scale_by_learning_rate` of that factor; this one holds
    the learning rate itself (a schedule's count is kept under the same
    state class), so fromage holds its parts with its own leaf.
    """

    learning_rate: Any = hyper(valid=LEARNING_RATE)

    def update_state(self, updates, state, params=None, **extra_args):
        step, _ = _fromage_factors(self.learning_rate)
        return jax.tree.map(lambda g: -step * g, updates), state


class _fromage_shrink(GradientTransformation):
    """Adds `(1 / sqrt(1 + lr^2) - 1) * params` to the updates.

    optax builds this stage with add_decayed_weights of that (negative)
    factor: a scheduled learning rate's count is kept under that
    transformation's state class.
    """

    learning_rate: Any = hyper(valid=LEARNING_RATE)

    _count_state = WeightDecaySchedule

    def update_state(self, updates, state, params=None, **extra_args):
        if params is None:
            raise ValueError("fromage needs params passed to update")
        _, shrink = _fromage_factors(self.learning_rate)
        return jax.tree.map(lambda g, p: g + shrink * p, updates, params), state


class fromage(Alias):
    r"""Fromage: descent matched to each layer's Frobenius norm.

    Each leaf's gradient is rescaled to the norm of its parameter, and the
    parameter is shrunk so that its norm does not grow:

    .. math::
      u_t = \frac{1}{\sqrt{1 + \eta_t^2}}\Big(-\eta_t
        \frac{\max(\|\theta_{t-1}\|, \nu)}{\max(\|g_t\|, \nu)}\, g_t
        + \theta_{t-1}\Big) - \theta_{t-1},

    norms taken per leaf, :math:`\nu` = `min_norm`.

    Differences from optax: optax computes the shrink factor as
    :math:`1/\sqrt{1 + \eta^2} - 1`, which loses digits to cancellation
    when :math:`\eta` is a float32 schedule value; gradax uses the equal
    :math:`-\eta^2 / (r (1 + r))`, :math:`r = \sqrt{1 + \eta^2}`. A constant
    schedule therefore gives the plain number's updates.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule.
      min_norm: :math:`\nu \ge 0`, the smallest norm used for a parameter or
        a gradient.

    Returns:
      The optimizer; `update` needs `params`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> params = jnp.array([3.0, -4.0])
      >>> tx = gradax.fromage(0.1)
      >>> updates, _ = tx.update(jnp.array([400.0, 300.0]), tx.init(params), params)
      >>> new = gradax.apply_updates(params, updates)
      >>> new, jnp.linalg.norm(new)  # a gradient orthogonal to params rotates them
      (Array([ 2.5871, -4.2787  ], dtype=float32), Array(5., dtype=float32))

    References:
      Bernstein et al., On the distance between two neural networks and the
      stability of learning, NeurIPS 2020 (arXiv:2002.03432).
    """

    learning_rate: Any = hyper(valid=LEARNING_RATE)
    min_norm: Any = hyper(default=1e-6, valid=NONNEGATIVE)

    def build(self):
        return chain(
            scale_by_trust_ratio(self.min_norm),
            _fromage_step(self.learning_rate),
            _fromage_shrink(self.learning_rate),
        )
