"""Adam, AdamW and their Nesterov forms NAdam and NAdamW."""

from __future__ import annotations

from dataclasses import KW_ONLY
from typing import Any, NamedTuple

import jax

from .. import tree as gtree
from .._core.declarations import DECAY, NONNEGATIVE, Shared, hyper
from .._core.leaf_ops import arithmetic
from .._core.numerics import safe_increment
from .._core.protocol import GradientTransformation, LearningRateAlias, zero_count
from .._core.pytree import Module, static_field
from ..combinators.chain import chain
from ..precision.int8 import moment_zeros
from ..transforms.cautious import CautiousDecoupledWeightDecay, caution
from ..transforms.scaling import scale_by_learning_rate


class ScaleByAdamState(NamedTuple):
    """State of :class:`scale_by_adam`."""

    count: jax.Array  # int32 scalar
    mu: Any  # first moment, like params (mu_dtype)
    nu: Any  # second moment, like params (nu_dtype)


def zero_moments(state_type: Any, params: Any) -> Any:
    """`state_type(count, mu, nu)` at step 0: two zero moments like the params.

    The initial state of the Adam relatives whose moments keep the params'
    dtypes (adamax, radam, adabelief, acprop).
    """
    return state_type(
        count=zero_count(),
        mu=gtree.zeros_like(params),
        nu=gtree.zeros_like(params),
    )


def debiased_first_moment(
    mu: Any, grads: Any, b1: Any, count: Any, nesterov: bool
) -> Any:
    """`mu / (1 - b1**count)`, or its Nesterov look-ahead (NAdam)."""
    if not nesterov:
        return gtree.bias_correction(mu, b1, count)
    mu_hat = gtree.bias_correction(mu, b1, safe_increment(count))
    g_hat = gtree.bias_correction(grads, b1, count)
    op, (b1, keep) = arithmetic((mu_hat, g_hat), (b1, 1 - b1))
    return jax.tree.map(
        lambda m, g: op.add(op.mul(b1, m), op.mul(keep, g)), mu_hat, g_hat
    )


def adam_ratio(mu_hat: Any, nu_hat: Any, eps: Any, eps_root: Any) -> Any:
    """`mu_hat / (sqrt(nu_hat + eps_root) + eps)`, leaf by leaf."""
    op, (eps, eps_root) = arithmetic((mu_hat, nu_hat), (eps, eps_root))
    return jax.tree.map(
        lambda m, v: (
            None if m is None else op.div(m, op.add(op.sqrt(op.add(v, eps_root)), eps))
        ),
        mu_hat,
        nu_hat,
        is_leaf=lambda x: x is None,
    )


def adam_direction(tx: Any, mu_hat: Any, nu_hat: Any, grads: Any) -> Any:
    """Adam's step from the debiased moments, cautious when `tx.cautious` is.

    `tx` gives `eps`, `eps_root` and `cautious` (adam's, amsgrad's, yogi's).
    """
    direction = adam_ratio(mu_hat, nu_hat, tx.eps, tx.eps_root)
    return caution(direction, grads) if tx.cautious else direction


# Adam's options, declared once. lamb and the optimistic optimizers take
# some of them by name (with Shared.field); scale_by_adam and the optimizers
# that build it inherit them all from _AdamOptions.
_ADAM = Shared(
    b1=hyper(default=0.9, valid=DECAY),
    b2=hyper(default=0.999, valid=DECAY),
    eps=hyper(default=1e-8, valid=NONNEGATIVE),
    eps_root=hyper(default=0.0, valid=NONNEGATIVE),
    mu_dtype=static_field(default=None),
    nesterov=static_field(default=False),
    nu_dtype=static_field(default=None),
    cautious=static_field(default=False),
)


class _AdamOptions(Module):
    """The options of scale_by_adam, adam, adamw, nadam and nadamw."""

    _abstract = True

    b1: Any = _ADAM.field()
    b2: Any = _ADAM.field()
    eps: Any = _ADAM.field()
    eps_root: Any = _ADAM.field()
    mu_dtype: Any = _ADAM.field()
    _: KW_ONLY
    nesterov: bool = _ADAM.field()
    nu_dtype: Any = _ADAM.field()
    cautious: bool = _ADAM.field()


