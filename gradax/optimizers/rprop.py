"""Rprop: resilient backpropagation."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .. import tree as gtree
from .._core.declarations import NONNEGATIVE, Range, hyper
from .._core.protocol import Alias, GradientTransformation
from .._core.pytree import Module
from ..combinators.chain import chain
from ..transforms.scaling import scale

# A cap on the step sizes; inf is no cap.
_MAX_STEP_SIZE = Range(0.0, low_open=True, allow_inf=True)
# Rprop's learning rate is only its first step size. Unlike other learning
# rates, a negative one does not ascend: the step sizes are clipped into
# [min_step_size, max_step_size], so optax's rprop(-0.1) stalls at zero
# steps and then creeps downhill at min_step_size. Refused, saying so.
_INITIAL_STEP_SIZE = Range(
    0.0,
    hint=(
        "Rprop's learning_rate is its initial step size, which its updates "
        "clip into [min_step_size, max_step_size]: a negative one does not "
        "ascend (optax's rprop stalls with one)."
    ),
)


class ScaleByRpropState(NamedTuple):
    """State of :class:`scale_by_rprop`."""

    step_sizes: Any  # per-element step sizes, like params
    prev_updates: Any  # the last signed steps (0 after a sign change), like params


def _reject_complex(params: Any) -> None:
    if any(jnp.iscomplexobj(x) for x in jax.tree.leaves(params)):
        # Rprop compares the signs of successive gradients; complex numbers
        # have no sign to compare.
        raise ValueError("rprop does not support complex parameters")


class _RpropOptions(Module):
    """The options of scale_by_rprop and rprop, and their joint check."""

    _abstract = True

    learning_rate: Any = hyper(valid=_INITIAL_STEP_SIZE)
    eta_minus: Any = hyper(default=0.5, valid=Range(0.0, 1.0, low_open=True))
    eta_plus: Any = hyper(default=1.2, valid=Range(1.0))
    min_step_size: Any = hyper(default=1e-6, valid=NONNEGATIVE)
    max_step_size: Any = hyper(default=50.0, valid=_MAX_STEP_SIZE)

    def __check_init__(self):
        low, high = self.min_step_size, self.max_step_size
        numbers = (int, float)
        if isinstance(low, numbers) and isinstance(high, numbers) and low > high:
            raise ValueError(
                f"min_step_size must be <= max_step_size, got {low!r} > {high!r}"
            )


class scale_by_rprop(_RpropOptions, GradientTransformation):
    """Rprop's signed, per-element adaptive steps (descent needs a sign flip).

    See :class:`rprop` for the update rule. The learning rate is only the
    initial step size: a schedule is read once, at step 0, by `init`.

    Args:
      learning_rate: the initial step size.
      eta_minus: step size factor after a sign change, in (0, 1].
      eta_plus: step size factor while the sign holds, >= 1.
      min_step_size: smallest step size, >= 0.
      max_step_size: largest step size, > 0 (inf: no cap).
    """

    def init_state(self, params):
        _reject_complex(params)
        return ScaleByRpropState(
            step_sizes=gtree.full_like(params, self.learning_rate),
            prev_updates=gtree.zeros_like(params),
        )

    def update_state(self, updates, state, params=None, **extra_args):
        eta_minus, eta_plus = self.eta_minus, self.eta_plus
        low, high = self.min_step_size, self.max_step_size

        def leaf(g, previous, step_size):
            agreement = g * previous
            grown = step_size * jnp.where(agreement > 0, eta_plus, eta_minus)
            step_size = jnp.where(
                agreement == 0, step_size, jnp.clip(grown, min=low, max=high)
            )
            # After a sign change the step is skipped, and the next one starts
            # afresh (its agreement is 0).
            step = jnp.where(agreement < 0, jnp.zeros_like(g), step_size * jnp.sign(g))
            return step, step_size

        grads, treedef = jax.tree.flatten(updates)
        pairs = [
            leaf(g, previous, size)
            for g, previous, size in zip(
                grads,
                treedef.flatten_up_to(state.prev_updates),
                treedef.flatten_up_to(state.step_sizes),
                strict=True,
            )
        ]
        steps = treedef.unflatten([step for step, _ in pairs])
        step_sizes = treedef.unflatten([size for _, size in pairs])
        return steps, ScaleByRpropState(step_sizes=step_sizes, prev_updates=steps)


class rprop(_RpropOptions, Alias):
    r"""Rprop: per-element step sizes adapted to the gradient's sign.

    Each element keeps a step size :math:`\delta` (initially
    :math:`\eta`) and its last step :math:`s_{t-1}`. With
    :math:`a = g_t s_{t-1}`:

    .. math::
      \delta_t &= \begin{cases}
        \operatorname{clip}(\eta_+ \delta_{t-1}, \delta_{\min}, \delta_{\max})
          & a > 0 \\
        \operatorname{clip}(\eta_- \delta_{t-1}, \delta_{\min}, \delta_{\max})
          & a < 0 \\
        \delta_{t-1} & a = 0 \end{cases}\\
      s_t &= \begin{cases} 0 & a < 0 \\
        \delta_t \operatorname{sign}(g_t) & \text{otherwise,} \end{cases}\qquad
      u_t = -s_t

    (the iRprop- variant: a step after a sign change is skipped). Meant for
    full-batch gradients.

    Args:
      learning_rate: :math:`\eta`, the initial step size. A schedule
        is evaluated once, at step 0 (unlike optax, where it fails).
      eta_minus: :math:`\eta_-` in (0, 1].
      eta_plus: :math:`\eta_+ \ge 1`.
      min_step_size: :math:`\delta_{\min} \ge 0`.
      max_step_size: :math:`\delta_{\max} > 0` (inf: no cap).

    Returns:
      The optimizer: `chain(scale_by_rprop(...), scale(-1.0))`.

    Example:
      >>> import jax, jax.numpy as jnp, gradax
      >>> params = jnp.array([1.0, -2.0])
      >>> tx = gradax.rprop(0.1)
      >>> state = tx.init(params)
      >>> grad = jax.grad(lambda p: (p**2).sum())
      >>> for _ in range(2):
      ...     updates, state = tx.update(grad(params), state)
      ...     params = gradax.apply_updates(params, updates)
      >>> params
      Array([ 0.78, -1.78], dtype=float32)

    References:
      Riedmiller and Braun, A Direct Adaptive Method for Faster
      Backpropagation Learning: The RPROP Algorithm, ICNN 1993; Igel and
      Hüsken, Improving the Rprop Learning Algorithm, 2000.
    """

    def build(self):
        return chain(
            self.part(scale_by_rprop),
            scale(-1.0),
        )
