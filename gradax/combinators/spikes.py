"""Skipping the update when the loss spikes: skip_loss_spikes."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._core.declarations import DECAY, NONNEGATIVE, NONNEGATIVE_INT, hyper
from .._core.numerics import safe_increment
from .._core.protocol import (
    GradientTransformation,
    TransformationLike,
    transformation_field,
    zero_count,
)
from ._wrapping import cond_inner_update


class SkipLossSpikesState(NamedTuple):
    """State of :class:`skip_loss_spikes`."""

    accepted: jax.Array  # int32 scalar: finite losses taken into the statistics
    mean: jax.Array  # float32 scalar: running mean of the accepted losses
    variance: jax.Array  # float32 scalar: running variance of the accepted losses
    consecutive_skips: jax.Array  # int32 scalar: skips since the last accepted step
    total_skips: jax.Array  # int32 scalar: every skipped step so far
    last_skipped: jax.Array  # bool scalar: whether the last step was skipped
    inner_state: Any


class skip_loss_spikes(GradientTransformation):
    r"""Skips the update when the loss jumps far above its running mean.

    `update` reads the loss at the current parameters as `value=`. With
    :math:`\mu_n, \sigma_n^2` the running mean and variance of the :math:`n`
    losses accepted so far, step :math:`t` is a spike when

    .. math::
      n \ge \max(n_0, 2) \ \text{and}\ \ell_t > \mu_n + k\, \sigma_n,

    or when :math:`\ell_t` is not finite. A spike is skipped: the updates are
    zeros and the inner state is returned untouched (bit for bit). After
    `max_consecutive_skips` skips in a row the next step is accepted
    whatever its loss, so a real shift of the loss level is taken in instead
    of refused forever. An accepted finite loss enters the statistics with
    weight :math:`w = \max(1/n, 1 - \beta)` (:math:`n` counting it):

    .. math::
      \delta = \ell_t - \mu,\quad \mu \leftarrow \mu + w\,\delta,\quad
      \sigma^2 \leftarrow (1 - w)(\sigma^2 + w\,\delta^2),

    the exact mean and variance of the first :math:`1 / (1 - \beta)` losses,
    then an exponential average of time constant :math:`1 / (1 - \beta)`.
    The state has fixed shapes and dtypes (float32 statistics whatever the
    loss's dtype), so the wrapper runs inside `lax.cond`, `while_loop`
    and `scan`.

    Args:
      inner: the transformation to protect (gradax or optax).
      threshold: :math:`k`, in running standard deviations, >= 0.
      warmup_steps: :math:`n_0`, accepted losses before any skipping, an
        integer >= 0 (at least 2 are always taken: a spread needs two).
      decay: :math:`\beta`, the running statistics' decay, in [0, 1).
      max_consecutive_skips: skips in a row after which a step is accepted,
        an integer >= 0 (0: never skip).

    Returns:
      A transformation with state :class:`SkipLossSpikesState`; its
      `update` needs `value=`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.skip_loss_spikes(gradax.sgd(0.1), warmup_steps=3)
      >>> params = jnp.ones(2)
      >>> state = tx.init(params)
      >>> for loss in (1.0, 1.1, 0.9):
      ...     _, state = tx.update(jnp.ones(2), state, params, value=loss)
      >>> updates, state = tx.update(jnp.ones(2), state, params, value=50.0)
      >>> updates, int(state.total_skips)
      (Array([0., 0.], dtype=float32), 1)

    References:
      The skip-step options of MaxText (`skip_step_on_spikes`) and levanter
      (`skip_step`); Wortsman et al., Small-scale proxies for large-scale
      Transformer training instabilities, 2023 (arXiv:2309.14322) on loss
      spikes.
    """

    _required_extra_args = ("value",)

    inner: TransformationLike = transformation_field()
    # Compared with running statistics kept in the state, so not schedules.
    threshold: Any = hyper(default=6.0, valid=NONNEGATIVE, schedule=False)
    warmup_steps: Any = hyper(default=100, valid=NONNEGATIVE_INT, schedule=False)
    decay: Any = hyper(default=0.99, valid=DECAY, schedule=False)
    max_consecutive_skips: Any = hyper(
        default=10, valid=NONNEGATIVE_INT, schedule=False
    )

    def init_state(self, params):
        # One array per leaf, never shared: a step that donates the state
        # refuses a buffer given twice.
        return SkipLossSpikesState(
            accepted=zero_count(),
            mean=jnp.zeros([], jnp.float32),
            variance=jnp.zeros([], jnp.float32),
            consecutive_skips=zero_count(),
            total_skips=zero_count(),
            last_skipped=jnp.array(False),
            inner_state=self.inner.init(params),
        )

    def update_state(self, updates, state, params=None, **extra_args):
        value = jnp.asarray(extra_args["value"])
        if value.shape != ():
            raise ValueError(
                f"skip_loss_spikes needs value= to be a scalar loss, got shape "
                f"{value.shape}"
            )
        loss = value.astype(jnp.float32)
        finite = jnp.isfinite(loss)
        ceiling = state.mean + self.threshold * jnp.sqrt(state.variance)
        # A spread needs two losses: no skipping before the second one.
        warm = state.accepted >= jnp.maximum(self.warmup_steps, 2)
        spike = jnp.logical_not(finite) | (warm & (loss > ceiling))
        give_up = state.consecutive_skips >= self.max_consecutive_skips
        skip = spike & jnp.logical_not(give_up)
        run = jnp.logical_not(skip)
        new_updates, inner_state = cond_inner_update(
            self, run, updates, state, params, extra_args, owner="skip_loss_spikes"
        )
        learn = jnp.logical_not(skip) & finite
        accepted = jnp.where(learn, safe_increment(state.accepted), state.accepted)
        weight = jnp.maximum(
            1.0 / jnp.maximum(accepted, 1).astype(jnp.float32), 1.0 - self.decay
        )
        delta = jnp.where(learn, loss, state.mean) - state.mean
        mean = state.mean + weight * delta
        variance = (1 - weight) * (state.variance + weight * delta**2)
        new_state = SkipLossSpikesState(
            accepted=accepted,
            mean=jnp.where(learn, mean, state.mean),
            variance=jnp.where(learn, variance, state.variance),
            consecutive_skips=jnp.where(
                skip, safe_increment(state.consecutive_skips), 0
            ),
            total_skips=jnp.where(
                skip, safe_increment(state.total_skips), state.total_skips
            ),
            last_skipped=skip,
            inner_state=inner_state,
        )
        return new_updates, new_state
