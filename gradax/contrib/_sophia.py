"""Sophia: clipped second-order steps from a diagonal Hessian estimate."""

from __future__ import annotations

from dataclasses import KW_ONLY
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .. import tree as gtree
from .._core.declarations import (
    DECAY,
    LEARNING_RATE,
    NONNEGATIVE,
    NONNEGATIVE_INT,
    POSITIVE_INT,
    OneOf,
    Range,
    Shared,
    hyper,
)
from .._core.numerics import canonical_dtype, safe_increment
from .._core.protocol import (
    Alias,
    GradientTransformation,
    TransformationLike,
    transformation_field,
    zero_count,
)
from .._core.pytree import static_field
from .._core.state_guard import match_state
from .._core.treecheck import require_params
from ..transforms.cautious import decayed_descent


class HutchinsonState(NamedTuple):
    """State of :class:`hutchinson_estimator_diag_hessian`."""

    key: jax.Array  # the PRNG key for the next probe


class hutchinson_estimator_diag_hessian(GradientTransformation):
    r"""Hutchinson's estimate of the Hessian diagonal, :math:`u \odot H u`.

    Each update draws a Rademacher vector :math:`u` (entries :math:`\pm 1`) and
    returns :math:`u \odot (\nabla^2 f(\theta)\, u)`, whose expectation is the
    diagonal of the Hessian of `obj_fn` at the params. The incoming updates
    are ignored. `update` needs `params` and `obj_fn` (the loss as a
    function of the params).

    Args:
      random_seed: a PRNG key (default: `jax.random.PRNGKey(0)` at init).

    Returns:
      A gradient transformation whose state is a :class:`HutchinsonState`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.hutchinson_estimator_diag_hessian()
      >>> params = jnp.array([1.0, 2.0])
      >>> obj_fn = lambda p: jnp.sum(3.0 * p**2)
      >>> diag, _ = tx.update(params, tx.init(params), params, obj_fn=obj_fn)
      >>> diag
      Array([6., 6.], dtype=float32)

    References:
      Hutchinson, A stochastic estimator of the trace of the influence matrix
      for Laplacian smoothing splines, 1989.
    """

    random_seed: Any = None  # a PRNG key, not a hyperparameter

    def init_state(self, params):
        del params
        key = jax.random.PRNGKey(0) if self.random_seed is None else self.random_seed
        return HutchinsonState(key=jnp.asarray(key))

    def update_state(self, updates, state, params=None, obj_fn=None, **extra_args):
        del updates
        require_params(params, "hutchinson_estimator_diag_hessian")
        if obj_fn is None:
            raise ValueError(
                "hutchinson_estimator_diag_hessian.update needs obj_fn=, the "
                "loss as a function of the params."
            )
        key, subkey = jax.random.split(state.key)
        signs = gtree.random_like(subkey, params, jax.random.rademacher, jnp.float32)
        signs = gtree.cast(signs, gtree.dtype(params, "lowest"))
        hvp = jax.jvp(jax.grad(obj_fn), (params,), (signs,))[1]
        return jax.tree.map(lambda h, u: h * u, hvp, signs), HutchinsonState(key)


class SophiaState(NamedTuple):
    """State of :class:`scale_by_sophia`."""

    count: jax.Array  # int32 scalar
    mu: Any  # first moment, like params (mu_dtype)
    nu: Any  # moving average of the Hessian diagonal, like params
    hessian_fn_state: Any


# When the Hessian estimate is refreshed: on the first step of each interval
# (optax's contrib sophia: after steps 1, k + 1, 2k + 1, ...) or on its last
# (the authors' train_sophiag.py: after steps k, 2k, ...).
HESSIAN_REFRESH = OneOf(("interval_start", "interval_end"))

# The bound of the clipped direction; inf (like None) does not clip.
_CLIP_THRESHOLD = Range(0.0, low_open=True, allow_inf=True)


# scale_by_sophia's options, declared once: it and the optimizers that
# build it take each field from here and pass the values on with Alias.part.
_SOPHIA = Shared(
    b1=hyper(default=0.965, valid=DECAY),
    b2=hyper(default=0.99, valid=DECAY),
    eps=hyper(default=1e-8, valid=NONNEGATIVE),
    gamma=hyper(default=0.01, valid=NONNEGATIVE),
    clip_threshold=hyper(default=1.0, valid=_CLIP_THRESHOLD, allow_none=True),
    update_interval=hyper(default=10, valid=POSITIVE_INT, static=True),
    mu_dtype=static_field(default=None),
    verbose=static_field(default=False),
    print_win_rate_every_n_steps=hyper(default=0, valid=NONNEGATIVE_INT, static=True),
    hessian_refresh=hyper(default="interval_start", valid=HESSIAN_REFRESH, static=True),
    bias_correction=static_field(default=True),
)


