"""Keeping only the direction of the updates: scale_by_sign and
normalize_by_update_norm."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from .. import tree as gtree
from .._core.declarations import ANY, NONNEGATIVE, hyper
from .._core.protocol import GradientTransformation


class scale_by_sign(GradientTransformation):
    r"""Replaces every update by its sign, element by element.

    :math:`u_t = \operatorname{sign}(g_t)`, with :math:`\operatorname{sign}(0)
    = 0`; a complex element :math:`z \ne 0` becomes :math:`z / |z|`. The
    building block of :class:`gradax.sign_sgd` and :class:`gradax.signum`.

    Returns:
      A transformation with an empty state.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.scale_by_sign()
      >>> tx.update(jnp.array([-3.0, 0.0, 0.2]), tx.init(None))[0]
      Array([-1.,  0.,  1.], dtype=float32)

    References:
      Bernstein et al., signSGD: Compressed Optimisation for Non-Convex
      Problems, ICML 2018 (arXiv:1802.04434).
    """

    def update_state(self, updates, state, params=None, **extra_args):
        signs = jax.tree.map(
            lambda g: None if g is None else jnp.sign(g),
            updates,
            is_leaf=lambda x: x is None,
        )
        return signs, state


class normalize_by_update_norm(GradientTransformation):
    r"""Divides the updates by their global Euclidean norm.

    With the norm :math:`\|g_t\|` over all leaves together,

    .. math::
      u_t = s\, \frac{g_t}{\|g_t\| + \epsilon}.

    Args:
      scale_factor: :math:`s`, any real number (negative flips the
        direction), an array or a schedule.
      eps: :math:`\epsilon \ge 0`, keeps a zero update finite.

    Returns:
      A transformation with an empty state.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.normalize_by_update_norm(eps=0.0)
      >>> tx.update({"a": jnp.array([3.0]), "b": jnp.array([4.0])}, tx.init(None))[0]
      {'a': Array([0.6], dtype=float32), 'b': Array([0.8], dtype=float32)}
    """

    scale_factor: Any = hyper(default=1.0, valid=ANY)
    eps: Any = hyper(default=1e-6, valid=NONNEGATIVE)

    def update_state(self, updates, state, params=None, **extra_args):
        # Same order of operations as optax: (norm + eps) / s, then divide.
        divisor = (gtree.norm(updates) + self.eps) / self.scale_factor
        updates = jax.tree.map(
            lambda g: None if g is None else g / divisor,
            updates,
            is_leaf=lambda x: x is None,
        )
        return updates, state
