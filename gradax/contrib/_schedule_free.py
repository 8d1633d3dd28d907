"""Schedule-free optimization: averaging in place of a learning-rate schedule."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .. import tree as gtree
from .._core.declarations import (
    DECAY,
    LEARNING_RATE,
    NONNEGATIVE,
    NONNEGATIVE_INT,
    Range,
    hyper,
)
from .._core.hyper import resolve
from .._core.numerics import canonical_dtype, real_dtype, safe_increment
from .._core.protocol import (
    Alias,
    GradientTransformation,
    TransformationLike,
    transformation_field,
    zero_count,
)
from .._core.pytree import static_field
from .._core.treecheck import require_params
from ..combinators.chain import chain
from ..optimizers.sgd import sgd
from ..schedules import warmup_constant_schedule
from ..transforms.rms import scale_by_rms
from ..transforms.scaling import scale_by_learning_rate
from ..transforms.weight_decay import add_decayed_weights


class ScheduleFreeState(NamedTuple):
    """State of :class:`schedule_free`."""

    b1: jax.Array  # scalar: the interpolation b1 of the last update
    weight_sum: jax.Array  # scalar: sum of the averaging weights
    step_count: jax.Array  # int32 scalar, starting at 1
    max_lr: jax.Array  # scalar: largest learning rate so far
    base_optimizer_state: Any
    z: Any  # the base optimizer's iterate, like params (state_dtype)


class schedule_free(GradientTransformation):
    r"""Schedule-free wrapper: averages the iterates of `base_optimizer`.

    The base optimizer moves :math:`z`; the parameters passed to `update`
    are the interpolation :math:`y`, and the average :math:`x` (read it with
    :func:`schedule_free_eval_params`) is what to evaluate. With base update
    :math:`\Delta_t` and step :math:`t \ge 1`:

    .. math::
      z_t = z_{t-1} + \Delta_t,\quad
      c_t = \frac{w_t}{\sum_{i \le t} w_i},\ w_t = (\max_{i \le t}
      \eta_i)^{p},\\
      x_t = (1 - c_t)\, x_{t-1} + c_t z_t,\quad
      y_t = \beta_1 x_t + (1 - \beta_1) z_t,

    with :math:`x_{t-1} = (y_{t-1} - (1 - \beta_1) z_{t-1}) / \beta_1`
    recovered from the parameters. The update is :math:`y_t - y_{t-1}`.

    Args:
      base_optimizer: the optimizer moving :math:`z` (usually SGD or Adam
        without momentum, with the same `learning_rate`).
      learning_rate: :math:`\eta`, for the averaging weights; a schedule is
        evaluated at the step count starting at 1.
      b1: :math:`\beta_1`, in (0, 1].
      weight_lr_power: :math:`p`, >= 0.
      state_dtype: dtype of :math:`z` (default: the parameters').

    Returns:
      A gradient transformation; `update` needs `params`.

    Example:
      >>> import jax, jax.numpy as jnp, gradax
      >>> params = jnp.array([1.0, -2.0])
      >>> tx = gradax.schedule_free(gradax.sgd(0.1), learning_rate=0.1)
      >>> state = tx.init(params)
      >>> grads = jax.grad(lambda p: (p**2).sum())(params)
      >>> updates, state = tx.update(grads, state, params)
      >>> params = gradax.apply_updates(params, updates)
      >>> params.tolist()
      [0.8, -1.6]
      >>> gradax.schedule_free_eval_params(state, params).tolist()
      [0.8, -1.6]

    Differences from optax: `b1` may be a schedule (the state keeps the
    value of the last update, for :func:`schedule_free_eval_params`); the
    scalar state is real for complex parameters.

    References:
      Defazio et al., The Road Less Scheduled, NeurIPS 2024
      (arXiv:2405.15682).
    """

    base_optimizer: TransformationLike = transformation_field()
    learning_rate: Any = hyper(valid=LEARNING_RATE)
    b1: Any = hyper(default=0.9, valid=Range(0.0, 1.0, low_open=True))
    weight_lr_power: Any = hyper(default=2.0, valid=NONNEGATIVE)
    state_dtype: Any = static_field(default=None)

    _self_resolved = ("learning_rate",)

    def init_state(self, params):
        dtype = real_dtype(gtree.dtype(params, "lowest"))
        z = gtree.cast(params, canonical_dtype(self.state_dtype))
        return ScheduleFreeState(
            b1=jnp.asarray(self.b1, dtype),
            weight_sum=jnp.zeros([], dtype),
            step_count=zero_count() + 1,
            max_lr=jnp.zeros([], dtype),
            base_optimizer_state=self.base_optimizer.init(params),
            z=jax.tree.map(jnp.array, z),
        )

    def update_state(self, updates, state, params=None, **extra_args):
        require_params(params, "schedule_free")
        b1 = self.b1
        lr = jnp.asarray(
            resolve(self.learning_rate, state.step_count), state.max_lr.dtype
        )
        max_lr = jnp.maximum(state.max_lr, lr)
        weight = max_lr**self.weight_lr_power
        weight_sum = state.weight_sum + weight
        ratio = jnp.nan_to_num(weight / weight_sum, nan=0.0, posinf=jnp.inf)
        # A NaN weight must show (the first 0/0 ratio is 0, not NaN).
        ck = jnp.where(jnp.isnan(weight) | jnp.isnan(weight_sum), jnp.nan, ratio)
        base_updates, base_state = self.base_optimizer.update(
            updates, state.base_optimizer_state, params, **extra_args
        )
        z = jax.tree.map(
            lambda z, u: jnp.asarray(z + u).astype(z.dtype), state.z, base_updates
        )
        x_prev = jax.tree.map(lambda y, z: (y - (1.0 - b1) * z) / b1, params, state.z)
        x = jax.tree.map(lambda x, z: (1.0 - ck) * x + ck * z, x_prev, z)
        new_params = jax.tree.map(lambda x, z: b1 * x + (1.0 - b1) * z, x, z)
        new_updates = jax.tree.map(lambda new, y: new - y, new_params, params)
        return new_updates, ScheduleFreeState(
            b1=jnp.asarray(b1),
            weight_sum=weight_sum,
            step_count=safe_increment(state.step_count),
            max_lr=max_lr,
            base_optimizer_state=base_state,
            z=z,
        )


def _find_schedule_free_state(state: Any) -> ScheduleFreeState:
    def is_sf(x: Any) -> bool:
        return isinstance(x, ScheduleFreeState)

    found = [
        x
        for x in jax.tree.leaves(state, is_leaf=is_sf)
        if isinstance(x, ScheduleFreeState)
    ]
    if len(found) != 1:
        raise ValueError(
            "schedule_free_eval_params needs a state holding exactly one "
            f"ScheduleFreeState (from schedule_free's init), found {len(found)}."
        )
    return found[0]


def schedule_free_eval_params(state: Any, params: Any) -> Any:
    r"""The averaged parameters :math:`x` of a schedule-free optimizer.

    Training moves the interpolation :math:`y` (the `params`); evaluate the
    model at :math:`x = (y - (1 - \beta_1) z) / \beta_1`.

    Args:
      state: the optimizer state; a :class:`ScheduleFreeState` or any state
        holding exactly one (e.g. inside `chain` or `inject_hyperparams`).
      params: the current parameters :math:`y`.

    Returns:
      The parameters to evaluate, like `params`.

    Differences from optax: the ScheduleFreeState may be nested in the state.
    """
    sf = _find_schedule_free_state(state)
    b1 = sf.b1
    return jax.tree.map(lambda y, z: (y - (1.0 - b1) * z) / b1, params, sf.z)


def _with_warmup(learning_rate: Any, warmup_steps: int | None) -> Any:
    if warmup_steps is None:
        return learning_rate
    return warmup_constant_schedule(0.0, learning_rate, warmup_steps)


class schedule_free_sgd(Alias):
    r"""Schedule-free SGD: :class:`schedule_free` around `sgd(learning_rate)`.

    See :class:`schedule_free` for the averaging; the base step is
    :math:`\Delta_t = -\eta_t (g_t + \lambda y_t)`.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule.
      warmup_steps: if given, :math:`\eta` warms up linearly from 0 over this
        many steps, an integer >= 0.
      b1: :math:`\beta_1`, in (0, 1].
      weight_decay: :math:`\lambda \ge 0`, or None for no weight decay.
      weight_lr_power: >= 0, the power of the learning rate in the weights.
      state_dtype: dtype of :math:`z`.

    Returns:
      The optimizer, a gradient transformation; `update` needs `params`.
      Evaluate at :func:`schedule_free_eval_params`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.schedule_free_sgd(0.1)
      >>> y = jnp.array([1.0, -2.0])  # the parameters training moves
      >>> state = tx.init(y)
      >>> for _ in range(2):  # 2 * y: the gradient of (y**2).sum()
      ...     updates, state = tx.update(2 * y, state, y)
      ...     y = gradax.apply_updates(y, updates)
      >>> y.tolist(), gradax.schedule_free_eval_params(state, y).tolist()
      ([0.712, -1.424], [0.72, -1.44])

    References:
      Defazio et al., The Road Less Scheduled, NeurIPS 2024
      (arXiv:2405.15682).
    """

    learning_rate: Any = hyper(default=1.0, valid=LEARNING_RATE)
    warmup_steps: int | None = hyper(default=None, valid=NONNEGATIVE_INT, static=True)
    b1: Any = hyper(default=0.9, valid=Range(0.0, 1.0, low_open=True))
    weight_decay: Any = hyper(default=None, valid=NONNEGATIVE)
    weight_lr_power: Any = hyper(default=2.0, valid=NONNEGATIVE)
    state_dtype: Any = static_field(default=None)

    _self_resolved = ("learning_rate",)

    def build(self):
        lr = _with_warmup(self.learning_rate, self.warmup_steps)
        base = sgd(lr)
        if self.weight_decay is not None:
            base = chain(add_decayed_weights(self.weight_decay), base)
        return schedule_free(base, lr, self.b1, self.weight_lr_power, self.state_dtype)


class schedule_free_adamw(Alias):
    r"""Schedule-free AdamW: :class:`schedule_free` around Adam without momentum.

    See :class:`schedule_free` for the averaging; the base step is
    :math:`\Delta_t = -\eta_t (g_t / (\sqrt{v_t / (1 - \beta_2^t)} + \epsilon)
    + \lambda y_t)` with :math:`v_t = \beta_2 v_{t-1} + (1 - \beta_2) g_t^2`.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule.
      warmup_steps: if given, :math:`\eta` warms up linearly from 0 over this
        many steps, an integer >= 0.
      b1: :math:`\beta_1`, in (0, 1].
      b2: :math:`\beta_2`, in [0, 1).
      eps: :math:`\epsilon`, >= 0.
      weight_decay: :math:`\lambda`, >= 0.
      weight_lr_power: >= 0, the power of the learning rate in the weights.
      state_dtype: dtype of :math:`z`.

    Returns:
      The optimizer, a gradient transformation; `update` needs `params`.
      Evaluate at :func:`schedule_free_eval_params`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.schedule_free_adamw(0.1, warmup_steps=2)
      >>> params = jnp.array([1.0, -2.0])
      >>> tx.update(2 * params, tx.init(params), params)[0]  # warm-up starts at 0
      Array([0., 0.], dtype=float32)

    References:
      Defazio et al., The Road Less Scheduled, NeurIPS 2024
      (arXiv:2405.15682).
    """

    learning_rate: Any = hyper(default=0.0025, valid=LEARNING_RATE)
    warmup_steps: int | None = hyper(default=None, valid=NONNEGATIVE_INT, static=True)
    b1: Any = hyper(default=0.9, valid=Range(0.0, 1.0, low_open=True))
    b2: Any = hyper(default=0.999, valid=DECAY)
    eps: Any = hyper(default=1e-8, valid=NONNEGATIVE)
    weight_decay: Any = hyper(default=0.0, valid=NONNEGATIVE)
    weight_lr_power: Any = hyper(default=2.0, valid=NONNEGATIVE)
    state_dtype: Any = static_field(default=None)

    _self_resolved = ("learning_rate",)

    def build(self):
        lr = _with_warmup(self.learning_rate, self.warmup_steps)
        base = chain(
            scale_by_rms(self.b2, self.eps, eps_in_sqrt=False, bias_correction=True),
            add_decayed_weights(self.weight_decay),
            scale_by_learning_rate(lr),
        )
        return schedule_free(base, lr, self.b1, self.weight_lr_power, self.state_dtype)