class scale_by_sophia(GradientTransformation):
    """The Sophia direction, without learning rate. See :class:`sophia`.

    Args:
      b1: decay of the first moment, in [0, 1).
      b2: decay of the Hessian average, in [0, 1).
      eps: lower bound of the denominator, >= 0.
      gamma: scale of the Hessian in the denominator, >= 0.
      clip_threshold: clip the direction to this magnitude, > 0 (None or
        inf: no clip).
      update_interval: estimate the Hessian every this many steps, an
        integer >= 1.
      hessian_refresh: "interval_start" (after steps 1, k + 1, ..., as
        optax) or "interval_end" (after steps k, 2k, ..., as the authors'
        script). See :class:`sophia`.
      bias_correction: divide the first moment by `1 - b1^t` (optax's
        rule); False: the authors' `SophiaG`, which does not.
      hessian_diagonal_fn: a transformation returning the Hessian diagonal
        estimate; called with the gradients, `params=` and every extra
        argument of `update` (e.g. `obj_fn`).
      mu_dtype: dtype of the first moment.
      verbose: print the fraction of unclipped coordinates (the win rate).
      print_win_rate_every_n_steps: how often `verbose` prints, an integer
        >= 0 (0: never).
    """

    b1: Any = _SOPHIA.field()
    b2: Any = _SOPHIA.field()
    eps: Any = _SOPHIA.field()
    gamma: Any = _SOPHIA.field()
    clip_threshold: Any = _SOPHIA.field()
    update_interval: int = _SOPHIA.field()
    hessian_diagonal_fn: TransformationLike = transformation_field(
        default=hutchinson_estimator_diag_hessian()
    )
    mu_dtype: Any = _SOPHIA.field()
    verbose: bool = _SOPHIA.field()
    print_win_rate_every_n_steps: int = _SOPHIA.field()
    _: KW_ONLY
    hessian_refresh: str = _SOPHIA.field()
    bias_correction: bool = _SOPHIA.field()

    def init_state(self, params):
        return SophiaState(
            count=zero_count(),
            mu=gtree.zeros_like(params, canonical_dtype(self.mu_dtype)),
            nu=gtree.zeros_like(params),
            hessian_fn_state=self.hessian_diagonal_fn.init(params),
        )

    def update_state(self, updates, state, params=None, **extra_args):
        require_params(params, "scale_by_sophia")
        b1, gamma, eps = self.b1, self.gamma, self.eps
        count = safe_increment(state.count)
        grads = updates
        mu = gtree.update_moment(updates, state.mu, b1, 1)
        mu_hat = gtree.bias_correction(mu, b1, count) if self.bias_correction else mu
        direction = jax.tree.map(
            lambda m, h: m / jnp.maximum(gamma * h, eps), mu_hat, state.nu
        )
        bound = self.clip_threshold
        if bound is not None:
            if self.verbose:
                self._print_win_rate(direction, bound, count)
            direction = jax.tree.map(lambda u: jnp.clip(u, -bound, bound), direction)

        def estimate(old_hess_state, old_nu):
            diag, hess_state = self.hessian_diagonal_fn.update(
                grads, old_hess_state, params=params, **extra_args
            )
            nu = gtree.update_moment(diag, old_nu, self.b2, 1)
            # Both branches of the cond must give the same dtypes.
            return match_state(
                (hess_state, nu), (old_hess_state, old_nu), "scale_by_sophia"
            )

        # interval_start: steps 1, k + 1, ... (state.count is the step - 1);
        # interval_end: steps k, 2k, ...
        step = state.count if self.hessian_refresh == "interval_start" else count
        hessian_fn_state, nu = jax.lax.cond(
            step % self.update_interval == 0,
            estimate,
            lambda h, n: (h, n),
            state.hessian_fn_state,
            state.nu,
        )
        return direction, SophiaState(
            count=count, mu=mu, nu=nu, hessian_fn_state=hessian_fn_state
        )

    def _print_win_rate(self, direction: Any, bound: Any, count: jax.Array) -> None:
        inside = sum(jnp.sum(jnp.abs(u) < bound) for u in jax.tree.leaves(direction))
        win_rate = inside / gtree.size(direction)
        jax.lax.cond(
            count % self.print_win_rate_every_n_steps == 0,
            lambda: jax.debug.print("Sophia optimizer win rate: {}", win_rate),
            lambda: None,
        )


