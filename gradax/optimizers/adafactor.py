"""Adafactor: rescaling by a factored (row x column) second-moment estimate."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._core.declarations import (
    ANY,
    LEARNING_RATE,
    NONNEGATIVE,
    POSITIVE_INT,
    UNIT,
    hyper,
)
from .._core.numerics import abs_sq, safe_increment
from .._core.protocol import Alias, GradientTransformation, zero_count
from .._core.pytree import static_field
from ..combinators.chain import chain
from ..transforms.clipping import clip_by_block_rms
from ..transforms.momentum import ema
from ..transforms.scaling import scale, scale_by_learning_rate
from ..transforms.trust_ratio import scale_by_param_block_rms
from ..transforms.weight_decay import add_decayed_weights


def _decay_rate_pow(step: Any, exponent: Any = 0.8) -> jax.Array:
    """Adafactor's second-moment decay at `step` (from 0): `1 - (step+1)^-e`."""
    t = jnp.array(step + 1, jnp.float32)
    return 1.0 - t ** (-exponent)


def _factored_dims(
    shape: tuple[int, ...], factored: bool, min_dim_size_to_factor: int
) -> tuple[int, int] | None:
    """The (second largest, largest) axes to factor over, or None."""
    if not factored or len(shape) < 2:
        return None
    order = np.argsort(shape)
    if shape[order[-2]] < min_dim_size_to_factor:
        return None
    return int(order[-2]), int(order[-1])


def _zeros_without_axis(x: jax.Array, axis: int) -> jax.Array:
    # Shaped (and, with sharding in types, sharded) like ``x`` summed on ``axis``.
    return jnp.zeros_like(jax.eval_shape(lambda y: jnp.sum(y, axis=axis), x))


class FactoredState(NamedTuple):
    """State of :class:`scale_by_factored_rms`.

    Leaves that are not factored hold shape-(1,) zeros in `v_row` and
    `v_col`; factored ones hold shape-(1,) zeros in `v`.
    """

    count: jax.Array  # int32 scalar
    v_row: Any  # per leaf: the second moment averaged over the largest axis
    v_col: Any  # per leaf: averaged over the second largest axis
    v: Any  # per leaf: the full second moment (unfactored leaves)


class scale_by_factored_rms(GradientTransformation):
    """Rescales updates by a factored estimate of their root mean square.

    The direction of :class:`adafactor`, see there for the update rule.
    `update` needs `params`.

    Args:
      factored: factor the second moment of leaves of rank >= 2.
      decay_rate: the exponent of the decay schedule `decay_rate_fn`, >= 0.
      step_offset: subtracted from the step count before the decay schedule
        (e.g. the first step of a fine-tuning phase), any number; the decay
        is NaN at steps below `step_offset - 1`, so a positive offset is for
        a state that has counted past it.
      min_dim_size_to_factor: factor a leaf only if its two largest axes are
        at least this long, an integer >= 1.
      epsilon: added to the squared updates, >= 0.
      decay_rate_fn: `f(step, decay_rate) -> decay` (default
        `1 - (step + 1) ** -decay_rate`).
    """

    factored: bool = static_field(default=True)
    decay_rate: Any = hyper(default=0.8, valid=NONNEGATIVE)
    step_offset: Any = hyper(default=0, valid=ANY)
    min_dim_size_to_factor: int = hyper(default=128, valid=POSITIVE_INT, static=True)
    epsilon: Any = hyper(default=1e-30, valid=NONNEGATIVE)
    decay_rate_fn: Callable[[Any, Any], Any] = static_field(default=_decay_rate_pow)

    def _dims(self, shape: tuple[int, ...]) -> tuple[int, int] | None:
        return _factored_dims(shape, self.factored, self.min_dim_size_to_factor)

    def init_state(self, params):
        def placeholder(p):
            return jnp.zeros((1,), p.dtype)

        def init_leaf(p):
            dims = self._dims(p.shape)
            if dims is None:
                return placeholder(p), placeholder(p), jnp.zeros_like(p)
            d1, d0 = dims
            rows, cols = _zeros_without_axis(p, d0), _zeros_without_axis(p, d1)
            return rows, cols, placeholder(p)

        leaves, treedef = jax.tree.flatten(params)
        parts = [init_leaf(p) for p in leaves]
        return FactoredState(
            count=zero_count(),
            v_row=treedef.unflatten([r for r, _, _ in parts]),
            v_col=treedef.unflatten([c for _, c, _ in parts]),
            v=treedef.unflatten([v for _, _, v in parts]),
        )

    def update_state(self, updates, state, params=None, **extra_args):
        if params is None:
            raise ValueError("scale_by_factored_rms needs params passed to update")
        decay = self.decay_rate_fn(state.count - self.step_offset, self.decay_rate)
        eps = self.epsilon

        def update_leaf(g, v_row, v_col, v, p):
            dtype = p.dtype
            g_sq = abs_sq(g) + eps
            dims = self._dims(p.shape)
            empty = jnp.zeros((1,), dtype)
            if dims is None:
                v = (decay * v + (1.0 - decay) * g_sq).astype(dtype)
                return g * v**-0.5, empty, empty, v
            d1, d0 = dims
            v_row = decay * v_row + (1.0 - decay) * jnp.mean(g_sq, axis=d0)
            v_col = decay * v_col + (1.0 - decay) * jnp.mean(g_sq, axis=d1)
            v_row, v_col = v_row.astype(dtype), v_col.astype(dtype)
            row_axis = d1 - 1 if d1 > d0 else d1  # d1 in v_row, which lacks d0
            row_mean = jnp.mean(v_row, axis=row_axis, keepdims=True)
            row_factor = (v_row / row_mean) ** -0.5
            col_factor = v_col**-0.5
            new_g = (
                g
                * jnp.expand_dims(row_factor, axis=d0)
                * jnp.expand_dims(col_factor, axis=d1)
            )
            return new_g, v_row, v_col, empty

        leaves, treedef = jax.tree.flatten(updates)
        others = [
            treedef.flatten_up_to(tree)
            for tree in (state.v_row, state.v_col, state.v, params)
        ]
        parts = [update_leaf(*args) for args in zip(leaves, *others, strict=True)]
        column = [treedef.unflatten(list(c)) for c in zip(*parts, strict=True)]
        new_updates, v_row, v_col, v = column if parts else [updates] * 4
        count = safe_increment(state.count)
        return new_updates, FactoredState(count=count, v_row=v_row, v_col=v_col, v=v)


