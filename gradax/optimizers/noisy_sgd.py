"""Noisy SGD: gradient descent with annealed Gaussian noise."""

from __future__ import annotations

from dataclasses import KW_ONLY
from typing import Any

from .._core.declarations import LEARNING_RATE, NONNEGATIVE, hyper
from .._core.protocol import Alias
from ..combinators.chain import chain
from ..transforms.elementwise import KEY_OR_SEED, add_noise, check_key_or_seed
from ..transforms.scaling import scale_by_learning_rate


class noisy_sgd(Alias):
    r"""SGD with annealed Gaussian noise added to the gradients.

    At step :math:`t \ge 1`, with :math:`z_t \sim \mathcal N(0, I)`,

    .. math::
      u_t = -\eta_t \Big(g_t + \sqrt{\frac{\eta_{\text{noise}}}{t^{\gamma}}}
      \, z_t\Big).

    The PRNG key lives in the state (an :class:`gradax.AddNoiseState`), so a
    fixed `key` or `seed` gives the same noise every run.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule.
      eta: :math:`\eta_{\text{noise}} \ge 0`, the noise variance at the first
        step.
      gamma: :math:`\gamma \ge 0`, the annealing exponent.
      key: a PRNG key (`jax.random.key` or `jax.random.PRNGKey` data) or
        an integer seed; None means seed 0. It becomes a key in `init`.
      seed: an integer seed, the older spelling of `key` (give one or the
        other).

    Returns:
      The optimizer: `chain(add_noise(eta, gamma, key, seed=seed),
      scale_by_learning_rate(learning_rate))`.

    Example:
      >>> import jax, jax.numpy as jnp, gradax
      >>> tx = gradax.noisy_sgd(0.1, eta=0.0, key=0)
      >>> params = jnp.array([1.0, -2.0])
      >>> state = tx.init(params)
      >>> updates, state = tx.update(jnp.array([1.0, 1.0]), state)
      >>> gradax.apply_updates(params, updates)
      Array([ 0.9, -2.1], dtype=float32)

    References:
      Neelakantan et al., Adding Gradient Noise Improves Learning for Very
      Deep Networks, 2015 (arXiv:1511.06807).
    """

    learning_rate: Any = hyper(valid=LEARNING_RATE)
    eta: Any = hyper(default=0.01, valid=NONNEGATIVE)
    gamma: Any = hyper(default=0.55, valid=NONNEGATIVE)
    key: Any = KEY_OR_SEED.field()
    _: KW_ONLY
    seed: int | None = KEY_OR_SEED.field()

    def __check_init__(self):
        check_key_or_seed(self, "noisy_sgd")

    def build(self):
        return chain(
            self.part(add_noise),
            scale_by_learning_rate(self.learning_rate),
        )
