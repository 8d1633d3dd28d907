"""MARS: variance-reduced AdamW and Lion (Yuan et al., 2024)."""

from __future__ import annotations

from dataclasses import KW_ONLY
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .. import tree as gtree
from .._core.declarations import DECAY, LEARNING_RATE, NONNEGATIVE, OneOf, Shared, hyper
from .._core.numerics import abs_sq, canonical_dtype, safe_increment
from .._core.protocol import Alias, GradientTransformation, zero_count
from .._core.pytree import static_field
from ..combinators.chain import chain
from .adam import adam_ratio

_TYPES = ("mars-adamw", "mars-lion")


class MarsState(NamedTuple):
    """State of :class:`scale_by_mars`."""

    count: jax.Array  # int32 scalar
    mu: Any  # first moment, like params (mu_dtype)
    nu: Any  # second moment, like params; None on mars-lion's MARS leaves
    last_grad: Any  # previous gradient on the MARS leaves, None on the others


def _on_mars_path(x: Any, optimize_1d: bool) -> bool:
    """Whether a leaf takes the MARS rule (2-D, or any with optimize_1d)."""
    return optimize_1d or len(x.shape) == 2


def _is_zero(value: Any) -> bool:
    return isinstance(value, (int, float)) and value == 0


def _clipped_correction(g: jax.Array, g_prev: jax.Array, b1: Any, gamma: Any):
    """`c = g + gamma b1/(1-b1) (g - g_prev)`, divided by `max(||c||, 1)`."""
    c = g + (gamma * (b1 / (1 - b1))) * (g - g_prev)
    norm = jnp.sqrt(jnp.sum(abs_sq(c)))
    # c / ||c|| where ||c|| > 1, else c unchanged (a division by 1 is exact).
    return c / jnp.maximum(norm, 1).astype(norm.dtype)


# scale_by_mars's options, declared once: it and the optimizers that
# build it take each field from here and pass the values on with Alias.part.
_MARS = Shared(
    b1=hyper(default=0.95, valid=DECAY),
    b2=hyper(default=0.99, valid=DECAY),
    eps=hyper(default=1e-8, valid=NONNEGATIVE),
    gamma=hyper(default=0.025, valid=NONNEGATIVE),
    mu_dtype=static_field(default=None),
    mars_type=hyper(default="mars-adamw", valid=OneOf(_TYPES), static=True),
    optimize_1d=static_field(default=False),
    b1_1d=hyper(default=0.9, valid=DECAY),
    b2_1d=hyper(default=0.95, valid=DECAY),
)


