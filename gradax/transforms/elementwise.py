"""Leaf-by-leaf edits of the updates: add_noise, centralize, zero_nans, and
keep_params_nonnegative."""

from __future__ import annotations

import dataclasses
from dataclasses import KW_ONLY
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .. import tree as gtree
from .._core.declarations import NONNEGATIVE, Range, Shared, hyper
from .._core.numerics import safe_increment
from .._core.protocol import EmptyState, GradientTransformation, zero_count

NonNegativeParamsState = EmptyState


class AddNoiseState(NamedTuple):
    """State of :class:`add_noise`."""

    count: jax.Array  # int32 scalar: number of updates so far
    rng_key: jax.Array  # typed PRNG key (jax.random.key)


def _as_key(key_or_seed: Any) -> jax.Array:
    """A typed PRNG key from a key, raw key data, or an integer seed."""
    if isinstance(key_or_seed, jax.Array):
        if jax.dtypes.issubdtype(key_or_seed.dtype, jax.dtypes.prng_key):
            return key_or_seed
        if key_or_seed.dtype == jnp.uint32 and key_or_seed.ndim == 1:
            return jax.random.wrap_key_data(key_or_seed)  # jax.random.PRNGKey
    return jax.random.key(key_or_seed)


# The randomness of a transformation that draws noise (add_noise, noisy_sgd,
# differentially_private_aggregate), declared once: a PRNG key, made in
# `init`, or the older spelling, an integer seed; keyword-only after
# `_: KW_ONLY` in each class.
KEY_OR_SEED = Shared(
    key=dataclasses.field(default=None),
    # Any integer: jax.random.key takes negative seeds too.
    seed=hyper(default=None, valid=Range(integer=True), static=True),
)


def check_key_or_seed(tx: Any, name: str) -> None:
    """Refuses `tx` (`name` in the message) given both a key and a seed."""
    if tx.seed is not None and tx.key is not None:
        raise ValueError(f"{name}: give key or seed, not both")


class add_noise(GradientTransformation):
    r"""Adds annealed Gaussian noise to the updates.

    At step :math:`t \ge 1`, :math:`u_t = g_t + \sigma_t z_t` with
    :math:`z_t \sim \mathcal N(0, I)` drawn in the dtype of each leaf and
    :math:`\sigma_t = \sqrt{\eta / t^{\gamma}}`.

    Args:
      eta: :math:`\eta`, the noise variance at the first step, >= 0.
      gamma: :math:`\gamma`, the annealing exponent, >= 0.
      key: a PRNG key (`jax.random.key`, or raw `jax.random.PRNGKey`
        data) or an integer seed; None means seed 0. The key is made in
        `init`, not here.
      seed: an integer seed (any integer), the older spelling of `key`
        (give one or the other).

    Returns:
      A transformation whose state is an :class:`AddNoiseState`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.add_noise(0.01, 0.55, key=0)
      >>> u, state = tx.update(jnp.zeros(3), tx.init(jnp.zeros(3)))
      >>> u.shape, int(state.count)
      ((3,), 1)

    References:
      Neelakantan et al., Adding Gradient Noise Improves Learning for Very
      Deep Networks, 2015 (arXiv:1511.06807).
    """

    eta: Any = hyper(valid=NONNEGATIVE)
    gamma: Any = hyper(valid=NONNEGATIVE)
    key: Any = KEY_OR_SEED.field()
    _: KW_ONLY
    seed: int | None = KEY_OR_SEED.field()

    def __check_init__(self):
        check_key_or_seed(self, "add_noise")

    def init_state(self, params):
        del params
        seed = self.seed if self.seed is not None else 0
        key = _as_key(self.key if self.key is not None else seed)
        return AddNoiseState(count=zero_count(), rng_key=key)

    def update_state(self, updates, state, params=None, **extra_args):
        count = safe_increment(state.count)
        std = jnp.sqrt(self.eta / count**self.gamma)
        rng_key, sample_key = jax.random.split(state.rng_key)
        noise = gtree.random_like(sample_key, updates, jax.random.normal)

        def add(g, z):
            # Promote explicitly (bfloat16 grads meet a float32 std).
            dtype = jnp.promote_types(g.dtype, std.dtype)
            return g.astype(dtype) + std.astype(dtype) * z.astype(dtype)

        updates = jax.tree.map(
            lambda g, z: None if g is None else add(g, z),
            updates,
            noise,
            is_leaf=lambda x: x is None,
        )
        return updates, AddNoiseState(count=count, rng_key=rng_key)


def _subtract_mean(g: jax.Array) -> jax.Array:
    if g.ndim < 2:
        return g
    return g - g.mean(axis=tuple(range(1, g.ndim)), keepdims=True)


class centralize(GradientTransformation):
    """Gradient centralization: subtracts from each row its mean.

    A leaf of rank 2 or more loses its mean over all axes but the first;
    scalars and vectors are left as they are.

    Returns:
      A transformation with an empty state.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.centralize()
      >>> tx.update(jnp.array([[1.0, 2.0, 3.0], [4.0, 6.0, 8.0]]), tx.init(None))[0]
      Array([[-1.,  0.,  1.],
             [-2.,  0.,  2.]], dtype=float32)

    References:
      Yong et al., Gradient Centralization: A New Optimization Technique for
      Deep Neural Networks, ECCV 2020 (arXiv:2004.01461).
    """

    def update_state(self, updates, state, params=None, **extra_args):
        return jax.tree.map(_subtract_mean, updates), state


class ZeroNansState(NamedTuple):
    """State of :class:`zero_nans`: per leaf, whether the last update had a NaN."""

    found_nan: Any  # a tree like the params of bool scalars


class zero_nans(GradientTransformation):
    """Replaces NaNs in the updates by zeros, and records where it found some.

    The state holds, for each leaf, a boolean: whether the last update's leaf
    had a NaN. It is for monitoring; the transformation does not read it.

    Returns:
      A transformation whose state is a :class:`ZeroNansState`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.zero_nans()
      >>> u, state = tx.update(jnp.array([1.0, jnp.nan]), tx.init(jnp.zeros(2)))
      >>> u, state.found_nan
      (Array([1., 0.], dtype=float32), Array(True, dtype=bool))
    """

    def init_state(self, params):
        return ZeroNansState(
            found_nan=jax.tree.map(lambda _: jnp.zeros([], jnp.bool_), params)
        )

    def update_state(self, updates, state, params=None, **extra_args):
        found = jax.tree.map(lambda g: jnp.any(jnp.isnan(g)), updates)
        updates = jax.tree.map(
            lambda g: jnp.where(jnp.isnan(g), jnp.zeros_like(g), g), updates
        )
        return updates, ZeroNansState(found_nan=found)


class keep_params_nonnegative(GradientTransformation):
    """Changes the updates so that no parameter goes below zero.

    Where `params + updates < 0` the update becomes `-params` (the
    parameter lands on 0). Put it last in a chain, after the learning rate.
    Parameters that are already negative are moved to 0.

    Returns:
      A transformation with an empty state; `update` needs `params`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.keep_params_nonnegative()
      >>> p = jnp.array([1.0, 2.0])
      >>> tx.update(jnp.array([-3.0, -1.0]), tx.init(p), p)[0]
      Array([-1., -1.], dtype=float32)
    """

    def update_state(self, updates, state, params=None, **extra_args):
        if params is None:
            raise ValueError("keep_params_nonnegative needs params passed to update")
        updates = jax.tree.map(
            lambda p, u: None if p is None else jnp.where(p + u < 0.0, -p, u),
            params,
            updates,
            is_leaf=lambda x: x is None,
        )
        return updates, state
