"""Gradient accumulation over mini-steps: MultiSteps and its skip predicates."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp

from .. import tree as gtree
from .._core.declarations import PERIOD, hyper
from .._core.hyper import resolve
from .._core.numerics import abs_sq, safe_increment
from .._core.protocol import (
    GradientTransformation,
    TransformationLike,
    transformation_field,
    zero_count,
)
from .._core.pytree import static_field
from ._wrapping import cond_update


class ShouldSkipUpdateFunction(Protocol):
    """Decides whether :class:`MultiSteps` ignores a mini-step's gradients.

    Called as `fn(updates, gradient_step, params)`; returns a boolean scalar
    array (True: skip this mini-step) and a pytree of arrays that is stored in
    :attr:`MultiStepsState.skip_state` (its types must not change between
    calls).
    """

    def __call__(
        self, updates: Any, gradient_step: jax.Array, params: Any
    ) -> tuple[jax.Array, Any]: ...


def _leaf_count_not_finite(x: Any) -> jax.Array:
    return jnp.sum(jnp.logical_not(jnp.isfinite(x)))


def skip_not_finite(
    updates: Any, gradient_step: Any, params: Any
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Skip a mini-step whose gradients hold a NaN or an infinity.

    A :class:`ShouldSkipUpdateFunction` for :class:`MultiSteps`.

    Args:
      updates: the mini-step's gradients.
      gradient_step: the current gradient step (unused).
      params: the parameters (unused).

    Returns:
      `(should_skip, info)`: a boolean scalar, and a dict with
      `should_skip` and `num_not_finite` (int32, the number of non-finite
      elements).

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> skip, info = gradax.skip_not_finite({"w": jnp.array([1.0, jnp.nan])}, 0, None)
      >>> bool(skip), int(info["num_not_finite"])
      (True, 1)
    """
    del gradient_step, params
    num_not_finite = jnp.zeros([], jnp.int32)
    for leaf in jax.tree.leaves(updates):
        num_not_finite = num_not_finite + _leaf_count_not_finite(leaf).astype(jnp.int32)
    should_skip = num_not_finite > 0
    return should_skip, {"should_skip": should_skip, "num_not_finite": num_not_finite}


def _squared_magnitude(x: Any) -> jax.Array:
    return jnp.sum(abs_sq(jnp.asarray(x)))


