"""optimistic_adam: optax's first interface to optimistic Adam."""

from __future__ import annotations

from dataclasses import KW_ONLY
from typing import Any

from .._core.declarations import ANY, LEARNING_RATE, hyper
from .._core.protocol import Alias
from ..combinators.chain import chain
from ..transforms.scaling import scale_by_learning_rate
from .adam import _ADAM, scale_by_adam
from .optimistic import scale_by_optimistic_gradient


class optimistic_adam(Alias):
    r"""Optimistic Adam with the learning rate inside the optimistic step.

    With :math:`r_t` the Adam direction of :class:`adam` (Nesterov by
    default) and optimism :math:`o` (default: :math:`\eta`):

    .. math::
      u_t = -\big(\eta\, r_t + o\,(r_t - r_{t-1})\big),

    with :math:`r_0 = r_1`. Prefer :class:`optimistic_adam_v2`, whose
    learning rate scales both terms and whose `alpha`, `beta` are the
    weights of :class:`optimistic_gradient_descent`; this is the older
    interface that optax 0.2.8 still exports (deprecated there).

    Differences from optax: `learning_rate` and `optimism` may be
    schedules (optax raises for a schedule); no deprecation warning.

    Args:
      learning_rate: :math:`\eta`, the weight of the current direction; a
        negative one ascends, as in optax, and building the optimizer warns.
      optimism: :math:`o`, the weight of its change, any real number; None
        for :math:`\eta` (so negative when :math:`\eta` is).
      b1: decay of the first moment, in [0, 1).
      b2: decay of the second moment, in [0, 1).
      eps: added to the denominator outside the square root, >= 0.
      eps_root: added inside the square root, >= 0.
      mu_dtype: dtype of the first moment.
      nesterov: use Nesterov momentum in Adam.

    Returns:
      The optimizer, a gradient transformation.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.optimistic_adam(0.1, optimism=0.0, nesterov=False)
      >>> u, _ = tx.update(jnp.array([2.0, -4.0]), tx.init(jnp.zeros(2)))
      >>> u.round(4)
      Array([-0.1,  0.1], dtype=float32)

    References:
      Daskalakis et al., Training GANs with Optimism, ICLR 2018
      (arXiv:1711.00141).
    """

    learning_rate: Any = hyper(valid=LEARNING_RATE)
    # Any sign: it defaults to the learning rate, so ascending with an explicit
    # optimism means writing a negative one, as optax accepts.
    optimism: Any = hyper(default=None, valid=ANY)
    b1: Any = _ADAM.field()  # Adam's options, passed on with self.part
    b2: Any = _ADAM.field()
    eps: Any = _ADAM.field()
    eps_root: Any = _ADAM.field()
    mu_dtype: Any = _ADAM.field()
    _: KW_ONLY
    nesterov: bool = _ADAM.field(default=True)

    # As in optax: this version is kept for compatibility only.
    _deprecation = (
        "`optimistic_adam` is deprecated, please use `optimistic_adam_v2` instead."
    )

    def build(self):
        optimism = self.learning_rate if self.optimism is None else self.optimism
        return chain(
            self.part(scale_by_adam),
            scale_by_optimistic_gradient(alpha=self.learning_rate, beta=optimism),
            scale_by_learning_rate(1.0),
        )