class adafactor(Alias):
    r"""Adafactor: Adam-like steps with sublinear memory.

    For a matrix leaf :math:`G_t` (its two largest axes, if both are at least
    `min_dim_size_to_factor` long), with :math:`\beta_t = 1 - (t+1)^{-c}`
    and :math:`c` = `decay_rate`:

    .. math::
      R_t = \beta_t R_{t-1} + (1 - \beta_t)\, \mathrm{mean}_{\text{cols}}
      (G_t^2 + \epsilon),\quad
      C_t = \beta_t C_{t-1} + (1 - \beta_t)\, \mathrm{mean}_{\text{rows}}
      (G_t^2 + \epsilon),\\
      \hat V_t = R_t C_t^\top / \mathrm{mean}(R_t),\quad
      U_t = G_t / \sqrt{\hat V_t};

    other leaves keep the full :math:`V_t` of :class:`rmsprop`. Then, each
    stage optional: `clip_by_block_rms(clipping_threshold)`, a factor
    :math:`\eta_t`, a factor :math:`\max(\mathrm{rms}(\theta), 10^{-3})`,
    momentum (`ema(momentum)`), weight decay, and a sign flip.

    Args:
      learning_rate: :math:`\eta`, a number, an array, a schedule, or
        None (no factor: for use with `multiply_by_parameter_scale` alone).
      min_dim_size_to_factor: factor only when both axes are this long, an
        integer >= 1.
      decay_rate: :math:`c`, >= 0.
      decay_offset: subtracted from the step count in :math:`\beta_t`
        (fine-tuning), any number; positive only for a state that has
        counted past it (see :class:`scale_by_factored_rms`).
      multiply_by_parameter_scale: multiply by the parameters' rms.
      clipping_threshold: block rms clipping threshold, >= 0, or None.
      momentum: decay of an (undebiased) moving average of the steps, in
        [0, 1], or None.
      dtype_momentum: dtype of that moving average.
      weight_decay_rate: decoupled weight decay, >= 0, or None.
      eps: :math:`\epsilon`, >= 0.
      factored: factor the second moments at all.
      weight_decay_mask: a tree of booleans like the params (or a function of
        the params returning one) selecting the leaves that decay.

    Returns:
      The optimizer, a gradient transformation; `update` needs `params`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.adafactor(0.1)
      >>> p = jnp.array([1.0, -1.0])
      >>> u, _ = tx.update(jnp.array([2.0, -4.0]), tx.init(p), p)
      >>> u
      Array([-0.1,  0.1], dtype=float32)

    References:
      Shazeer and Stern, Adafactor: Adaptive Learning Rates with Sublinear
      Memory Cost, ICML 2018 (arXiv:1804.04235).
    """

    learning_rate: Any = hyper(default=None, valid=LEARNING_RATE)
    min_dim_size_to_factor: int = hyper(default=128, valid=POSITIVE_INT, static=True)
    decay_rate: Any = hyper(default=0.8, valid=NONNEGATIVE)
    decay_offset: Any = hyper(default=0, valid=ANY)
    multiply_by_parameter_scale: bool = static_field(default=True)
    clipping_threshold: Any = hyper(default=1.0, valid=NONNEGATIVE, allow_none=True)
    momentum: Any = hyper(default=None, valid=UNIT)
    dtype_momentum: Any = static_field(default=jnp.float32)
    weight_decay_rate: Any = hyper(default=None, valid=NONNEGATIVE)
    eps: Any = hyper(default=1e-30, valid=NONNEGATIVE)
    factored: bool = static_field(default=True)
    weight_decay_mask: Any = static_field(default=None)

    def build(self):
        stages: list[GradientTransformation] = [
            scale_by_factored_rms(
                self.factored,
                self.decay_rate,
                self.decay_offset,
                self.min_dim_size_to_factor,
                self.eps,
            )
        ]
        if self.clipping_threshold is not None:
            stages.append(clip_by_block_rms(self.clipping_threshold))
        if self.learning_rate is not None:
            stages.append(scale_by_learning_rate(self.learning_rate, flip_sign=False))
        if self.multiply_by_parameter_scale:
            stages.append(scale_by_param_block_rms())
        if self.momentum is not None:
            stages.append(ema(self.momentum, False, self.dtype_momentum))
        if self.weight_decay_rate is not None:
            stages.append(
                add_decayed_weights(self.weight_decay_rate, self.weight_decay_mask)
            )
        stages.append(scale(-1))
        return chain(*stages)