class scale_by_mars(GradientTransformation):
    """MARS's direction (no learning rate, no weight decay).

    See :class:`mars` for the update rule.

    Args:
      b1: decay of the first moment on MARS leaves, in [0, 1).
      b2: decay of the second moment on MARS leaves, in [0, 1).
      eps: added to the denominator outside the square root, >= 0.
      gamma: strength of the gradient correction, >= 0.
      mu_dtype: dtype of the first moment (default: the parameters').
      mars_type: `"mars-adamw"` or `"mars-lion"` (the paper's
        `"mars-shampoo"` is not implemented). Keyword-only.
      optimize_1d: use MARS on every leaf; by default only 2-D leaves take
        MARS and the others take AdamW with `b1_1d`, `b2_1d`. Keyword-only.
      b1_1d: AdamW's first-moment decay on the other leaves, in [0, 1).
      b2_1d: AdamW's second-moment decay on the other leaves, in [0, 1).
    """

    b1: Any = _MARS.field()
    b2: Any = _MARS.field()
    eps: Any = _MARS.field()
    gamma: Any = _MARS.field()
    mu_dtype: Any = _MARS.field()
    _: KW_ONLY
    mars_type: str = _MARS.field()
    optimize_1d: bool = _MARS.field()
    b1_1d: Any = _MARS.field()
    b2_1d: Any = _MARS.field()

    def init_state(self, params):
        lion = self.mars_type == "mars-lion"

        def nu(p):
            return None if lion and self._mars(p) else jnp.zeros_like(p)

        def last_grad(p):
            return jnp.zeros_like(p) if self._mars(p) else None

        return MarsState(
            count=zero_count(),
            mu=gtree.zeros_like(params, dtype=canonical_dtype(self.mu_dtype)),
            nu=jax.tree.map(nu, params),
            last_grad=jax.tree.map(last_grad, params),
        )

    def _mars(self, x: Any) -> bool:
        return _on_mars_path(x, self.optimize_1d)

    def update_state(self, updates, state, params=None, **extra_args):
        count = safe_increment(state.count)
        eps = self.eps

        def leaf(g, m, v, g_prev):
            if g_prev is None:  # AdamW on the raw gradient.
                b1, b2, c = self.b1_1d, self.b2_1d, g
            else:
                b1, b2 = self.b1, self.b2
                c = _clipped_correction(g, g_prev, b1, self.gamma)
            m = gtree.update_moment(c, m, b1, 1)
            if v is None:  # mars-lion: the sign of the new first moment.
                return jnp.sign(m), m, None
            v = gtree.update_moment_per_elem_norm(c, v, b2, 2)
            m_hat = gtree.bias_correction(m, b1, count)
            v_hat = gtree.bias_correction(v, b2, count)
            return adam_ratio(m_hat, v_hat, eps, 0.0), m, v

        grads, treedef = jax.tree.flatten(updates)
        parts = zip(
            grads,
            treedef.flatten_up_to(state.mu),
            treedef.flatten_up_to(state.nu),
            treedef.flatten_up_to(state.last_grad),
            strict=True,
        )
        outs = [leaf(*part) for part in parts]
        new_updates, mu, nu = (
            treedef.unflatten([out[i] for out in outs]) for i in range(3)
        )
        last_grad = jax.tree.map(
            lambda g, old: None if old is None else g,
            updates,
            state.last_grad,
            is_leaf=lambda x: x is None,
        )
        return new_updates, MarsState(count, mu, nu, last_grad)


class _mars_step(GradientTransformation):
    """`-lr (u + wd p)` on MARS leaves, `-lr_1d (u + wd_1d p)` on others."""

    learning_rate: Any = hyper(valid=LEARNING_RATE)
    weight_decay: Any = hyper(valid=NONNEGATIVE)
    learning_rate_1d: Any = hyper(valid=LEARNING_RATE, allow_none=True)  # None: lr
    weight_decay_1d: Any = hyper(valid=NONNEGATIVE)
    optimize_1d: bool = static_field(default=False, kw_only=True)

    def update_state(self, updates, state, params=None, **extra_args):
        lr_1d = self.learning_rate_1d
        if lr_1d is None:
            lr_1d = self.learning_rate

        def leaf(u, p):
            if _on_mars_path(u, self.optimize_1d):
                lr, wd = self.learning_rate, self.weight_decay
            else:
                lr, wd = lr_1d, self.weight_decay_1d
            if not _is_zero(wd):
                if p is None:
                    raise ValueError("mars needs params passed to update")
                u = u + wd * p
            return -lr * u

        if params is None:
            return jax.tree.map(lambda u: leaf(u, None), updates), state
        return jax.tree.map(leaf, updates, params), state