def skip_large_updates(
    updates: Any, gradient_step: Any, params: Any, max_squared_norm: Any
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Skip a mini-step whose gradients' squared global norm is too large.

    Bind `max_squared_norm` with `functools.partial` to get a
    :class:`ShouldSkipUpdateFunction` for :class:`MultiSteps`. A NaN norm is
    skipped too.

    Args:
      updates: the mini-step's gradients.
      gradient_step: the current gradient step (unused).
      params: the parameters (unused).
      max_squared_norm: the largest accepted :math:`\\|g\\|_2^2` (exclusive).

    Returns:
      `(should_skip, info)`: a boolean scalar, and a dict with
      `should_skip` and `norm_squared`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> skip, info = gradax.skip_large_updates(jnp.array([3.0, 4.0]), 0, None, 10.0)
      >>> bool(skip), float(info["norm_squared"])
      (True, 25.0)
    """
    del gradient_step, params
    per_leaf = [_squared_magnitude(x) for x in jax.tree.leaves(updates)]
    norm_squared = jnp.sum(jnp.array(per_leaf)) if per_leaf else jnp.zeros([])
    should_skip = jnp.logical_not(norm_squared < max_squared_norm)
    return should_skip, {"should_skip": should_skip, "norm_squared": norm_squared}


def _never_skip(updates: Any, gradient_step: Any, params: Any):
    del updates, gradient_step, params
    return jnp.array(False), ()


class MultiStepsState(NamedTuple):
    """State of :class:`MultiSteps`."""

    mini_step: jax.Array  # int32 scalar: mini-steps accumulated so far
    gradient_step: jax.Array  # int32 scalar: inner updates done so far
    inner_opt_state: Any  # the wrapped optimizer's state
    acc_grads: Any  # like params (accumulator_dtype)
    skip_state: Any = ()  # what should_skip_update_fn returned last


class MultiSteps(GradientTransformation):
    r"""Accumulates gradients over `k` mini-steps, then updates once.

    At every mini-step the gradients :math:`g` are added to an accumulator
    :math:`a` (a running mean :math:`a \leftarrow a + (g - a)/(n + 1)` with
    `use_grad_mean`, else a sum). On the `k`-th mini-step the inner
    optimizer is applied to :math:`a` and its updates are returned, and the
    accumulator is reset; on the other mini-steps the updates are zeros and the
    inner optimizer does not run. `k` may follow a schedule of the
    gradient step (how many inner updates were done), which grows the
    effective batch size during training.

    A mini-step for which `should_skip_update_fn` returns True is ignored: no
    counter, accumulator or inner state changes, and the updates are zeros.

    Differences from optax: the inner optimizer only runs on the mini-steps
    that emit (optax runs it every mini-step and discards the result); the
    accumulator is reset with a select, so a non-finite value does not stick
    in it after it was emitted; `gradient_transformation()` returns the
    object itself, which already is a transformation.

    Args:
      opt: the wrapped optimizer (gradax or optax).
      every_k_schedule: `k`, an integer >= 1, or a function of the gradient
        step returning one.
      use_grad_mean: average the accumulated gradients (else sum them).
      should_skip_update_fn: an optional :class:`ShouldSkipUpdateFunction`,
        e.g. :func:`skip_not_finite`.
      accumulator_dtype: dtype of the accumulator (None: the params').

    Returns:
      A transformation with state :class:`MultiStepsState`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.MultiSteps(gradax.scale(-0.1), every_k_schedule=2)
      >>> params = jnp.array([1.0, 2.0])
      >>> state = tx.init(params)
      >>> updates, state = tx.update(jnp.array([1.0, 2.0]), state)
      >>> updates, bool(tx.has_updated(state))
      (Array([0., 0.], dtype=float32), False)
      >>> updates, state = tx.update(jnp.array([3.0, 4.0]), state)  # mean: [2, 3]
      >>> updates, bool(tx.has_updated(state))
      (Array([-0.2, -0.3], dtype=float32), True)
    """

    opt: TransformationLike = transformation_field()
    every_k_schedule: Any = hyper(valid=PERIOD)
    use_grad_mean: bool = static_field(default=True)
    should_skip_update_fn: Callable[..., Any] | None = static_field(default=None)
    accumulator_dtype: Any = static_field(default=jnp.float32)

    # every_k_schedule is a function of gradient_step, not of the update count.
    _self_resolved = ("every_k_schedule",)

    @property
    def inner_opt(self) -> GradientTransformation:
        """The wrapped optimizer."""
        # transformation_field's converter made it a gradax transformation
        # (an optax one wrapped), whatever the field's declared type says.
        assert isinstance(self.opt, GradientTransformation)
        return self.opt

    def _skip_fn(self) -> Callable[..., Any]:
        fn = self.should_skip_update_fn
        return _never_skip if fn is None else fn

    def _accumulator_dtype(self) -> Any:
        if self.accumulator_dtype is None:
            return None
        return jax.dtypes.canonicalize_dtype(self.accumulator_dtype)

    def _zero_accumulator(self, param: Any) -> jax.Array:
        dtype = self._accumulator_dtype()
        if dtype is not None and jnp.iscomplexobj(param):
            # Differences from optax: a real accumulator would drop the
            # imaginary part of complex gradients; use the complex dtype of
            # the accumulator's precision instead.
            dtype = jnp.result_type(dtype, jnp.complex64)
        return jnp.zeros_like(param, dtype=dtype)

    def init_state(self, params):
        gradient_step = zero_count()
        _, skip_state = self._skip_fn()(gtree.zeros_like(params), gradient_step, params)
        return MultiStepsState(
            mini_step=zero_count(),
            gradient_step=gradient_step,
            inner_opt_state=self.opt.init(params),
            acc_grads=jax.tree.map(self._zero_accumulator, params),
            skip_state=skip_state,
        )

    def update_state(self, updates, state, params=None, **extra_args):
        k = resolve(self.every_k_schedule, state.gradient_step)
        skip, skip_state = self._skip_fn()(updates, state.gradient_step, params)
        skip = jnp.asarray(skip)
        if (skip.dtype, skip.shape) != (jnp.bool_, ()):
            raise ValueError(
                "MultiSteps: should_skip_update_fn must return a boolean scalar "
                f"array first, got dtype {skip.dtype} and shape {skip.shape}"
            )

        n = state.mini_step
        if self.use_grad_mean:
            accumulated = jax.tree.map(
                lambda g, a: a + (g - a) / (n + 1), updates, state.acc_grads
            )
        else:
            accumulated = jax.tree.map(lambda g, a: g + a, updates, state.acc_grads)

        emit = jnp.logical_and(jnp.logical_not(skip), n == k - 1)
        new_updates, inner_state = cond_update(
            emit,
            self.opt,
            gtree.cast_like(accumulated, updates),
            state.inner_opt_state,
            params,
            extra_args,
            on_skip="zeros",
            owner="MultiSteps",
        )
        acc_grads = jax.tree.map(
            lambda old, new: jnp.where(skip, old, jnp.where(emit, 0, new)),
            state.acc_grads,
            accumulated,
        )
        return new_updates, MultiStepsState(
            mini_step=jnp.where(skip, n, safe_increment(n) % k),
            gradient_step=jnp.where(
                emit, safe_increment(state.gradient_step), state.gradient_step
            ),
            inner_opt_state=inner_state,
            acc_grads=acc_grads,
            skip_state=skip_state,
        )

    def has_updated(self, state: MultiStepsState) -> jax.Array:
        """Whether the last update emitted the inner optimizer's updates.

        Args:
          state: the state this transformation's `update` returned.
        """
        return jnp.logical_and(state.mini_step == 0, state.gradient_step > 0)

    def gradient_transformation(self) -> MultiSteps:
        """The transformation itself (optax returns an init/update pair)."""
        return self
