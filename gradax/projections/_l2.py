"""Projections onto l2 spheres and balls."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from .. import tree as gtree


def projection_l2_sphere(tree: Any, scale: Any = 1) -> Any:
    r"""Projects a pytree onto the l2 sphere of radius `scale`.

    All leaves together form one vector :math:`x`:

    .. math::
      \operatorname{proj}(x) =
      \operatorname*{argmin}_{\|p\|_2 = \text{scale}} \|x - p\|_2^2
      = \frac{\text{scale}}{\|x\|_2}\, x

    The zero vector has no unique projection; it gives NaNs.

    Args:
      tree: pytree to project.
      scale: radius of the sphere.

    Returns:
      A pytree with the structure of `tree`.

    Example:
      >>> import jax.numpy as jnp
      >>> from gradax import projections
      >>> projections.projection_l2_sphere(jnp.array([3.0, 4.0]))
      Array([0.6, 0.8], dtype=float32)
    """
    return gtree.scale(scale / gtree.norm(tree), tree)


def projection_l2_ball(tree: Any, scale: Any = 1) -> Any:
    r"""Projects a pytree onto the l2 ball of radius `scale`.

    All leaves together form one vector :math:`x`:

    .. math::
      \operatorname{proj}(x) =
      \operatorname*{argmin}_{\|p\|_2 \le \text{scale}} \|x - p\|_2^2
      = \frac{\text{scale}}{\max(\|x\|_2, \text{scale})}\, x

    The norm is taken of the squared norm clamped below by
    :math:`\text{scale}^2`, so the derivative at the origin is the identity,
    not NaN.

    Args:
      tree: pytree to project.
      scale: radius of the ball, a positive scalar.

    Returns:
      `tree` if it is inside the ball, else `tree` scaled onto the sphere; a
      pytree with the structure of `tree`.

    Example:
      >>> import jax.numpy as jnp
      >>> from gradax import projections
      >>> projections.projection_l2_ball({"w": jnp.array([3.0, 4.0])}, 2.5)
      {'w': Array([1.5, 2. ], dtype=float32)}
    """
    squared = gtree.norm(tree, squared=True)
    factor = scale / jnp.sqrt(jnp.maximum(squared, scale**2))
    return gtree.scale(factor, tree)
