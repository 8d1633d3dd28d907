"""Fromage: frobenius-matched gradient descent."""

from __future__ import annotations

from typing import Any

import jax

from .._declare import ANY, LEARNING_RATE, NONNEGATIVE, hyper
from .._hyper import Schedule, is_schedule
from .._protocol import Alias, GradientTransformation, WeightDecaySchedule
from .._pytree import static_field
from ..combinators.chain import chain
from ..transforms.scaling import scale_by_learning_rate
from ..transforms.trust_ratio import scale_by_trust_ratio


class _add_scaled_params(GradientTransformation):
    """Adds `factor * params` to the updates (the factor may be negative).

    `add_decayed_weights` rejects the negative factor Fromage needs.
    """

    factor: Any = hyper(valid=ANY)  # Fromage's is negative

    # optax builds this stage with add_decayed_weights: a scheduled factor's
    # count is kept under that transformation's state class.
    _count_state = WeightDecaySchedule

    def update_state(self, updates, state, params=None, **extra_args):
        if params is None:
            raise ValueError("fromage needs params passed to update")
        factor = self.factor
        return jax.tree.map(lambda g, p: g + factor * p, updates, params), state


def _fromage_factors(learning_rate: Any) -> tuple[Any, Any]:
    """`(lr / sqrt(1 + lr^2), 1 / sqrt(1 + lr^2) - 1)` without cancellation.

    Python numbers stay Python numbers (float64, as optax computes them);
    arrays and tracers, e.g. a schedule's value, use their own dtype.
    """
    root = (1 + learning_rate**2) ** 0.5
    step = learning_rate / root
    shrink = -(learning_rate**2) / (root * (1 + root))
    return step, shrink


class _FromageFactor(Schedule):
    """One of Fromage's two factors at each step of a learning-rate schedule.

    So that a scheduled Fromage is optax's chain of two scheduled stages (a
    count in each, as optax keeps), with the user's schedule still a leaf.
    """

    learning_rate: Any
    which: int = static_field()  # 0: the step, 1: the shrink

    def __call__(self, count: Any) -> Any:
        return _fromage_factors(self.learning_rate(count))[self.which]


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
      >>> import jax, jax.numpy as jnp, gradax
      >>> params = jnp.array([3.0, -4.0])
      >>> tx = gradax.fromage(0.1)
      >>> state = tx.init(params)
      >>> grads = jax.grad(lambda p: (p**2).sum())(params)
      >>> updates, state = tx.update(grads, state, params)
      >>> gradax.apply_updates(params, updates)
      Array([ 2.6866004, -3.5821338], dtype=float32)

    References:
      Bernstein et al., On the distance between two neural networks and the
      stability of learning, NeurIPS 2020 (arXiv:2002.03432).
    """

    learning_rate: Any = hyper(valid=LEARNING_RATE)
    min_norm: Any = hyper(default=1e-6, valid=NONNEGATIVE)

    def build(self):
        if is_schedule(self.learning_rate):
            step = _FromageFactor(self.learning_rate, 0)
            shrink = _FromageFactor(self.learning_rate, 1)
        else:
            step, shrink = _fromage_factors(self.learning_rate)
        return chain(
            scale_by_trust_ratio(self.min_norm),
            scale_by_learning_rate(step),
            _add_scaled_params(shrink),
        )
