"""Adam and AdamW."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .. import tree as gtree
from .._core import Alias, GradientTransformation, safe_increment, zero_count
from .._hyper import check_decay, check_nonnegative
from .._pytree import static_field
from ..combinators.chain import chain
from ..transforms.scaling import scale_by_learning_rate
from ..transforms.weight_decay import add_decayed_weights


class ScaleByAdamState(NamedTuple):
    """State of :class:`scale_by_adam`."""

    count: jax.Array  # int32 scalar
    mu: Any  # first moment, like params (mu_dtype)
    nu: Any  # second moment, like params (nu_dtype)


def _check_adam(tx: Any) -> None:
    check_decay("b1", tx.b1)
    check_decay("b2", tx.b2)
    check_nonnegative("eps", tx.eps)
    check_nonnegative("eps_root", tx.eps_root)


class scale_by_adam(GradientTransformation):
    """Rescales updates by Adam's moment estimates (no learning rate).

    See :class:`adam` for the update rule.

    Args:
      b1: decay of the first moment, in [0, 1).
      b2: decay of the second moment, in [0, 1).
      eps: added to the denominator outside the square root, >= 0.
      eps_root: added inside the square root, >= 0.
      mu_dtype: dtype of the first moment (default: the parameters').
      nesterov: use Nesterov momentum (NAdam).
      nu_dtype: dtype of the second moment (default: the parameters').
        Differences from optax: optax has no separate ``nu_dtype``.
    """

    b1: Any = 0.9
    b2: Any = 0.999
    eps: Any = 1e-8
    eps_root: Any = 0.0
    mu_dtype: Any = static_field(None)
    nesterov: bool = static_field(False, kw_only=True)
    nu_dtype: Any = static_field(None, kw_only=True)

    def _check(self):
        _check_adam(self)

    def init(self, params):
        return ScaleByAdamState(
            count=zero_count(),
            mu=gtree.zeros_like(params, dtype=self.mu_dtype),
            nu=gtree.zeros_like(params, dtype=self.nu_dtype),
        )

    def update(self, updates, state, params=None, **extra_args):
        b1, b2 = self.b1, self.b2
        mu = gtree.update_moment(updates, state.mu, b1, 1)
        nu = gtree.update_moment_per_elem_norm(updates, state.nu, b2, 2)
        count = safe_increment(state.count)
        if self.nesterov:
            mu_hat = jax.tree.map(
                lambda m, g: b1 * m + (1 - b1) * g,
                gtree.bias_correction(mu, b1, safe_increment(count)),
                gtree.bias_correction(updates, b1, count),
            )
        else:
            mu_hat = gtree.bias_correction(mu, b1, count)
        nu_hat = gtree.bias_correction(nu, b2, count)
        eps, eps_root = self.eps, self.eps_root
        updates = jax.tree.map(
            lambda m, v: None if m is None else m / (jnp.sqrt(v + eps_root) + eps),
            mu_hat,
            nu_hat,
            is_leaf=lambda x: x is None,
        )
        # The moments keep the dtypes init gave them (the base class enforces it).
        return updates, ScaleByAdamState(count=count, mu=mu, nu=nu)


class adam(Alias):
    r"""Adam: adaptive moment estimation.

    With gradient :math:`g_t`, step :math:`t \ge 1`:

    .. math::
      m_t = b_1 m_{t-1} + (1 - b_1) g_t,\quad
      v_t = b_2 v_{t-1} + (1 - b_2) g_t^2,\\
      u_t = -\eta_t \frac{m_t / (1 - b_1^t)}
            {\sqrt{v_t / (1 - b_2^t) + \bar\epsilon} + \epsilon}.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule.
      b1: decay of the first moment, in [0, 1).
      b2: decay of the second moment, in [0, 1).
      eps: :math:`\epsilon`, >= 0.
      eps_root: :math:`\bar\epsilon`, >= 0.
      mu_dtype: dtype of the first moment.
      nesterov: use Nesterov momentum (NAdam).
      nu_dtype: dtype of the second moment (not in optax).

    Returns:
      The optimizer, a gradient transformation.

    Example:
      >>> import jax, jax.numpy as jnp, gradax
      >>> params = jnp.array([1.0, -2.0])
      >>> tx = gradax.adam(0.1)
      >>> state = tx.init(params)
      >>> updates, state = tx.update(jax.grad(lambda p: (p**2).sum())(params), state)
      >>> gradax.apply_updates(params, updates)
      Array([ 0.9, -1.9], dtype=float32)

    References:
      Kingma and Ba, Adam: A Method for Stochastic Optimization, 2014
      (arXiv:1412.6980).
    """

    learning_rate: Any
    b1: Any = 0.9
    b2: Any = 0.999
    eps: Any = 1e-8
    eps_root: Any = 0.0
    mu_dtype: Any = static_field(None)
    nesterov: bool = static_field(False, kw_only=True)
    nu_dtype: Any = static_field(None, kw_only=True)

    def _check(self):
        _check_adam(self)

    def build(self):
        return chain(
            scale_by_adam(
                self.b1,
                self.b2,
                self.eps,
                self.eps_root,
                self.mu_dtype,
                nesterov=self.nesterov,
                nu_dtype=self.nu_dtype,
            ),
            scale_by_learning_rate(self.learning_rate),
        )


class adamw(Alias):
    r"""Adam with decoupled weight decay (AdamW).

    The Adam direction of :class:`adam` plus :math:`\lambda \theta_{t-1}`,
    all scaled by :math:`-\eta_t`:
    :math:`u_t = -\eta_t (\hat m_t / (\sqrt{\hat v_t + \bar\epsilon} + \epsilon)
    + \lambda \theta_{t-1})`.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule.
      b1: decay of the first moment, in [0, 1).
      b2: decay of the second moment, in [0, 1).
      eps: >= 0.
      eps_root: >= 0.
      mu_dtype: dtype of the first moment.
      weight_decay: :math:`\lambda >= 0`, a number or a schedule.
      mask: a tree of booleans like the params (or a function of the params
        returning one) selecting the leaves that decay.
      nesterov: use Nesterov momentum.
      nu_dtype: dtype of the second moment (not in optax).

    Example:
      >>> import gradax
      >>> gradax.adamw(3e-4, b1=0.8, weight_decay=0.05).weight_decay
      0.05

    References:
      Loshchilov and Hutter, Decoupled Weight Decay Regularization, 2019
      (arXiv:1711.05101).
    """

    learning_rate: Any
    b1: Any = 0.9
    b2: Any = 0.999
    eps: Any = 1e-8
    eps_root: Any = 0.0
    mu_dtype: Any = static_field(None)
    weight_decay: Any = 1e-4
    mask: Any = static_field(None)
    nesterov: bool = static_field(False, kw_only=True)
    nu_dtype: Any = static_field(None, kw_only=True)

    def _check(self):
        _check_adam(self)
        check_nonnegative("weight_decay", self.weight_decay)

    def build(self):
        return chain(
            scale_by_adam(
                self.b1,
                self.b2,
                self.eps,
                self.eps_root,
                self.mu_dtype,
                nesterov=self.nesterov,
                nu_dtype=self.nu_dtype,
            ),
            add_decayed_weights(self.weight_decay, self.mask),
            scale_by_learning_rate(self.learning_rate),
        )
