r"""Rescaling by accumulated squares: scale_by_rms, scale_by_stddev, scale_by_rss.

These are the directions of :class:`rmsprop` (plain and centered) and
:class:`adagrad`; the update rules are written out there.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import tree as gtree
from .._core.declarations import NONNEGATIVE, UNIT, hyper
from .._core.hyper import Schedule
from .._core.numerics import abs_sq, safe_increment
from .._core.protocol import GradientTransformation, zero_count
from .._core.pytree import static_field


class ScaleByRssState(NamedTuple):
    """State of :class:`scale_by_rss`."""

    sum_of_squares: Any  # like params


class ScaleByRmsState(NamedTuple):
    """State of :class:`scale_by_rms` without bias correction."""

    nu: Any  # moving average of squared updates, like params


class ScaleByRmsWithCountState(NamedTuple):
    """State of :class:`scale_by_rms` with `bias_correction=True`."""

    count: jax.Array  # int32 scalar
    nu: Any  # like params


class ScaleByRStdDevState(NamedTuple):
    """State of :class:`scale_by_stddev` without bias correction."""

    mu: Any  # moving average of updates, like params
    nu: Any  # moving average of squared updates, like params


class ScaleByRStdDevWithCountState(NamedTuple):
    """State of :class:`scale_by_stddev` with `bias_correction=True`."""

    count: jax.Array  # int32 scalar
    mu: Any  # like params
    nu: Any  # like params


class scale_by_rss(GradientTransformation):
    """Divides updates by the root of the sum of all past squared updates.

    The direction of :class:`adagrad`, see there for the update rule.

    Args:
      initial_accumulator_value: starting value of the sums, >= 0.
      eps: added inside the square root, >= 0.
    """

    initial_accumulator_value: Any = hyper(default=0.1, valid=NONNEGATIVE)
    eps: Any = hyper(default=1e-7, valid=NONNEGATIVE)

    def init_state(self, params):
        return ScaleByRssState(
            sum_of_squares=gtree.full_like(params, self.initial_accumulator_value)
        )

    def update_state(self, updates, state, params=None, **extra_args):
        eps = self.eps
        sums = jax.tree.map(lambda g, t: abs_sq(g) + t, updates, state.sum_of_squares)
        # Where nothing has accumulated the update is zero, not 0 / 0.
        inv_root = jax.tree.map(
            lambda t: jnp.where(t > 0, jax.lax.rsqrt(t + eps), 0.0), sums
        )
        new_updates = gtree.mul(inv_root, updates)
        return new_updates, ScaleByRssState(sum_of_squares=sums)


def check_rms_decay(tx: Any) -> None:
    """With bias correction, `decay = 1` would divide by `1 - 1**t = 0`.

    A rule between two arguments (`decay` alone may be 1). Host numbers are
    checked, and schedules through their known bounds; a JAX array's values
    are not read here.
    """
    decay = tx.decay
    if not tx.bias_correction:
        return
    if isinstance(decay, Schedule):
        bounds = decay.bounds()
        largest = None if bounds is None else bounds[1]
    elif isinstance(decay, (int, float, np.number, np.ndarray)):
        largest = np.max(decay)
    else:
        largest = None
    if largest is not None and largest >= 1:
        raise ValueError(
            f"decay must be < 1 when bias_correction=True (the correction "
            f"divides by 1 - decay**t), got decay={decay!r}"
        )


def _inverse_root(eps: Any, eps_in_sqrt: bool):
    """`1 / sqrt(n + eps)` or `1 / (sqrt(n) + eps)`."""
    if eps_in_sqrt:
        return lambda n: jax.lax.rsqrt(n + eps)
    return lambda n: 1 / (jnp.sqrt(n) + eps)


class _ByMovingSquares(GradientTransformation):
    """The options of scale_by_rms and scale_by_stddev, and their check."""

    _abstract = True

    decay: Any = hyper(default=0.9, valid=UNIT)
    eps: Any = hyper(default=1e-8, valid=NONNEGATIVE)
    initial_scale: Any = hyper(default=0.0, valid=NONNEGATIVE)
    eps_in_sqrt: bool = static_field(default=True)
    bias_correction: bool = static_field(default=False)

    def __check_init__(self):
        check_rms_decay(self)


class scale_by_rms(_ByMovingSquares):
    """Divides updates by the root of a moving average of their squares.

    The direction of :class:`rmsprop`, see there for the update rule. With
    `decay=b2, eps_in_sqrt=False, bias_correction=True` it equals
    :class:`scale_by_adam` with `b1=0` and keeps no first moment.

    Args:
      decay: decay of the moving average, in [0, 1] ([0, 1) with bias
        correction).
      eps: added to the denominator, >= 0.
      initial_scale: starting value of the moving average, >= 0.
      eps_in_sqrt: add `eps` inside the square root (else outside).
      bias_correction: divide the moving average by :math:`1 - \\text{decay}^t`.
    """

    def init_state(self, params):
        nu = gtree.full_like(params, self.initial_scale)
        if self.bias_correction:
            return ScaleByRmsWithCountState(count=zero_count(), nu=nu)
        return ScaleByRmsState(nu=nu)

    def update_state(self, updates, state, params=None, **extra_args):
        nu = gtree.update_moment_per_elem_norm(updates, state.nu, self.decay, 2)
        if self.bias_correction:
            count = safe_increment(state.count)
            nu_hat = gtree.bias_correction(nu, self.decay, count)
            new_state = ScaleByRmsWithCountState(count=count, nu=nu)
        else:
            nu_hat = nu
            new_state = ScaleByRmsState(nu=nu)
        scaling = jax.tree.map(_inverse_root(self.eps, self.eps_in_sqrt), nu_hat)
        new_updates = jax.tree.map(lambda s, g: s * g, scaling, updates)
        return new_updates, new_state


class scale_by_stddev(_ByMovingSquares):
    """Divides updates by a moving estimate of their standard deviation.

    The direction of the centered :class:`rmsprop`, see there for the update
    rule.

    Args:
      decay: decay of the moving averages, in [0, 1] ([0, 1) with bias
        correction).
      eps: added to the denominator, >= 0.
      initial_scale: starting value of the moving average of squares, >= 0.
      eps_in_sqrt: add `eps` inside the square root (else outside).
      bias_correction: divide both moving averages by
        :math:`1 - \\text{decay}^t`.
    """

    def init_state(self, params):
        mu = gtree.zeros_like(params)
        nu = gtree.full_like(params, self.initial_scale)
        if self.bias_correction:
            return ScaleByRStdDevWithCountState(count=zero_count(), mu=mu, nu=nu)
        return ScaleByRStdDevState(mu=mu, nu=nu)

    def update_state(self, updates, state, params=None, **extra_args):
        decay = self.decay
        mu = gtree.update_moment(updates, state.mu, decay, 1)
        nu = gtree.update_moment_per_elem_norm(updates, state.nu, decay, 2)
        if self.bias_correction:
            count = safe_increment(state.count)
            mu_hat = gtree.bias_correction(mu, decay, count)
            nu_hat = gtree.bias_correction(nu, decay, count)
            new_state = ScaleByRStdDevWithCountState(count=count, mu=mu, nu=nu)
        else:
            mu_hat, nu_hat = mu, nu
            new_state = ScaleByRStdDevState(mu=mu, nu=nu)
        inverse_root = _inverse_root(self.eps, self.eps_in_sqrt)
        # The variance n - |m|^2 is never negative in exact arithmetic; in
        # floats it can be, by a rounding (on the first bias-corrected step it
        # is exactly 0), and its root would be NaN. optax has that NaN.
        variance = jax.tree.map(
            lambda m, n: jnp.maximum(n - abs_sq(m), 0), mu_hat, nu_hat
        )
        scaling = jax.tree.map(inverse_root, variance)
        new_updates = jax.tree.map(lambda s, g: s * g, scaling, updates)
        return new_updates, new_state
