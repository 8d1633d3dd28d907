"""AdaMax (Adam with an infinity norm) and AdaMaxW (with decoupled weight decay)."""

from __future__ import annotations

from dataclasses import KW_ONLY
from typing import Any

import jax

from .. import tree as gtree
from .._core.declarations import DECAY, NONNEGATIVE, hyper
from .._core.numerics import safe_increment
from .._core.protocol import GradientTransformation, LearningRateAlias
from .._core.pytree import Module, static_field
from ..combinators.chain import chain
from ..transforms.cautious import CautiousDecoupledWeightDecay, caution
from ..transforms.scaling import scale_by_learning_rate
from .adam import ScaleByAdamState, zero_moments


class _AdamaxOptions(Module):
    """The options of scale_by_adamax, adamax and adamaxw."""

    _abstract = True

    b1: Any = hyper(default=0.9, valid=DECAY)
    b2: Any = hyper(default=0.999, valid=DECAY)
    eps: Any = hyper(default=1e-8, valid=NONNEGATIVE)
    _: KW_ONLY
    cautious: bool = static_field(default=False)


class scale_by_adamax(_AdamaxOptions, GradientTransformation):
    """Rescales updates by AdaMax's moment estimates (no learning rate).

    See :class:`adamax` for the update rule. The state is a
    :class:`ScaleByAdamState` whose `nu` is the decaying infinity norm.

    Args:
      b1: decay of the first moment, in [0, 1).
      b2: decay of the infinity norm, in [0, 1).
      eps: added to `|g|` in the infinity norm, >= 0.
      cautious: cautious updates (not in optax; see
        :func:`gradax.transforms.cautious.caution`).
    """

    def init_state(self, params):
        return zero_moments(ScaleByAdamState, params)

    def update_state(self, updates, state, params=None, **extra_args):
        count = safe_increment(state.count)
        mu = gtree.update_moment(updates, state.mu, self.b1, 1)
        nu = gtree.update_infinity_moment(updates, state.nu, self.b2, self.eps)
        mu_hat = gtree.bias_correction(mu, self.b1, count)
        new_updates = jax.tree.map(lambda m, v: m / v, mu_hat, nu)
        if self.cautious:
            new_updates = caution(new_updates, updates)
        return new_updates, ScaleByAdamState(count=count, mu=mu, nu=nu)


class adamax(_AdamaxOptions, LearningRateAlias):
    r"""AdaMax: Adam with the infinity norm in place of the second moment.

    With gradient :math:`g_t` and step :math:`t \ge 1`:

    .. math::
      m_t = b_1 m_{t-1} + (1 - b_1) g_t,\quad
      v_t = \max(|g_t| + \epsilon,\ b_2 v_{t-1}),\quad
      u_t = -\eta_t \frac{m_t}{(1 - b_1^t)\, v_t}.

    Differences from optax: the keyword-only argument `cautious` is not in optax;
    the defaults give optax's numbers.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule.
      b1: decay of the first moment, in [0, 1).
      b2: decay of the infinity norm, in [0, 1).
      eps: :math:`\epsilon`, >= 0.
      cautious: cautious updates (keyword-only; see
        :func:`gradax.transforms.cautious.caution`).

    Returns:
      The optimizer, a gradient transformation.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.adamax(0.1)
      >>> _, state = tx.update(jnp.array([10.0]), tx.init(jnp.zeros(1)))
      >>> u, state = tx.update(jnp.array([1.0]), state)
      >>> print(u, state[0].nu)  # the infinity norm remembers the 10, decayed by b2
      [-0.05268425] [9.99]

    References:
      Kingma and Ba, Adam: A Method for Stochastic Optimization, 2014
      (arXiv:1412.6980), section 7.
    """

    def build(self):
        return chain(
            self.part(scale_by_adamax),
            scale_by_learning_rate(self.learning_rate),
        )


class adamaxw(CautiousDecoupledWeightDecay, _AdamaxOptions, LearningRateAlias):
    r"""AdaMaxW: AdaMax with decoupled weight decay.

    The direction of :class:`adamax` plus :math:`\lambda \theta_{t-1}`, all
    scaled by :math:`-\eta_t`.

    Differences from optax: the keyword-only arguments `cautious`,
    `cautious_weight_decay` are not in optax; the defaults give optax's numbers.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule.
      b1: decay of the first moment, in [0, 1).
      b2: decay of the infinity norm, in [0, 1).
      eps: >= 0.
      weight_decay: :math:`\lambda >= 0`, a number or a schedule.
      mask: a tree of booleans like the params (or a function of the params
        returning one) selecting the leaves that decay.
      cautious: cautious updates (keyword-only, not in optax).
      cautious_weight_decay: decay only where the AdaMax direction and the
        parameter agree in sign (keyword-only, not in optax; see
        :class:`add_cautious_decayed_weights`).

    Returns:
      The optimizer, a gradient transformation.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.adamaxw(0.1, weight_decay=0.5)
      >>> p = jnp.array([1.0, 1.0])
      >>> u, _ = tx.update(jnp.array([2.0, -4.0]), tx.init(p), p)
      >>> u
      Array([-0.15,  0.05], dtype=float32)

    References:
      Kingma and Ba, Adam: A Method for Stochastic Optimization, 2014
      (arXiv:1412.6980); Loshchilov and Hutter, Decoupled Weight Decay
      Regularization, 2019 (arXiv:1711.05101).
    """

    _direction = scale_by_adamax
