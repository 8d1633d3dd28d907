"""Projections onto boxes: the non-negative orthant, boxes, hypercubes, l-inf balls."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp


def _clip_prefix(tree: Any, lower: Any, upper: Any) -> Any:
    """Clips `tree` leaf by leaf; a bound may be a prefix of `tree`.

    A bound that is a single number (or array) applies to every leaf below
    it, so `lower=0.0` works for a whole dict of arrays.
    """

    def fill(bound: Any) -> Any:
        return jax.tree.map(lambda b, sub: jax.tree.map(lambda _: b, sub), bound, tree)

    return jax.tree.map(jnp.clip, tree, fill(lower), fill(upper))


def projection_non_negative(tree: Any) -> Any:
    r"""Projects a pytree onto the non-negative orthant.

    .. math::
      \operatorname{proj}(x) = \operatorname*{argmin}_{p \ge 0} \|x - p\|_2^2
      = \max(x, 0)

    Args:
      tree: pytree to project.

    Returns:
      A pytree with the structure of `tree`: each leaf with its negative
      entries set to zero.

    Example:
      >>> import jax.numpy as jnp
      >>> from gradax import projections
      >>> projections.projection_non_negative({"w": jnp.array([-1.0, 2.0])})
      {'w': Array([0., 2.], dtype=float32)}
    """
    return jax.tree.map(jax.nn.relu, tree)


def projection_box(tree: Any, lower: Any, upper: Any) -> Any:
    r"""Projects a pytree onto a box.

    .. math::
      \operatorname{proj}(x) =
      \operatorname*{argmin}_{\ell \le p \le u} \|x - p\|_2^2
      = \min(\max(x, \ell), u)

    Args:
      tree: pytree to project.
      lower: the lower bound :math:`\ell`: a scalar, or a pytree with the
        structure of `tree` (more generally, a prefix of it: a bound at
        a node applies to every leaf below).
      upper: the upper bound :math:`u`, in the same forms as `lower`.

    Returns:
      A pytree with the structure of `tree`.

    Example:
      >>> import jax.numpy as jnp
      >>> from gradax import projections
      >>> projections.projection_box(jnp.array([-1.0, 0.5, 3.0]), 0.0, 2.0)
      Array([0. , 0.5, 2. ], dtype=float32)
    """
    return _clip_prefix(tree, lower, upper)


def projection_hypercube(tree: Any, scale: Any = 1) -> Any:
    r"""Projects a pytree onto the hypercube :math:`[0, \text{scale}]^d`.

    .. math::
      \operatorname{proj}(x) =
      \operatorname*{argmin}_{0 \le p \le \text{scale}} \|x - p\|_2^2

    This is :func:`projection_box` with `lower=0` and `upper=scale`.

    Args:
      tree: pytree to project.
      scale: side of the hypercube: a scalar or a pytree like `tree`
        (default 1, the unit hypercube).

    Returns:
      A pytree with the structure of `tree`.

    Example:
      >>> import jax.numpy as jnp
      >>> from gradax import projections
      >>> projections.projection_hypercube(jnp.array([-1.0, 0.5, 3.0]))
      Array([0. , 0.5, 1. ], dtype=float32)
    """
    return _clip_prefix(tree, 0, scale)


def projection_linf_ball(tree: Any, scale: Any = 1) -> Any:
    r"""Projects a pytree onto the l-infinity ball of radius `scale`.

    .. math::
      \operatorname{proj}(x) =
      \operatorname*{argmin}_{\|p\|_\infty \le \text{scale}} \|x - p\|_2^2
      = \min(\max(x, -\text{scale}), \text{scale})

    Args:
      tree: pytree to project.
      scale: radius of the ball, a scalar.

    Returns:
      A pytree with the structure of `tree`; every leaf keeps its dtype.

    Example:
      >>> import jax.numpy as jnp
      >>> from gradax import projections
      >>> projections.projection_linf_ball(jnp.array([-3.0, 0.5, 2.0]), 1.0)
      Array([-1. ,  0.5,  1. ], dtype=float32)
    """

    def clip(x: Any) -> jax.Array:
        # Bounds in the leaf's dtype, so a float32 radius keeps bfloat16 leaves.
        return jnp.clip(x, jnp.full_like(x, -scale), jnp.full_like(x, scale))

    return jax.tree.map(clip, tree)
