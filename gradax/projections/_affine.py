"""Projections onto a line, a hyperplane and a halfspace."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from .. import tree as gtree


def projection_vector(x: Any, a: Any) -> Any:
    r"""Projects a pytree onto the line spanned by another.

    .. math::
      \operatorname{proj}_a(x) = \frac{\langle x, a\rangle}{\langle a, a\rangle}\, a

    Args:
      x: pytree to project.
      a: pytree with the structure of `x`, spanning the line (nonzero).

    Returns:
      A pytree with the structure of `x`.

    Example:
      >>> from gradax import projections
      >>> projections.projection_vector((1.0, 2.0), (3.0, 4.0))
      (Array(1.32, dtype=float32, weak_type=True), Array(1.76, dtype=float32, weak_type=True))
    """  # noqa: E501
    return gtree.scale(gtree.vdot(x, a) / gtree.vdot(a, a), a)


def projection_hyperplane(x: Any, a: Any, b: Any) -> Any:
    r"""Projects a pytree onto the hyperplane :math:`\langle a, y\rangle = b`.

    .. math::
      \operatorname{proj}(x) =
      \operatorname*{argmin}_{\langle a, y\rangle = b} \|x - y\|_2^2
      = x + \frac{b - \langle a, x\rangle}{\langle a, a\rangle}\, a

    Args:
      x: pytree to project.
      a: pytree with the structure of `x`, the hyperplane's normal (nonzero).
      b: scalar offset of the hyperplane.

    Returns:
      A pytree with the structure of `x`.

    Example:
      >>> import jax.numpy as jnp
      >>> from gradax import projections
      >>> projections.projection_hyperplane(
      ...     jnp.array([1.0, 2.0]), jnp.array([0.0, 1.0]), 0.5)
      Array([1. , 0.5], dtype=float32)
    """
    step = (b - gtree.vdot(x, a)) / gtree.vdot(a, a)
    return gtree.add_scale(x, step, a)


def projection_halfspace(x: Any, a: Any, b: Any) -> Any:
    r"""Projects a pytree onto the halfspace :math:`\langle a, y\rangle \le b`.

    .. math::
      \operatorname{proj}(x) =
      \operatorname*{argmin}_{\langle a, y\rangle \le b} \|x - y\|_2^2
      = x + \min\!\Big(0, \frac{b - \langle a, x\rangle}{\langle a, a\rangle}\Big)\, a

    A point already in the halfspace is returned unchanged.

    Args:
      x: pytree to project.
      a: pytree with the structure of `x`, the boundary's outward normal
        (nonzero).
      b: scalar offset of the boundary.

    Returns:
      `x` if it is in the halfspace, else its projection onto the boundary;
      a pytree with the structure of `x`.

    Example:
      >>> import jax.numpy as jnp
      >>> from gradax import projections
      >>> a = jnp.array([0.0, 1.0])
      >>> for x in ([1.0, 2.0], [1.0, 0.0]):  # outside, then inside
      ...     print(projections.projection_halfspace(jnp.array(x), a, 0.5))
      [1.  0.5]
      [1. 0.]
    """
    step = jnp.minimum((b - gtree.vdot(x, a)) / gtree.vdot(a, a), 0)
    return gtree.add_scale(x, step, a)