class mars(Alias):
    r"""MARS: AdamW or Lion on a variance-reduced, clipped gradient.

    MARS (Make vAriance Reduction Shine), approximate form: the previous
    step's gradient stands in for the gradient at the previous parameters
    on the current batch. On each MARS leaf, with :math:`g_0 = 0`:

    .. math::
      c_t = g_t + \gamma \frac{b_1}{1 - b_1} (g_t - g_{t-1}),\quad
      \tilde c_t = c_t / \max(\lVert c_t \rVert_2, 1),\\
      m_t = b_1 m_{t-1} + (1 - b_1) \tilde c_t,\quad
      v_t = b_2 v_{t-1} + (1 - b_2) \tilde c_t^2,\\
      u_t = -\eta_t \Big(\frac{m_t / (1 - b_1^t)}
            {\sqrt{v_t / (1 - b_2^t)} + \epsilon}
            + \lambda \theta_{t-1}\Big)

    (`"mars-adamw"`), or :math:`u_t = -\eta_t (\mathrm{sign}(m_t) + \lambda
    \theta_{t-1})` (`"mars-lion"`). The norm is taken per leaf (each
    parameter tensor), as in the authors' code. MARS leaves are the 2-D
    parameters; every other leaf (scalars, vectors, 3-D and higher) takes
    plain AdamW on :math:`g_t` with `b1_1d`, `b2_1d`, learning rate
    `learning_rate_1d` and weight decay `weight_decay_1d`, unless
    `optimize_1d=True` sends every leaf through MARS. This follows the
    authors' reference implementation (AGI-Arena/MARS
    `MARS/optimizers/mars.py`, commit 4831e28), which tests `ndim == 2`.

    The MARS-Shampoo variant of the paper is not implemented (gradax's
    :class:`muon` covers orthogonalized updates), nor the exact form that
    evaluates a second gradient per step, nor the reference's `amsgrad`.

    Differences from the reference: `learning_rate_1d` is its own number
    or schedule (the reference keeps the ratio `lr_1d / lr` and so applies
    the main learning-rate schedule to it); `None` means
    `learning_rate`, the reference's default ratio of 1. The first step
    uses :math:`g_0 = 0` as the reference does (timm's port uses
    :math:`g_0 = g_1` instead and sends every leaf of 2 or more dimensions
    through MARS). Not in optax.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule.
      b1: decay of the first moment on MARS leaves, in [0, 1).
      b2: decay of the second moment on MARS leaves, in [0, 1).
      eps: :math:`\epsilon`, >= 0.
      weight_decay: :math:`\lambda >= 0` on MARS leaves.
      gamma: :math:`\gamma >= 0`, the strength of the gradient correction
        (0 gives AdamW, or Lion with one momentum, on the clipped gradient).
      mu_dtype: dtype of the first moment.
      mars_type: `"mars-adamw"` or `"mars-lion"` (`"mars-shampoo"` is
        not implemented). Keyword-only.
      optimize_1d: MARS on every leaf, not only the 2-D ones. Keyword-only.
      b1_1d: AdamW's first-moment decay on the other leaves, in [0, 1) (the
        reference's `betas_1d[0]`). Keyword-only.
      b2_1d: AdamW's second-moment decay on the other leaves, in [0, 1)
        (`betas_1d[1]`). Keyword-only.
      learning_rate_1d: AdamW's learning rate on the other leaves;
        None: `learning_rate`. Keyword-only.
      weight_decay_1d: AdamW's weight decay on the other leaves, >= 0 (the
        reference's default 0.1). Keyword-only.

    Returns:
      The optimizer, a gradient transformation.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> params = {"w": jnp.ones((2, 2)), "b": jnp.zeros(2)}
      >>> tx = gradax.mars(0.1)
      >>> grads = {"w": jnp.full((2, 2), 0.1), "b": jnp.ones(2)}
      >>> updates, state = tx.update(grads, tx.init(params), params)
      >>> gradax.apply_updates(params, updates)["w"]
      Array([[0.9, 0.9],
             [0.9, 0.9]], dtype=float32)

    References:
      Yuan et al., MARS: Unleashing the Power of Variance Reduction for
      Training Large Models, 2024 (arXiv:2411.10438).
    """

    learning_rate: Any = hyper(default=0.003, valid=LEARNING_RATE)
    b1: Any = _MARS.field()
    b2: Any = _MARS.field()
    eps: Any = _MARS.field()
    weight_decay: Any = hyper(default=0.0, valid=NONNEGATIVE)
    gamma: Any = _MARS.field()
    mu_dtype: Any = _MARS.field()
    _: KW_ONLY
    mars_type: str = _MARS.field()
    optimize_1d: bool = _MARS.field()
    b1_1d: Any = _MARS.field()
    b2_1d: Any = _MARS.field()
    learning_rate_1d: Any = hyper(default=None, valid=LEARNING_RATE, kw_only=True)
    weight_decay_1d: Any = hyper(default=0.1, valid=NONNEGATIVE, kw_only=True)

    def build(self):
        return chain(
            self.part(scale_by_mars),
            self.part(_mars_step),
        )
