"""Accumulating past updates: trace (momentum) and ema (moving average)."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax

from .. import tree as gtree
from .._core.declarations import UNIT, hyper
from .._core.leaf_ops import arithmetic
from .._core.numerics import canonical_dtype, safe_increment
from .._core.protocol import GradientTransformation, zero_count
from .._core.pytree import static_field


class TraceState(NamedTuple):
    """State of :class:`trace`."""

    trace: Any  # a tree like the params, in accumulator_dtype


class trace(GradientTransformation):
    r"""Momentum: a decaying sum of past updates.

    With incoming update :math:`g_t` and decay :math:`\mu`:

    .. math::
      m_t = g_t + \mu\, m_{t-1},\qquad
      u_t = \begin{cases} m_t & \text{plain} \\
      g_t + \mu\, m_t & \text{nesterov} \end{cases}

    :class:`ema` is the other common average,
    :math:`\mu\, m_{t-1} + (1 - \mu) g_t`.

    Args:
      decay: :math:`\mu`, in [0, 1] (1 keeps a running sum, as in optax); a
        number, an array or a schedule.
      nesterov: return the Nesterov look-ahead :math:`g_t + \mu m_t`.
      accumulator_dtype: dtype of the stored trace (default: the params').

    Returns:
      A transformation whose state is a :class:`TraceState`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.trace(0.5)
      >>> state = tx.init(jnp.zeros(2))
      >>> u, state = tx.update(jnp.ones(2), state)
      >>> u, state = tx.update(jnp.ones(2), state)
      >>> u
      Array([1.5, 1.5], dtype=float32)

    References:
      Polyak, Some methods of speeding up the convergence of iteration
      methods, 1964; Sutskever et al., On the importance of initialization and
      momentum in deep learning, ICML 2013.
    """

    decay: Any = hyper(valid=UNIT)
    nesterov: bool = static_field(default=False)
    accumulator_dtype: Any = static_field(default=None)

    def init_state(self, params):
        dtype = canonical_dtype(self.accumulator_dtype)
        return TraceState(trace=gtree.zeros_like(params, dtype))

    def update_state(self, updates, state, params=None, **extra_args):
        op, (decay,) = arithmetic((updates, state.trace), (self.decay,))

        def step(g, m):
            return op.add(g, op.mul(decay, m))

        new_trace = jax.tree.map(
            lambda g, m: None if g is None else step(g, m),
            updates,
            state.trace,
            is_leaf=lambda x: x is None,
        )
        if self.nesterov:
            updates = jax.tree.map(step, updates, new_trace)
        else:
            updates = new_trace
        # The base class casts the trace back to the dtype init gave it.
        return updates, TraceState(trace=new_trace)


class EmaState(NamedTuple):
    """State of :class:`ema`."""

    count: jax.Array  # int32 scalar: number of updates so far
    ema: Any  # a tree like the params, in accumulator_dtype


class ema(GradientTransformation):
    r"""Exponential moving average of past updates.

    With incoming update :math:`g_t`, decay :math:`\beta` and step
    :math:`t \ge 1`:

    .. math::
      m_t = \beta\, m_{t-1} + (1 - \beta)\, g_t,\qquad
      u_t = \begin{cases} m_t / (1 - \beta^t) & \text{debias} \\
      m_t & \text{otherwise} \end{cases}

    Args:
      decay: :math:`\beta`, in [0, 1]; a number, an array or a schedule.
      debias: divide by :math:`1 - \beta^t` to remove the bias towards the
        zero start.
      accumulator_dtype: dtype of the stored average (default: the params').

    Returns:
      A transformation whose state is an :class:`EmaState`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.ema(0.5, debias=False)
      >>> state = tx.init(jnp.zeros(2))
      >>> u, state = tx.update(jnp.ones(2), state)
      >>> u, state = tx.update(jnp.ones(2), state)
      >>> u
      Array([0.75, 0.75], dtype=float32)
    """

    decay: Any = hyper(valid=UNIT)
    debias: bool = static_field(default=True)
    accumulator_dtype: Any = static_field(default=None)

    def init_state(self, params):
        dtype = canonical_dtype(self.accumulator_dtype)
        return EmaState(count=zero_count(), ema=gtree.zeros_like(params, dtype))

    def update_state(self, updates, state, params=None, **extra_args):
        new_ema = gtree.update_moment(updates, state.ema, self.decay, 1)
        count = safe_increment(state.count)
        if self.debias:
            updates = gtree.bias_correction(new_ema, self.decay, count)
        else:
            updates = new_ema
        return updates, EmaState(count=count, ema=new_ema)
