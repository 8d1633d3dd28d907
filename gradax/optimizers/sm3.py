"""SM3: memory-efficient adaptive steps from per-axis accumulators."""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .. import tree as gtree
from .._core.declarations import DECAY, LEARNING_RATE, NONNEGATIVE, UNIT, hyper
from .._core.numerics import abs_sq
from .._core.protocol import Alias, GradientTransformation
from ..combinators.chain import chain
from ..transforms.scaling import scale_by_learning_rate


class ScaleBySM3State(NamedTuple):
    """State of :class:`scale_by_sm3`."""

    mu: Any  # per leaf, a list of one real vector per axis (one scalar for rank 0)
    nu: Any  # momentum of the scaled updates, like params


def _axis_accumulators(p: Any) -> list[jax.Array]:
    """Zeros for each axis of `p` (one scalar if `p` is a scalar).

    Shapes come from `eval_shape` of a reduction, so that on a mesh with
    explicit axes each vector has the sharding of its axis.
    """
    if p.ndim == 0:
        return [jnp.zeros_like(jax.eval_shape(jnp.real, p))]
    out = []
    for axis in range(p.ndim):
        others = tuple(i for i in range(p.ndim) if i != axis)
        reduced = jax.eval_shape(lambda x, o=others: jnp.sum(jnp.real(x), axis=o), p)
        out.append(jnp.zeros_like(reduced))
    return out


def _broadcast_to_axis(v: jax.Array, shape: tuple[int, ...], axis: int) -> jax.Array:
    """Reshape the vector of `axis` to broadcast against `shape`."""
    return jnp.reshape(v, [1] * axis + [shape[axis]] + [1] * (len(shape) - axis - 1))


def _new_coefficient(b2: Any) -> Any:
    """Weight of the new squared gradient: `1 - b2`, or 1 when `b2 == 1`."""
    if isinstance(b2, (int, float)):
        return 1.0 if b2 == 1.0 else 1.0 - b2
    return jnp.where(b2 == 1.0, 1.0, 1.0 - b2)


class scale_by_sm3(GradientTransformation):
    """SM3's adaptive scaling with momentum (no learning rate).

    See :class:`sm3` for the update rule.

    Args:
      b1: decay of the momentum, in [0, 1).
      b2: decay of the accumulators, in [0, 1]; 1 (the default) accumulates
        without decay.
      eps: added to the accumulator under the square root, >= 0.
    """

    b1: Any = hyper(default=0.9, valid=DECAY)
    b2: Any = hyper(default=1.0, valid=UNIT)
    eps: Any = hyper(default=1e-8, valid=NONNEGATIVE)

    def init_state(self, params):
        return ScaleBySM3State(
            mu=jax.tree.map(_axis_accumulators, params),
            nu=gtree.zeros_like(params),
        )

    def update_state(self, updates, state, params=None, **extra_args):
        new_weight, b2, eps = _new_coefficient(self.b2), self.b2, self.eps

        def leaf(g, accumulators):
            cover = [
                _broadcast_to_axis(v, g.shape, i) if g.ndim else v
                for i, v in enumerate(accumulators)
            ]
            smallest = functools.reduce(jnp.minimum, cover)
            accum = new_weight * abs_sq(g) + b2 * smallest
            inv_sqrt = jnp.where(accum > 0, jax.lax.rsqrt(accum + eps), 0.0)
            if g.ndim < 2:
                new_accumulators = [accum]
            else:
                # initial=0 (accum >= 0): an axis of a leaf with no entries
                # gets zeros, not an error.
                new_accumulators = [
                    jnp.max(
                        accum,
                        axis=tuple(j for j in range(g.ndim) if j != i),
                        initial=0,
                    )
                    for i in range(g.ndim)
                ]
            return g * inv_sqrt, new_accumulators

        grads, treedef = jax.tree.flatten(updates)
        pairs = [
            leaf(g, v)
            for g, v in zip(grads, treedef.flatten_up_to(state.mu), strict=True)
        ]
        scaled = treedef.unflatten([s for s, _ in pairs])
        mu = treedef.unflatten([v for _, v in pairs])
        nu = gtree.update_moment(scaled, state.nu, self.b1, 1)
        return nu, ScaleBySM3State(mu=mu, nu=nu)


class sm3(Alias):
    r"""SM3: adaptive steps whose statistics take one vector per axis.

    For a leaf of shape :math:`(d_1, \ldots, d_k)`, SM3 keeps a vector
    :math:`\mu^{(i)}` of length :math:`d_i` per axis instead of Adagrad's
    full accumulator. Element by element (:math:`\mu^{(i)}` broadcast along
    the other axes; rank 0 and 1 leaves keep their full accumulator),

    .. math::
      a_t &= c\, |g_t|^2 + b_2 \min_i \mu^{(i)}_{t-1},\qquad
      c = \begin{cases} 1 & b_2 = 1 \\ 1 - b_2 & \text{else} \end{cases}\\
      \mu^{(i)}_t &= \max_{\text{axes} \ne i} a_t,\qquad
      \nu_t = b_1 \nu_{t-1} + (1 - b_1) \frac{g_t}{\sqrt{a_t + \epsilon}},
      \qquad u_t = -\eta_t \nu_t,

    with :math:`g/\sqrt{a + \epsilon} = 0` where :math:`a = 0`;
    :class:`sm3` uses :math:`b_2 = 1` and :math:`\epsilon = 10^{-8}`.

    Differences from optax: scalar parameters and complex parameters (using
    :math:`|g|^2`) work; optax fails on both. `learning_rate` may be a
    schedule.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule.
      momentum: :math:`b_1`, in [0, 1).

    Returns:
      The optimizer: `chain(scale_by_sm3(momentum),
      scale_by_learning_rate(learning_rate))`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.sm3(1.0, momentum=0.0)
      >>> state = tx.init(jnp.zeros((3, 2)))
      >>> [acc.shape for acc in state[0].mu]  # one accumulator per row, one per column
      [(3,), (2,)]

    References:
      Anil et al., Memory-Efficient Adaptive Optimization, NeurIPS 2019
      (arXiv:1901.11150).
    """

    learning_rate: Any = hyper(valid=LEARNING_RATE)
    momentum: Any = hyper(default=0.9, valid=DECAY)

    def build(self):
        return chain(
            scale_by_sm3(self.momentum), scale_by_learning_rate(self.learning_rate)
        )