class scale_by_adam(_AdamOptions, GradientTransformation):
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
        Differences from optax: optax has no separate `nu_dtype`.
      cautious: mask the update where its sign disagrees with the gradient's
        (see :func:`gradax.transforms.cautious.caution`). Not in optax.
    """

    def init_state(self, params):
        return ScaleByAdamState(
            count=zero_count(),
            mu=gtree.zeros_like(params, dtype=self.mu_dtype),
            nu=moment_zeros(params, self.nu_dtype, nonnegative=True),
        )

    def update_state(self, updates, state, params=None, **extra_args):
        b1, b2 = self.b1, self.b2
        mu = gtree.update_moment(updates, state.mu, b1, 1)
        nu = gtree.update_moment_per_elem_norm(updates, state.nu, b2, 2)
        count = safe_increment(state.count)
        mu_hat = debiased_first_moment(mu, updates, b1, count, self.nesterov)
        nu_hat = gtree.bias_correction(nu, b2, count)
        new_updates = adam_direction(self, mu_hat, nu_hat, updates)
        # The moments keep the dtypes init gave them (the base class enforces it).
        return new_updates, ScaleByAdamState(count=count, mu=mu, nu=nu)


class _Adam(_AdamOptions, LearningRateAlias):
    """What adam and nadam share: the chain they build.

    Each is a concrete subclass of this base, never of the other, so a class
    is abstract or final; nadam changes only `nesterov`'s default.
    """

    _abstract = True

    def build(self):
        return chain(
            self.part(scale_by_adam), scale_by_learning_rate(self.learning_rate)
        )


class _AdamW(CautiousDecoupledWeightDecay, _AdamOptions, LearningRateAlias):
    """What adamw and nadamw share: Adam's direction with decoupled weight decay."""

    _abstract = True

    _direction = scale_by_adam


class adam(_Adam):
    r"""Adam: adaptive moment estimation.

    With gradient :math:`g_t`, step :math:`t \ge 1`:

    .. math::
      m_t = b_1 m_{t-1} + (1 - b_1) g_t,\quad
      v_t = b_2 v_{t-1} + (1 - b_2) g_t^2,\\
      u_t = -\eta_t \frac{m_t / (1 - b_1^t)}
            {\sqrt{v_t / (1 - b_2^t) + \bar\epsilon} + \epsilon}.

    With `nesterov=True` (NAdam, see :class:`nadam`) the first moment is
    replaced by :math:`b_1 m_t / (1 - b_1^{t+1}) + (1 - b_1) g_t / (1 -
    b_1^t)`. With `cautious=True` the direction is masked where its sign
    disagrees with :math:`g_t`, and the kept entries rescaled (see
    :func:`gradax.transforms.cautious.caution`).

    Differences from optax: the keyword-only arguments `nu_dtype`, `cautious`
    are not in optax; the defaults give optax's numbers.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule.
      b1: decay of the first moment, in [0, 1).
      b2: decay of the second moment, in [0, 1).
      eps: :math:`\epsilon`, >= 0.
      eps_root: :math:`\bar\epsilon`, >= 0.
      mu_dtype: dtype of the first moment.
      nesterov: use Nesterov momentum (NAdam).
      nu_dtype: dtype of the second moment (not in optax).
      cautious: cautious updates (C-Adam; not in optax).

    Returns:
      The optimizer, a gradient transformation.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.adam(0.1)
      >>> g = jnp.array([1e-3, -50.0])
      >>> u, state = tx.update(g, tx.init(g))
      >>> u.round(4)  # debiased: a first step of lr, whatever the gradient's size
      Array([-0.1,  0.1], dtype=float32)

    References:
      Kingma and Ba, Adam: A Method for Stochastic Optimization, 2014
      (arXiv:1412.6980); Liang et al., Cautious Optimizers: Improving Training
      with One Line of Code, 2024 (arXiv:2411.16085).
    """


