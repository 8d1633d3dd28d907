"""Stochastic gradient descent, with optional (Nesterov) momentum."""

from __future__ import annotations

from typing import Any

from .._core.declarations import LEARNING_RATE, UNIT, hyper
from .._core.protocol import Alias
from .._core.pytree import static_field
from .._core.simple import identity
from ..combinators.chain import chain
from ..transforms.momentum import trace
from ..transforms.scaling import scale_by_learning_rate


class sgd(Alias):
    r"""Stochastic gradient descent, with optional (Nesterov) momentum.

    With gradient :math:`g_t` and learning rate :math:`\eta_t`: without
    momentum :math:`u_t = -\eta_t g_t`; with momentum :math:`\mu`,

    .. math::
      m_t = g_t + \mu\, m_{t-1},\qquad
      u_t = \begin{cases} -\eta_t\, m_t & \text{plain} \\
      -\eta_t (g_t + \mu\, m_t) & \text{nesterov} \end{cases}

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule.
      momentum: :math:`\mu`, in [0, 1] (1: a running sum); None for no momentum.
      nesterov: use Nesterov momentum.
      accumulator_dtype: dtype of the momentum (default: the params').

    Returns:
      The optimizer: `chain(trace(momentum, ...) or identity(),
      scale_by_learning_rate(learning_rate))`.

    Example:
      >>> import jax, jax.numpy as jnp, gradax
      >>> params = jnp.array([1.0, -2.0])
      >>> tx = gradax.sgd(0.1, momentum=0.9)
      >>> state = tx.init(params)
      >>> updates, state = tx.update(jax.grad(lambda p: (p**2).sum())(params), state)
      >>> gradax.apply_updates(params, updates)
      Array([ 0.8, -1.6], dtype=float32)

    References:
      Robbins and Monro, A Stochastic Approximation Method, 1951; Sutskever et
      al., On the importance of initialization and momentum in deep learning,
      ICML 2013.
    """

    learning_rate: Any = hyper(valid=LEARNING_RATE)
    momentum: Any = hyper(default=None, valid=UNIT)  # 1: a running sum, as optax allows
    nesterov: bool = static_field(default=False)
    accumulator_dtype: Any = static_field(default=None)

    def build(self):
        if self.momentum is None:
            first = identity()
        else:
            first = trace(self.momentum, self.nesterov, self.accumulator_dtype)
        return chain(first, scale_by_learning_rate(self.learning_rate))