class sophia(Alias):
    r"""Sophia: momentum divided by a clipped diagonal Hessian estimate.

    With gradient :math:`g_t`, step :math:`t \ge 1` and :math:`h_t` the moving
    average (decay :math:`b_2`) of the Hessian diagonal estimates, refreshed
    every `update_interval` steps (after computing the step):

    .. math::
      m_t = b_1 m_{t-1} + (1 - b_1) g_t,\quad
      u_t = -\eta_t \left(\mathrm{clip}\!\left(
            \frac{m_t / (1 - b_1^t)}{\max(\gamma h_{t-1}, \epsilon)},
            \rho\right) + \lambda \theta_{t-1}\right),

    with :math:`\rho` = `clip_threshold`. By default the estimate is
    refreshed after steps 1, k + 1, 2k + 1, ... (k = `update_interval`), as
    optax's contrib `sophia` does; `hessian_refresh="interval_end"`
    refreshes after steps k, 2k, ..., the timing of the authors' training
    script (`train_sophiag.py` of Liuhong99/Sophia at commit a7e1572, which
    takes the step of those iterations and then the estimate).

    The authors' `SophiaG` (`sophia.py`, the same commit) is this update
    with `bias_correction=False` (its momentum is not divided by
    :math:`1 - b_1^t`), :math:`\gamma = \rho_{\text{SophiaG}} \cdot
    \text{bs}` (its `rho` times the tokens per batch it is given),
    `clip_threshold=1`, `hessian_refresh="interval_end"` and an estimator
    returning the squared gradient of a loss on sampled labels (its
    `update_hessian`); it adds 1e-15 to :math:`\gamma h` where gradax takes
    :math:`\max(\gamma h, \epsilon)`. The default estimator,
    :class:`hutchinson_estimator_diag_hessian`, needs `obj_fn=` (the loss as
    a function of the params) in `update`; every extra argument is passed to
    the estimator.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule.
      b1: decay of the first moment, in [0, 1).
      b2: decay of the Hessian average, in [0, 1).
      eps: :math:`\epsilon`, >= 0.
      weight_decay: :math:`\lambda`, >= 0.
      weight_decay_mask: a tree of booleans like the params (or a function of
        the params returning one) selecting the leaves that decay.
      gamma: :math:`\gamma`, >= 0.
      clip_threshold: :math:`\rho > 0`, or None (or inf) for no clipping.
      update_interval: steps between Hessian estimates, an integer >= 1.
      hessian_diagonal_fn: the Hessian diagonal estimator (a transformation).
      hessian_refresh: "interval_start" (optax's timing, the default) or
        "interval_end" (the authors' script's), keyword-only.
      bias_correction: divide :math:`m_t` by :math:`1 - b_1^t` (optax's
        rule, the default); False: the authors' `SophiaG`, keyword-only.
      mu_dtype: dtype of the first moment.
      verbose: print the fraction of unclipped coordinates.
      print_win_rate_every_n_steps: how often `verbose` prints, an integer
        >= 0 (0: never).

    Returns:
      The optimizer, a gradient transformation; `update` needs `params`
      and whatever the estimator needs (`obj_fn` by default).

    Example:
      >>> import jax, jax.numpy as jnp, gradax
      >>> loss = lambda p: jnp.sum(p**2)
      >>> params = jnp.array([1.0, -2.0])
      >>> tx = gradax.sophia(0.1)
      >>> state = tx.init(params)
      >>> updates, state = tx.update(jax.grad(loss)(params), state, params, obj_fn=loss)
      >>> gradax.apply_updates(params, updates)
      Array([ 0.89999, -1.89998], dtype=float32)

    References:
      Liu et al., Sophia: A Scalable Stochastic Second-order Optimizer for
      Language Model Pre-training, ICLR 2024 (arXiv:2305.14342).
    """

    learning_rate: Any = hyper(valid=LEARNING_RATE)
    b1: Any = _SOPHIA.field()
    b2: Any = _SOPHIA.field()
    eps: Any = _SOPHIA.field()
    weight_decay: Any = hyper(default=0.0001, valid=NONNEGATIVE)
    weight_decay_mask: Any = static_field(default=None)
    gamma: Any = _SOPHIA.field()
    clip_threshold: Any = _SOPHIA.field()
    update_interval: int = _SOPHIA.field()
    hessian_diagonal_fn: TransformationLike = transformation_field(
        default=hutchinson_estimator_diag_hessian()
    )
    mu_dtype: Any = _SOPHIA.field()
    verbose: bool = _SOPHIA.field()
    print_win_rate_every_n_steps: int = _SOPHIA.field()
    _: KW_ONLY
    hessian_refresh: str = _SOPHIA.field()
    bias_correction: bool = _SOPHIA.field()

    def build(self):
        return decayed_descent(
            self.part(scale_by_sophia),
            self.weight_decay,
            self.weight_decay_mask,
            self.learning_rate,
        )