class adamw(_AdamW):
    r"""Adam with decoupled weight decay (AdamW).

    The Adam direction of :class:`adam` plus :math:`\lambda \theta_{t-1}`,
    all scaled by :math:`-\eta_t`:
    :math:`u_t = -\eta_t (\hat m_t / (\sqrt{\hat v_t + \bar\epsilon} + \epsilon)
    + \lambda \theta_{t-1})`. With `cautious_weight_decay=True` the decay
    term is kept only where the Adam direction and :math:`\theta_{t-1}`
    agree in sign (see :class:`add_cautious_decayed_weights`).

    Differences from optax: the keyword-only arguments `nu_dtype`, `cautious`,
    `cautious_weight_decay` are not in optax; the defaults give optax's numbers.

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
      cautious: cautious updates (C-AdamW; not in optax).
      cautious_weight_decay: cautious weight decay (not in optax).

    Returns:
      The optimizer, a gradient transformation.

    Example:
      >>> import gradax
      >>> gradax.adamw(3e-4, b1=0.8, weight_decay=0.05).weight_decay
      0.05

    References:
      Loshchilov and Hutter, Decoupled Weight Decay Regularization, 2019
      (arXiv:1711.05101); Chen et al., Cautious Weight Decay, 2025
      (arXiv:2510.12402).
    """


class nadam(_Adam):
    r"""NAdam: Adam with Nesterov momentum (:class:`adam` with `nesterov=True`).

    With :math:`m_t, v_t` the moments of :class:`adam`:

    .. math::
      \hat m_t = \frac{b_1 m_t}{1 - b_1^{t+1}} + \frac{(1 - b_1) g_t}{1 - b_1^t},
      \quad u_t = -\eta_t \frac{\hat m_t}
      {\sqrt{v_t / (1 - b_2^t) + \bar\epsilon} + \epsilon}.

    Differences from optax: the keyword-only arguments `nu_dtype`, `cautious`
    are not in optax; the defaults give optax's numbers.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule.
      b1: decay of the first moment, in [0, 1).
      b2: decay of the second moment, in [0, 1).
      eps: :math:`\epsilon`, >= 0.
      eps_root: :math:`\bar\epsilon`, >= 0.
      mu_dtype: dtype of the first moment.
      nesterov: True (set False for plain Adam).
      nu_dtype: dtype of the second moment (not in optax).
      cautious: cautious updates (not in optax).

    Returns:
      The optimizer, a gradient transformation.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.nadam(0.1)
      >>> u, _ = tx.update(jnp.array([2.0, -4.0]), tx.init(jnp.zeros(2)))
      >>> u.round(4)
      Array([-0.1474,  0.1474], dtype=float32)

    References:
      Dozat, Incorporating Nesterov Momentum into Adam, ICLR workshop 2016.
    """

    nesterov: bool = static_field(default=True, kw_only=True)


class nadamw(_AdamW):
    r"""NAdamW: AdamW with Nesterov momentum (:class:`adamw` with `nesterov=True`).

    The NAdam direction of :class:`nadam` plus :math:`\lambda \theta_{t-1}`,
    all scaled by :math:`-\eta_t`.

    Differences from optax: the keyword-only arguments `nu_dtype`, `cautious`,
    `cautious_weight_decay` are not in optax; the defaults give optax's numbers.

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
      nesterov: True (set False for plain AdamW).
      nu_dtype: dtype of the second moment (not in optax).
      cautious: cautious updates (not in optax).
      cautious_weight_decay: cautious weight decay (not in optax).

    Returns:
      The optimizer, a gradient transformation.

    Example:
      >>> import gradax
      >>> gradax.nadamw(1e-3).nesterov
      True

    References:
      Dozat, Incorporating Nesterov Momentum into Adam, ICLR workshop 2016;
      Loshchilov and Hutter, Decoupled Weight Decay Regularization, 2019
      (arXiv:1711.05101).
    """

    nesterov: bool = static_field(default=True, kw_only=True)
