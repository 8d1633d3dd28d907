"""Lion: the sign of an interpolated momentum."""

from __future__ import annotations

from dataclasses import KW_ONLY
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .. import tree as gtree
from .._core.declarations import LEARNING_RATE, NONNEGATIVE, UNIT, OneOf, Shared, hyper
from .._core.numerics import canonical_dtype, safe_increment
from .._core.protocol import Alias, GradientTransformation, zero_count
from .._core.pytree import static_field
from ..transforms.cautious import MASK_SCALE, caution, decayed_descent


class ScaleByLionState(NamedTuple):
    """State of :class:`scale_by_lion`."""

    count: jax.Array  # int32 scalar
    mu: Any  # momentum, like params (mu_dtype)


# scale_by_lion's options, declared once: it and the optimizers that
# build it take each field from here and pass the values on with Alias.part.
_LION = Shared(
    b1=hyper(default=0.9, valid=UNIT),
    b2=hyper(default=0.99, valid=UNIT),
    mu_dtype=static_field(default=None),
    cautious=static_field(default=False),
    mask_scale=hyper(default="numel", valid=MASK_SCALE, static=True),
)


class scale_by_lion(GradientTransformation):
    """Rescales updates by Lion's signed interpolated momentum (no learning rate).

    See :class:`lion` for the update rule.

    Args:
      b1: weight of the momentum in the interpolation, in [0, 1].
      b2: decay of the momentum, in [0, 1].
      mu_dtype: dtype of the momentum (default: the parameters').
      mode: the sign function: `"hard"` (`sign`), `"smooth"`
        (`tanh(smooth_beta * x)`) or `"refined"` (`x` where `|x| < 1`,
        else `sign(x)`). Keyword-only.
      smooth_beta: the slope of the `"smooth"` mode, >= 0. Keyword-only.
      cautious: cautious updates (keyword-only, not in optax; see
        :func:`gradax.transforms.cautious.caution`).
      mask_scale: how `cautious` rescales the kept entries: `"numel"`
        (the default, C-Lion's rule) or `"mean"` (C-AdamW's). Keyword-only.
    """

    b1: Any = _LION.field()
    b2: Any = _LION.field()
    mu_dtype: Any = _LION.field()
    _: KW_ONLY
    mode: str = hyper(
        default="hard",
        valid=OneOf(("hard", "smooth", "refined")),
        static=True,
        kw_only=True,
    )
    smooth_beta: Any = hyper(default=1.0, valid=NONNEGATIVE, kw_only=True)
    cautious: bool = _LION.field()
    mask_scale: str = _LION.field()

    def init_state(self, params):
        dtype = canonical_dtype(self.mu_dtype)
        return ScaleByLionState(
            count=zero_count(), mu=gtree.zeros_like(params, dtype=dtype)
        )

    def update_state(self, updates, state, params=None, **extra_args):
        b1, beta, mode = self.b1, self.smooth_beta, self.mode

        def direction(g, m):
            x = (1.0 - b1) * g + b1 * m
            if mode == "hard":
                return jnp.sign(x)
            if mode == "smooth":
                return jnp.tanh(beta * x)
            return jnp.where(jnp.abs(x) < 1.0, x, jnp.sign(x))

        new_updates = jax.tree.map(direction, updates, state.mu)
        mu = gtree.update_moment(updates, state.mu, self.b2, 1)
        if self.cautious:
            new_updates = caution(new_updates, updates, mask_scale=self.mask_scale)
        return new_updates, ScaleByLionState(count=safe_increment(state.count), mu=mu)


class lion(Alias):
    r"""Lion: evolved sign momentum.

    With gradient :math:`g_t`, parameters :math:`\theta_{t-1}` and weight
    decay :math:`\lambda`:

    .. math::
      c_t = b_1 m_{t-1} + (1 - b_1) g_t,\quad
      u_t = -\eta_t (\mathrm{sign}(c_t) + \lambda \theta_{t-1}),\quad
      m_t = b_2 m_{t-1} + (1 - b_2) g_t.

    With `cautious=True`, :math:`\mathrm{sign}(c_t)` is kept only where it
    agrees in sign with :math:`g_t`, scaled by :math:`n / (k + 1)` for a
    leaf of :math:`n` entries of which :math:`k` are kept: the rule of the
    authors' `c_lion.py` (github.com/kyleliang919/C-Optim, commit
    2c0517c). `mask_scale="mean"` divides by :math:`\max(k / n, 10^{-3})`
    instead, the rule of the same commit's `c_adamw.py` and of gradax's
    Adam family; it takes steps :math:`(k + 1) / k` times larger.

    Differences from optax: the keyword-only arguments `cautious`,
    `mask_scale` and `cautious_weight_decay` are not in optax; the
    defaults give optax's numbers.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule (Lion
        wants one 3-10 times smaller than AdamW's).
      b1: weight of the momentum in :math:`c_t`, in [0, 1].
      b2: decay of the momentum, in [0, 1].
      mu_dtype: dtype of the momentum.
      weight_decay: :math:`\lambda >= 0`, a number or a schedule.
      mask: a tree of booleans like the params (or a function of the params
        returning one) selecting the leaves that decay.
      cautious: cautious updates, C-Lion (keyword-only, not in optax).
      mask_scale: `"numel"` (the default, `c_lion.py`'s rescaling) or
        `"mean"` (`c_adamw.py`'s); used only with `cautious`
        (keyword-only, not in optax).
      cautious_weight_decay: decay only where :math:`\mathrm{sign}(c_t)` and
        :math:`\theta_{t-1}` agree in sign (keyword-only, not in optax; see
        :class:`add_cautious_decayed_weights`).

    Returns:
      The optimizer, a gradient transformation.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.lion(0.1, weight_decay=0.0)
      >>> p, g1, g2 = jnp.zeros(1), jnp.array([1.0]), jnp.array([-0.05])
      >>> _, state = tx.update(g1, tx.init(p), p)
      >>> tx.update(g2, state, p)[0]  # sign(0.9 m + 0.1 g2) is still +
      Array([-0.1], dtype=float32)

    References:
      Chen et al., Symbolic Discovery of Optimization Algorithms, 2023
      (arXiv:2302.06675); Liang et al., Cautious Optimizers, 2024
      (arXiv:2411.16085); Chen et al., Cautious Weight Decay, 2025
      (arXiv:2510.12402).
    """

    learning_rate: Any = hyper(valid=LEARNING_RATE)
    b1: Any = _LION.field()
    b2: Any = _LION.field()
    mu_dtype: Any = _LION.field()
    weight_decay: Any = hyper(default=0.001, valid=NONNEGATIVE)
    mask: Any = static_field(default=None)
    _: KW_ONLY
    cautious: bool = _LION.field()
    mask_scale: str = _LION.field()
    cautious_weight_decay: bool = static_field(default=False)

    def build(self):
        return decayed_descent(
            self.part(scale_by_lion),
            self.weight_decay,
            self.mask,
            self.learning_rate,
            cautious=self.cautious_weight_decay,
        )
