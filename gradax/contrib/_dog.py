"""DoG and DoWG: step sizes from the distance travelled from the start."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .. import tree as gtree
from .._core.declarations import (
    LEARNING_RATE,
    NONNEGATIVE,
    POSITIVE,
    HyperparameterError,
    OneOf,
    hyper,
)
from .._core.numerics import real_dtype
from .._core.protocol import Alias, GradientTransformation, LearningRateAlias
from .._core.pytree import Module, field, static_field
from .._core.simple import identity
from .._core.treecheck import require_params
from ..combinators.chain import chain
from ..transforms.scaling import scale_by_learning_rate
from ..transforms.weight_decay import add_decayed_weights

_INIT_STEP_KINDS = ("distance", "learning_rate", "heuristic")


def _decay_if_given(weight_decay: Any, mask: Any) -> Any:
    """dog's and dowg's weight decay: none (identity) when `weight_decay` is None."""
    if weight_decay is None:
        return identity()
    return add_decayed_weights(weight_decay, mask)


class DogInitStep(Module):
    """DoG's first step, `(kind, value)`; reads like that 2-tuple.

    Made from the tuple a user passes as `init_step`: the kind is static,
    the value a pytree leaf.

    Args:
      kind: `"distance"`, `"learning_rate"` or `"heuristic"` (see
        :class:`dog`).
      value: the distance, first step size or relative distance, > 0.
    """

    kind: str = hyper(valid=OneOf(_INIT_STEP_KINDS), static=True)
    value: Any = hyper(default=1e-6, valid=POSITIVE, schedule=False)

    def __iter__(self):
        return iter((self.kind, self.value))

    def __getitem__(self, index: int) -> Any:
        return (self.kind, self.value)[index]

    def __len__(self) -> int:
        return 2

    def __repr__(self) -> str:
        return repr((self.kind, self.value))


def _as_init_step(init_step: Any) -> DogInitStep:
    if isinstance(init_step, DogInitStep):
        return init_step
    try:
        kind, value = init_step
    except (TypeError, ValueError):
        raise ValueError(
            f"init_step must be a (kind, value) pair, got {init_step!r}"
        ) from None
    try:
        return DogInitStep(kind, value)
    except HyperparameterError as error:
        # The user's argument is init_step: "init_step kind must be ...".
        raise HyperparameterError(f"init_step {error}") from None


class DoGState(NamedTuple):
    """State of :class:`scale_by_dog`."""

    is_init_step: jax.Array  # bool scalar: no update done yet
    init_params: Any  # the parameters at init
    max_dist: jax.Array  # scalar: largest distance from init_params so far
    sum_sq_norm_grads: jax.Array  # scalar: sum of squared gradient norms


class scale_by_dog(GradientTransformation):
    """The DoG step size times the gradient. See :class:`dog`.

    Args:
      init_step: `(kind, value)`; see :class:`dog`.
      eps: added under the square root, >= 0.
    """

    # A DogInitStep, checked by its own declarations.
    init_step: Any = field(converter=lambda value, name: _as_init_step(value))
    eps: Any = hyper(default=1e-8, valid=NONNEGATIVE)

    def init_state(self, params):
        dtype = real_dtype(gtree.dtype(params, "lowest"))
        kind, value = self.init_step
        if kind == "distance":
            r_eps = value
        elif kind == "heuristic":
            r_eps = value * (1 + gtree.norm(params))
        else:
            r_eps = 0.0
        return DoGState(
            is_init_step=jnp.asarray(True),
            init_params=jax.tree.map(jnp.array, params),
            max_dist=jnp.asarray(r_eps, dtype=dtype),
            sum_sq_norm_grads=jnp.zeros([], dtype),
        )

    def update_state(self, updates, state, params=None, **extra_args):
        require_params(params, "scale_by_dog")
        dist = gtree.norm(gtree.sub(state.init_params, params))
        max_dist = jnp.maximum(state.max_dist, dist)
        sum_sq = state.sum_sq_norm_grads + gtree.norm(updates, squared=True)
        step_size = max_dist / jnp.sqrt(sum_sq + self.eps)
        kind, value = self.init_step
        if kind == "learning_rate":
            step_size = jnp.where(state.is_init_step, value, step_size)
        new_updates = jax.tree.map(lambda g: step_size * g, updates)
        return new_updates, DoGState(
            is_init_step=jnp.asarray(False),
            init_params=state.init_params,
            max_dist=max_dist,
            sum_sq_norm_grads=sum_sq,
        )


class dog(Alias):
    r"""DoG: distance over gradients, a parameter-free SGD step size.

    With gradient :math:`g_t` (weight decay added first), start :math:`x_0`:

    .. math::
      \bar r_t = \max(\bar r_{t-1}, \|x_t - x_0\|),\quad
      G_t = G_{t-1} + \|g_t\|^2,\quad
      u_t = -\eta_t \frac{\bar r_t}{\sqrt{G_t + \epsilon}}\, g_t,

    norms over the whole parameter tree. `init_step = (kind, value)` sets
    :math:`\bar r_0`: `("distance", r)` gives :math:`r`;
    `("heuristic", c)` gives :math:`c (1 + \|x_0\|)`; `("learning_rate",
    s)` makes the first step size :math:`s` (and :math:`\bar r_0 = 0`).

    Args:
      learning_rate: :math:`\eta`, a multiplier (1 in the paper) or schedule.
      init_step: `(kind, value)` as above, value > 0.
      eps: :math:`\epsilon`, >= 0.
      weight_decay: None for none, else >= 0 (added as :math:`\lambda x_t`).
      mask: a tree of booleans like the params (or a function of the params
        returning one) selecting the leaves that decay.

    Returns:
      The optimizer, a gradient transformation; `update` needs `params`, to
      measure :math:`\|x_t - x_0\|`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.dog(init_step=("learning_rate", 0.1))
      >>> params = jnp.array([1.0, -2.0])
      >>> state = tx.init(params)
      >>> for _ in range(3):  # 0.1, then the distance from the start over the gradients
      ...     updates, state = tx.update(2 * params, state, params)
      ...     params = gradax.apply_updates(params, updates)
      ...     print(params)
      [ 0.8 -1.6]
      [ 0.6751 -1.3501]
      [ 0.5235 -1.0471 ]

    Differences from optax: `init_step` is checked when built (optax checks
    the kind at init) and kept as a :class:`DogInitStep`, which reads like the
    tuple; the scalar state is real for complex parameters.

    References:
      Ivgi, Hinder and Carmon, DoG is SGD's Best Friend: A Parameter-Free
      Dynamic Step Size Schedule, ICML 2023 (arXiv:2302.12022).
    """

    learning_rate: Any = hyper(default=1.0, valid=LEARNING_RATE)
    init_step: Any = field(
        default=("heuristic", 1e-6), converter=lambda value, name: _as_init_step(value)
    )
    eps: Any = hyper(default=1e-8, valid=NONNEGATIVE)
    weight_decay: Any = hyper(default=None, valid=NONNEGATIVE)
    mask: Any = static_field(default=None)

    def build(self):
        return chain(
            _decay_if_given(self.weight_decay, self.mask),
            scale_by_dog(self.init_step, self.eps),
            scale_by_learning_rate(self.learning_rate),
        )


class DoWGState(NamedTuple):
    """State of :class:`scale_by_dowg`."""

    init_params: Any  # the parameters at init
    weighted_sq_norm_grads: jax.Array  # scalar
    estim_sq_dist: jax.Array  # scalar: largest squared distance so far


class _DowgOptions(Module):
    """The options of scale_by_dowg and dowg."""

    _abstract = True

    init_estim_sq_dist: Any = hyper(default=None, valid=POSITIVE)
    eps: Any = hyper(default=0.0001, valid=NONNEGATIVE)


class scale_by_dowg(_DowgOptions, GradientTransformation):
    """The DoWG step size times the gradient. See :class:`dowg`.

    Args:
      init_estim_sq_dist: the initial squared distance (None: `eps`).
      eps: added to the denominator, >= 0.
    """

    def init_state(self, params):
        dtype = real_dtype(gtree.dtype(params, "lowest"))
        start = self.eps if self.init_estim_sq_dist is None else self.init_estim_sq_dist
        return DoWGState(
            init_params=jax.tree.map(jnp.array, params),
            weighted_sq_norm_grads=jnp.zeros([], dtype),
            estim_sq_dist=jnp.asarray(start, dtype=dtype),
        )

    def update_state(self, updates, state, params=None, **extra_args):
        require_params(params, "scale_by_dowg")
        sq_dist = gtree.norm(gtree.sub(state.init_params, params), squared=True)
        estim_sq_dist = jnp.maximum(state.estim_sq_dist, sq_dist)
        weighted = (
            estim_sq_dist * gtree.norm(updates, squared=True)
            + state.weighted_sq_norm_grads
        )
        step_size = estim_sq_dist / (jnp.sqrt(weighted) + self.eps)
        new_updates = jax.tree.map(lambda g: step_size * g, updates)
        return new_updates, DoWGState(
            init_params=state.init_params,
            weighted_sq_norm_grads=weighted,
            estim_sq_dist=estim_sq_dist,
        )


class dowg(_DowgOptions, LearningRateAlias):
    r"""DoWG: distance over weighted gradients, a parameter-free step size.

    With gradient :math:`g_t` (weight decay added first), start :math:`x_0`:

    .. math::
      \bar r_t^2 = \max(\bar r_{t-1}^2, \|x_t - x_0\|^2),\quad
      v_t = v_{t-1} + \bar r_t^2 \|g_t\|^2,\quad
      u_t = -\eta_t \frac{\bar r_t^2}{\sqrt{v_t} + \epsilon}\, g_t,

    norms over the whole parameter tree, :math:`\bar r_0^2` =
    `init_estim_sq_dist` (default :math:`\epsilon`).

    Args:
      learning_rate: :math:`\eta`, a multiplier (1 in the paper) or schedule.
      init_estim_sq_dist: :math:`\bar r_0^2 > 0`, or None for :math:`\epsilon`.
      eps: :math:`\epsilon`, >= 0.
      weight_decay: None for none, else >= 0 (added as :math:`\lambda x_t`).
      mask: a tree of booleans like the params (or a function of the params
        returning one) selecting the leaves that decay.

    Returns:
      The optimizer, a gradient transformation; `update` needs `params`
      (:math:`\bar r_t^2` is their squared distance from :math:`x_0`).

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.dowg(init_estim_sq_dist=0.25)
      >>> params = jnp.array([1.0, -2.0])
      >>> updates, _ = tx.update(2 * params, tx.init(params), params)
      >>> jnp.linalg.norm(updates)  # the first step's length: sqrt(init_estim_sq_dist)
      Array(0.5, dtype=float32)

    Differences from optax: the scalar state is real for complex parameters.

    References:
      Khaled, Mishchenko and Jin, DoWG Unleashed: An Efficient Universal
      Parameter-Free Gradient Descent Method, NeurIPS 2023 (arXiv:2305.16284).
    """

    learning_rate: Any = 1.0  # dowg's default (declared by LearningRateAlias)
    weight_decay: Any = hyper(default=None, valid=NONNEGATIVE)
    mask: Any = static_field(default=None)

    def build(self):
        return chain(
            _decay_if_given(self.weight_decay, self.mask),
            self.part(scale_by_dowg),
            scale_by_learning_rate(self.learning_rate),
        )
