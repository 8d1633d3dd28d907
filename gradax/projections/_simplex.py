"""Projections onto the simplex and onto l1 spheres and balls."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from .. import tree as gtree


@jax.custom_jvp
def _unit_simplex(values: jax.Array) -> jax.Array:
    """Euclidean projection of a vector onto `{p >= 0, sum(p) = 1}`.

    The projection is `max(values - theta, 0)` for the threshold `theta`
    that makes it sum to one. With `u` the values sorted in decreasing
    order, the support has size `k`, the largest `i` with
    `u_i > (u_1 + ... + u_i - 1) / i`, and `theta = (u_1 + ... + u_k - 1) / k`
    (Held et al. 1974; Duchi et al. 2008).
    """
    # Half precision would round the running sums and the sizes (bfloat16
    # holds integers exactly only up to 256): work in at least float32.
    work = values.astype(jnp.promote_types(values.dtype, jnp.float32))
    descending = jnp.sort(work)[::-1]
    partial_sums = jnp.cumsum(descending)
    sizes = jnp.arange(1, work.shape[0] + 1, dtype=work.dtype)
    # Entries of the sorted vector that stay positive after their threshold;
    # they form a prefix, so counting them gives the support size k.
    k = jnp.count_nonzero(descending - (partial_sums - 1) / sizes > 0)
    theta = (partial_sums[k - 1] - 1) / k.astype(work.dtype)
    return jax.nn.relu(work - theta).astype(values.dtype)


@_unit_simplex.defjvp
def _unit_simplex_jvp(primals, tangents):
    # On the support S the projection is x - mean_S(x) + const, so its
    # Jacobian is diag(1_S) - 1_S 1_S^T / |S| (zero off the support).
    (values,), (direction,) = primals, tangents
    projected = _unit_simplex(values)
    support = (projected > 0).astype(values.dtype)
    mean_on_support = jnp.vdot(support, direction) / jnp.sum(support)
    return projected, support * (direction - mean_on_support)


def projection_simplex(tree: Any, scale: Any = 1) -> Any:
    r"""Projects a pytree onto the simplex of total mass `scale`.

    All leaves together form one vector :math:`x`:

    .. math::
      \operatorname{proj}(x) = \operatorname*{argmin}_{p}\ \|x - p\|_2^2
      \quad\text{subject to}\quad p \ge 0,\ \textstyle\sum_i p_i = \text{scale},

    whose solution is :math:`\max(x - \theta, 0)` for the scalar
    :math:`\theta` that gives the right sum, found by sorting in
    :math:`O(d \log d)`. Derivatives (forward and reverse mode) use the
    Jacobian of the projection, which is defined almost everywhere.

    Args:
      tree: pytree to project.
      scale: the sum of the projected entries, a positive scalar (default 1,
        the probability simplex).

    Returns:
      A pytree with the structure of `tree`.

    Example:
      >>> import jax.numpy as jnp
      >>> from gradax import projections
      >>> projections.projection_simplex(jnp.array([1.0, 0.5, -2.0]))
      Array([0.75, 0.25, 0.  ], dtype=float32)

    References:
      Held, Wolfe and Crowder, `Validation of subgradient optimization
      <https://doi.org/10.1007/BF01580223>`_, 1974; Duchi et al.,
      `Efficient projections onto the l1-ball for learning in high dimensions
      <https://doi.org/10.1145/1390156.1390191>`_, ICML 2008.
    """
    values, unravel = ravel_pytree(tree)
    return unravel(scale * _unit_simplex(values / scale))


def projection_l1_sphere(tree: Any, scale: Any = 1) -> Any:
    r"""Projects a pytree onto the l1 sphere of radius `scale`.

    .. math::
      \operatorname{proj}(x) =
      \operatorname*{argmin}_{\|p\|_1 = \text{scale}} \|x - p\|_2^2
      = \operatorname{sign}(x) \odot \operatorname{proj}_{\Delta}(|x|)

    where :math:`\operatorname{proj}_{\Delta}` is :func:`projection_simplex`
    with total mass `scale`.

    Args:
      tree: pytree to project.
      scale: radius of the sphere, a positive scalar.

    Returns:
      A pytree with the structure of `tree`.

    Example:
      >>> import jax.numpy as jnp
      >>> from gradax import projections
      >>> projections.projection_l1_sphere(jnp.array([1.0, -0.5, 0.0]))
      Array([ 0.75, -0.25,  0.  ], dtype=float32)
    """
    magnitudes = projection_simplex(jax.tree.map(jnp.abs, tree), scale)
    return gtree.mul(jax.tree.map(jnp.sign, tree), magnitudes)


def projection_l1_ball(tree: Any, scale: Any = 1) -> Any:
    r"""Projects a pytree onto the l1 ball of radius `scale`.

    .. math::
      \operatorname{proj}(x) =
      \operatorname*{argmin}_{\|p\|_1 \le \text{scale}} \|x - p\|_2^2

    A point inside the ball is returned unchanged (with an identity
    derivative); a point outside goes to :func:`projection_l1_sphere`.

    Args:
      tree: pytree to project.
      scale: radius of the ball, a positive scalar.

    Returns:
      `tree` if it is inside the ball, else its projection onto the sphere
      (:func:`projection_l1_sphere`); a pytree with the structure of `tree`.

    Example:
      >>> import jax.numpy as jnp
      >>> from gradax import projections
      >>> projections.projection_l1_ball({"w": jnp.array([2.0, -1.0])})
      {'w': Array([ 1., -0.], dtype=float32)}

    References:
      Duchi et al., `Efficient projections onto the l1-ball for learning in
      high dimensions <https://doi.org/10.1145/1390156.1390191>`_, ICML 2008.
    """
    inside = gtree.norm(tree, ord=1) <= scale
    return jax.lax.cond(
        inside, lambda t: t, lambda t: projection_l1_sphere(t, scale), tree
    )
