"""Differentially private SGD: per-example clipping plus Gaussian noise."""

from __future__ import annotations

from dataclasses import KW_ONLY
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._core.declarations import DECAY, LEARNING_RATE, NONNEGATIVE, Range, hyper
from .._core.protocol import Alias, GradientTransformation
from .._core.pytree import static_field
from .._core.simple import identity
from ..combinators.chain import chain
from ..transforms.clipping import per_example_global_norm_clip
from ..transforms.elementwise import KEY_OR_SEED
from ..transforms.momentum import trace
from ..transforms.scaling import scale_by_learning_rate


class DifferentiallyPrivateAggregateState(NamedTuple):
    """State of :class:`differentially_private_aggregate`."""

    rng_key: jax.Array  # a typed PRNG key, split at every update


def _as_key(key: Any) -> jax.Array:
    """A typed PRNG key from a key, a legacy uint32 key or an integer seed."""
    dtype = getattr(key, "dtype", None)
    if dtype is not None and jnp.issubdtype(dtype, jax.dtypes.prng_key):
        return key
    if dtype == jnp.uint32 and jnp.ndim(key) == 1:
        return jax.random.wrap_key_data(key)
    return jax.random.key(key)


class differentially_private_aggregate(GradientTransformation):
    r"""Clips per-example gradients, sums them, adds noise and averages.

    The incoming updates carry a leading batch axis of :math:`B` examples.
    Each example's gradient :math:`g_i` (all leaves together) is clipped to
    norm :math:`C`, and

    .. math::
      u = \frac{1}{B}\Big(\sum_i g_i \min\big(1, C / \|g_i\|\big)
      + \mathcal{N}(0, (C \sigma)^2 I)\Big),

    without the batch axis. Use it first in a chain (the later
    transformations see ordinary gradients). Aggregating combinators such as
    :class:`MultiSteps` or :class:`apply_every` do not give private sums.

    Differences from optax: `key` may also be a legacy `uint32` key; no
    deprecation warnings are raised for `seed` or a missing key.

    Args:
      l2_norm_clip: :math:`C`, the largest per-example norm, >= 0.
      noise_multiplier: :math:`\sigma`, the noise standard deviation relative
        to :math:`C`, >= 0.
      key: a PRNG key or an integer seed for the noise (default: seed 0).
      seed: an integer seed, the older spelling of `key` (keyword-only;
        give only one of them).

    Returns:
      A transformation whose state is a
      :class:`DifferentiallyPrivateAggregateState`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.contrib.differentially_private_aggregate(1.0, 0.0, key=0)
      >>> per_example = jnp.array([[3.0, 4.0], [0.3, 0.4]])
      >>> tx.update(per_example, tx.init(jnp.zeros(2)))[0]
      Array([0.45, 0.6 ], dtype=float32)

    References:
      Abadi et al., Deep Learning with Differential Privacy, CCS 2016
      (arXiv:1607.00133).
    """

    # The updates are per-example gradients, with a leading batch axis.
    _checks_update_shapes = False
    _per_example_updates = True

    l2_norm_clip: Any = hyper(valid=NONNEGATIVE)
    noise_multiplier: Any = hyper(valid=NONNEGATIVE)
    key: Any = KEY_OR_SEED.field()
    _: KW_ONLY
    seed: int | None = KEY_OR_SEED.field()

    def __check_init__(self):
        if self.seed is not None and self.key is not None:
            raise ValueError(
                "differentially_private_aggregate takes key or seed, not both; "
                f"got key={self.key!r} and seed={self.seed!r}"
            )

    def init_state(self, params):
        del params
        if self.key is not None:
            key = self.key
        else:
            key = 0 if self.seed is None else self.seed
        return DifferentiallyPrivateAggregateState(rng_key=_as_key(key))

    def update_state(self, updates, state, params=None, **extra_args):
        leaves, treedef = jax.tree.flatten(updates)
        if not leaves:  # no gradients: nothing to clip, noise or count
            return updates, state
        batch_size = leaves[0].shape[0]
        clipped, _ = per_example_global_norm_clip(leaves, self.l2_norm_clip)
        new_key, *keys = jax.random.split(state.rng_key, len(leaves) + 1)
        std = self.l2_norm_clip * self.noise_multiplier
        noisy = [
            (g + std * jax.random.normal(k, g.shape, g.dtype)) / batch_size
            for g, k in zip(clipped, keys, strict=True)
        ]
        return (
            jax.tree.unflatten(treedef, noisy),
            DifferentiallyPrivateAggregateState(rng_key=new_key),
        )


class dpsgd(Alias):
    r"""DP-SGD: SGD on privately aggregated per-example gradients.

    :class:`differentially_private_aggregate` (clip each example's gradient
    to norm :math:`C`, sum, add :math:`\mathcal{N}(0, (C\sigma)^2)` noise,
    divide by the batch size :math:`B`), then :class:`sgd`:

    .. math::
      \bar g_t = \frac{1}{B}\Big(\sum_i g_{t,i} \min\big(1, C/\|g_{t,i}\|\big)
      + \xi_t\Big),\quad u_t = -\eta_t \bar g_t

    (with momentum :math:`\mu`, :math:`\bar g_t` first goes through
    :class:`trace`). The gradients given to `update` are per-example: every
    leaf has a leading batch axis (e.g. from `jax.vmap(jax.grad(loss))`).

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule.
      l2_norm_clip: :math:`C`, the largest per-example norm, >= 0.
      noise_multiplier: :math:`\sigma`, the noise standard deviation relative
        to :math:`C`, >= 0.
      seed: the integer seed of the noise.
      momentum: :math:`\mu`, in [0, 1); None for no momentum.
      nesterov: use Nesterov momentum.

    Returns:
      The optimizer, a gradient transformation.

    Example:
      >>> import jax, jax.numpy as jnp, gradax
      >>> tx = gradax.contrib.dpsgd(0.1, l2_norm_clip=1.0, noise_multiplier=0.0,
      ...                           seed=0)
      >>> params = jnp.zeros(2)
      >>> per_example = jnp.array([[3.0, 4.0], [0.3, 0.4]])
      >>> tx.update(per_example, tx.init(params))[0]
      Array([-0.045, -0.06 ], dtype=float32)

    References:
      Abadi et al., Deep Learning with Differential Privacy, CCS 2016
      (arXiv:1607.00133).
    """

    _per_example_updates = True  # its first part aggregates per example

    learning_rate: Any = hyper(valid=LEARNING_RATE)
    l2_norm_clip: Any = hyper(valid=NONNEGATIVE)
    noise_multiplier: Any = hyper(valid=NONNEGATIVE)
    seed: int = hyper(valid=Range(integer=True), static=True)
    momentum: Any = hyper(default=None, valid=DECAY)
    nesterov: bool = static_field(default=False)

    def build(self):
        if self.momentum is None:
            accumulate = identity()
        else:
            accumulate = trace(self.momentum, self.nesterov)
        return chain(
            differentially_private_aggregate(
                self.l2_norm_clip, self.noise_multiplier, key=self.seed
            ),
            accumulate,
            scale_by_learning_rate(self.learning_rate),
        )
