"""RMSProp, plain or centered, with optional momentum."""

from __future__ import annotations

from typing import Any

from .._core.declarations import DECAY, LEARNING_RATE, NONNEGATIVE, UNIT, hyper
from .._core.protocol import Alias
from .._core.pytree import static_field
from .._core.simple import identity
from ..combinators.chain import chain
from ..transforms.momentum import trace
from ..transforms.rms import check_rms_decay, scale_by_rms, scale_by_stddev
from ..transforms.scaling import scale_by_learning_rate


class rmsprop(Alias):
    r"""RMSProp: steps divided by a moving root mean square of the gradients.

    With gradient :math:`g_t`, decay :math:`\rho` and :math:`v_0` =
    `initial_scale`:

    .. math::
      v_t = \rho v_{t-1} + (1 - \rho) |g_t|^2,\quad
      u_t = -\eta_t \frac{g_t}{\sqrt{v_t + \epsilon}}.

    Centered, with :math:`m_t = \rho m_{t-1} + (1 - \rho) g_t`, the
    denominator is :math:`\sqrt{v_t - |m_t|^2 + \epsilon}`. With
    `eps_in_sqrt=False` :math:`\epsilon` is added outside the root; with
    `bias_correction=True` :math:`m_t, v_t` are divided by
    :math:`1 - \rho^t`. A `momentum` :math:`\mu` then accumulates the
    scaled steps as :class:`trace` does.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule.
      decay: :math:`\rho`, in [0, 1] ([0, 1) with bias correction).
      eps: :math:`\epsilon`, >= 0.
      initial_scale: :math:`v_0`, >= 0.
      eps_in_sqrt: add :math:`\epsilon` inside the square root.
      centered: divide by the standard deviation instead of the root mean
        square.
      momentum: :math:`\mu` in [0, 1), or None for no momentum.
      nesterov: Nesterov momentum.
      bias_correction: correct the moving averages' bias towards zero.

    Returns:
      The optimizer, a gradient transformation.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.rmsprop(0.1, decay=0.99)
      >>> u, _ = tx.update(jnp.array([2.0, -4.0]), tx.init(jnp.zeros(2)))
      >>> u.round(4)  # not debiased: lr / sqrt(1 - decay) at the first step
      Array([-1.,  1.], dtype=float32)

    References:
      Hinton, Lecture 6e of Neural Networks for Machine Learning, 2012;
      Graves, Generating Sequences With Recurrent Neural Networks, 2013
      (arXiv:1308.0850) for the centered form.
    """

    learning_rate: Any = hyper(valid=LEARNING_RATE)
    decay: Any = hyper(default=0.9, valid=UNIT)
    eps: Any = hyper(default=1e-8, valid=NONNEGATIVE)
    initial_scale: Any = hyper(default=0.0, valid=NONNEGATIVE)
    eps_in_sqrt: bool = static_field(default=True)
    centered: bool = static_field(default=False)
    momentum: Any = hyper(default=None, valid=DECAY)
    nesterov: bool = static_field(default=False)
    bias_correction: bool = static_field(default=False)

    def __check_init__(self):
        check_rms_decay(self)  # decay < 1 with bias_correction

    def build(self):
        direction = scale_by_stddev if self.centered else scale_by_rms
        return chain(
            self.part(direction),
            scale_by_learning_rate(self.learning_rate),
            identity()
            if self.momentum is None
            else trace(self.momentum, self.nesterov),
        )
