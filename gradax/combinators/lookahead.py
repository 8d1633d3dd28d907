"""Lookahead: fast weights explored by an optimizer, slow weights pulled along."""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._core.declarations import POSITIVE_INT, UNIT, hyper
from .._core.protocol import (
    GradientTransformation,
    TransformationLike,
    transformation_field,
    zero_count,
)
from .._core.pytree import static_field
from .._core.treecheck import check_same_structure

_logger = logging.getLogger("gradax")


class LookaheadState(NamedTuple):
    """State of :class:`lookahead`."""

    fast_state: Any  # the fast optimizer's state
    steps_since_sync: jax.Array  # int32 scalar: fast steps since the last sync


class LookaheadParams(NamedTuple):
    """The two copies of the parameters that :class:`lookahead` updates.

    Compute gradients at `fast`; evaluate (and deploy) `slow`.
    """

    fast: Any
    slow: Any

    @classmethod
    def init_synced(cls, params: Any) -> LookaheadParams:
        """Fast and slow parameters both equal to `params`.

        Args:
          params: the initial parameters, any pytree.
        """
        return cls(fast=params, slow=params)


def _params_error(params: Any) -> ValueError:
    """The error for `params` that are not `LookaheadParams(fast, slow)`."""
    return ValueError(
        "lookahead.update needs params=LookaheadParams(fast, slow) (the "
        f"gradients are taken at the fast ones), got {type(params).__name__}"
    )


class lookahead(GradientTransformation):
    r"""Lookahead: `k` steps forward with a fast optimizer, one step back.

    The fast optimizer updates the fast weights :math:`\phi` at every step.
    Every `sync_period` steps the slow weights :math:`\theta` move towards
    the fast ones and the fast ones are reset to them:

    .. math::
      \theta \leftarrow \theta + \alpha (\phi - \theta),\qquad
      \phi \leftarrow \theta.

    The updates returned are a :class:`LookaheadParams` to add to the
    parameters with `apply_updates`; do not transform them further, or the
    two copies drift apart.

    Differences from optax: extra keyword arguments of `update` are passed
    on to the fast optimizer; `params` must be a :class:`LookaheadParams`
    (optax fails later with an attribute error).

    Args:
      fast_optimizer: the optimizer of the fast weights (gradax or optax).
      sync_period: `k`, the number of fast steps between syncs, an integer
        >= 1.
      slow_step_size: :math:`\alpha`, in [0, 1]; a number, an array or a
        schedule.
      reset_state: re-initialize the fast optimizer's state at every sync.

    Returns:
      A transformation with state :class:`LookaheadState`; its `update`
      takes gradients at the fast weights and `params=LookaheadParams`.

    Example:
      >>> import jax, jax.numpy as jnp, gradax
      >>> sgd = gradax.scale(-0.25)  # gradient descent, learning rate 0.25
      >>> tx = gradax.lookahead(sgd, sync_period=2, slow_step_size=0.5)
      >>> params = gradax.LookaheadParams.init_synced(jnp.array([1.0, -1.0]))
      >>> state = tx.init(params)
      >>> for _ in range(2):
      ...     grads = jax.grad(lambda p: (p**2).sum())(params.fast)
      ...     updates, state = tx.update(grads, state, params)
      ...     params = gradax.apply_updates(params, updates)
      >>> params.slow  # 1 + 0.5 * (0.25 - 1)
      Array([ 0.625, -0.625], dtype=float32)
      >>> params.fast
      Array([ 0.625, -0.625], dtype=float32)

    References:
      Zhang, Lucas, Hinton and Ba, Lookahead Optimizer: k steps forward, 1 step
      back, 2019 (arXiv:1907.08610).
    """

    fast_optimizer: TransformationLike = transformation_field()
    # A period, not a schedule: the state counts steps modulo it.
    sync_period: Any = hyper(valid=POSITIVE_INT, schedule=False)
    slow_step_size: Any = hyper(valid=UNIT)
    reset_state: bool = static_field(default=False)

    def init_state(self, params):
        fast = getattr(params, "fast", None)
        if fast is None:
            _logger.warning(
                "lookahead.init was given params without a `fast` attribute; "
                "using them as the fast parameters. Pass "
                "LookaheadParams.init_synced(params) instead."
            )
            fast = params
        return LookaheadState(
            fast_state=self.fast_optimizer.init(fast), steps_since_sync=zero_count()
        )

    def _params_like_updates(self, params):
        if not (hasattr(params, "fast") and hasattr(params, "slow")):
            raise _params_error(params)
        check_same_structure(params.slow, params.fast, "params.slow", "params.fast")
        return params.fast

    def update_state(self, updates, state, params=None, **extra_args):
        if params is None:
            raise _params_error(params)
        fast, slow = params.fast, params.slow
        fast_updates, fast_state = self.fast_optimizer.update(
            updates, state.fast_state, fast, **extra_args
        )
        sync = state.steps_since_sync == self.sync_period - 1
        alpha = self.slow_step_size
        # Where the fast weights would land, relative to the slow weights.
        gap = jax.tree.map(lambda f, u, s: f + u - s, fast, fast_updates, slow)
        slow_updates = jax.tree.map(
            lambda d: jnp.where(sync, alpha * d, jnp.zeros_like(alpha * d)), gap
        )
        fast_updates = jax.tree.map(
            lambda u, d: jnp.where(sync, u - (1 - alpha) * d, u), fast_updates, gap
        )
        if self.reset_state:
            fresh = self.fast_optimizer.init(fast)
            fast_state = jax.tree.map(
                lambda now, new: jnp.where(sync, new, now), fast_state, fresh
            )
        return LookaheadParams(fast=fast_updates, slow=slow_updates), LookaheadState(
            fast_state=fast_state,
            steps_since_sync=(state.steps_since_sync + 1) % self.sync_period,
        )
