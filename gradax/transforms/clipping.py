"""Clipping updates: element-wise, by global norm, per block, per unit, per example.

Complex updates are clipped by their modulus wherever a norm is involved
(:class:`clip_by_global_norm`, :class:`clip_by_block_rms`,
:class:`adaptive_grad_clip`); element-wise :class:`clip` needs real updates.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from .. import tree as gtree
from .._core.declarations import NONNEGATIVE, Range, Spec, hyper, validate
from .._core.numerics import abs_sq
from .._core.protocol import EmptyState, GradientTransformation
from .._core.pytree import static_field

ClipState = EmptyState
ClipByGlobalNormState = EmptyState
AdaptiveGradClipState = EmptyState

# A bound on a norm or a value: >= 0, and inf means "no clipping".
CLIP_BOUND = Range(0.0, allow_inf=True)


class clip(GradientTransformation):
    """Clips every element of the updates to `[-max_delta, max_delta]`.

    Args:
      max_delta: the largest allowed absolute value, >= 0 (inf: no
        clipping); a number, an array or a schedule.

    Returns:
      A transformation with an empty state.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.clip(1.0)
      >>> tx.update(jnp.array([-3.0, 0.5, 2.0]), tx.init(None))[0]
      Array([-1. ,  0.5,  1. ], dtype=float32)
    """

    max_delta: Any = hyper(valid=CLIP_BOUND)

    def update_state(self, updates, state, params=None, **extra_args):
        return gtree.clip(updates, -self.max_delta, self.max_delta), state


class clip_by_block_rms(GradientTransformation):
    r"""Clips each leaf ("block") of the updates to a root-mean-square threshold.

    Each leaf :math:`u` becomes :math:`u / \max(1, \mathrm{rms}(u) / \tau)`,
    with :math:`\mathrm{rms}(u) = \sqrt{\mathrm{mean}(|u|^2)}`.

    Args:
      threshold: :math:`\tau`, the largest allowed rms of a leaf, >= 0 (inf:
        no clipping).

    Returns:
      A transformation with an empty state.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.clip_by_block_rms(1.0)
      >>> tx.update(jnp.array([3.0, 4.0]), tx.init(None))[0]
      Array([0.84852815, 1.1313709 ], dtype=float32)
    """

    threshold: Any = hyper(valid=CLIP_BOUND)

    def update_state(self, updates, state, params=None, **extra_args):
        threshold = self.threshold

        def shrink(u):
            rms = jnp.sqrt(jnp.mean(abs_sq(u)))
            return u / jnp.maximum(1.0, rms / threshold)

        return jax.tree.map(shrink, updates), state


class clip_by_global_norm(GradientTransformation):
    r"""Rescales the updates so that their global norm is at most `max_norm`.

    With :math:`\|g\|` the Euclidean norm of all elements of all leaves,
    :math:`u = g` if :math:`\|g\| < c`, else :math:`u = (g / \|g\|)\, c`.

    Args:
      max_norm: :math:`c`, >= 0 (inf: no clipping); a number, a scalar array
        or a schedule.

    Returns:
      A transformation with an empty state.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.clip_by_global_norm(1.0)
      >>> tx.update({"a": jnp.array([3.0]), "b": jnp.array([4.0])}, tx.init(None))[0]
      {'a': Array([0.6], dtype=float32), 'b': Array([0.8], dtype=float32)}

    References:
      Pascanu et al., On the difficulty of training recurrent neural networks,
      ICML 2013 (arXiv:1211.5063).
    """

    max_norm: Any = hyper(valid=CLIP_BOUND)

    def update_state(self, updates, state, params=None, **extra_args):
        max_norm = self.max_norm
        g_norm = gtree.norm(updates)
        keep = jnp.squeeze(g_norm < max_norm)
        if keep.ndim != 0:
            raise ValueError(
                f"clip_by_global_norm: max_norm must be a scalar, got shape "
                f"{jnp.shape(max_norm)}"
            )

        def rescale(t):
            clipped = (t / g_norm.astype(t.dtype)) * max_norm
            return jnp.where(keep, t, clipped.astype(t.dtype))

        return jax.tree.map(rescale, updates), state


def global_norm(updates: Any) -> jax.Array:
    """The Euclidean norm of all elements of a tree (same as `tree.norm`).

    Kept for optax compatibility; prefer :func:`gradax.tree.norm`.

    Args:
      updates: a tree of arrays.

    Returns:
      A scalar.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> gradax.global_norm([jnp.array([3.0]), jnp.array([4.0])])
      Array(5., dtype=float32)
    """
    return gtree.norm(updates)


# ----------------------------------------------------------------------------
# Unit-wise clipping (AGC).


def unitwise_norm(x: jax.Array, axis: int | tuple[int, ...] | None = None) -> jax.Array:
    """The Euclidean norm of each unit of `x`, broadcast to `x.shape`.

    A unit is what remains after reducing over `axis`. By default the axes
    follow common layer layouts: the whole array for scalars and vectors (also
    arrays with a single non-trivial axis), axis 0 for rank 2 and 3 (dense
    `[in, out]` and multi-head kernels), axes 0-2 for rank 4 (HWIO
    convolutions) and axes 0-3 for rank 5 (3-D convolutions).

    Args:
      x: an array (real or complex).
      axis: the axes to reduce over; None picks them from the rank.

    Returns:
      A real array of the shape of `x`.

    Raises:
      ValueError: for rank above 5 with `axis=None`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> gradax.unitwise_norm(jnp.array([[3.0, 1.0], [4.0, 0.0]]))
      Array([[5., 1.],
             [5., 1.]], dtype=float32)
    """
    x = jnp.asarray(x)
    sq = abs_sq(x)
    if axis is not None:
        total = jnp.sum(sq, axis=axis, keepdims=True)
    elif jnp.squeeze(x).ndim <= 1:
        total = jnp.sum(sq, keepdims=True)
    elif x.ndim in (2, 3):
        total = jnp.sum(sq, axis=0, keepdims=True)
    elif x.ndim in (4, 5):
        total = jnp.sum(sq, axis=tuple(range(x.ndim - 1)), keepdims=True)
    else:
        raise ValueError(
            f"unitwise_norm picks reduction axes for arrays of rank 1 to 5, got "
            f"shape {x.shape}; pass axis= for other shapes"
        )
    return jnp.broadcast_to(jnp.sqrt(total), x.shape)


def unitwise_clip(
    g_norm: jax.Array, max_norm: jax.Array, grad: jax.Array, div_eps: Any = 1e-6
) -> jax.Array:
    """`grad` where `g_norm < max_norm`, else `grad` rescaled to `max_norm`.

    Args:
      g_norm: unit-wise norms of `grad` (shape of `grad`).
      max_norm: unit-wise largest norms (shape of `grad`).
      grad: the array to clip.
      div_eps: floor of `g_norm` in the division, to avoid dividing by zero.

    Returns:
      An array like `grad`.
    """
    for name, value in (("g_norm", g_norm), ("max_norm", max_norm)):
        if jnp.shape(value) != jnp.shape(grad):
            raise ValueError(
                f"unitwise_clip: {name} has shape {jnp.shape(value)} but grad "
                f"has shape {jnp.shape(grad)}"
            )
    # A factor of exactly 1 where the norm is small: the same numbers as
    # selecting ``grad`` there, and a product (unlike a select) accepts a
    # replicated factor for a sharded ``grad`` on Explicit meshes.
    factor = jnp.where(
        g_norm < max_norm,
        jnp.ones_like(g_norm),
        max_norm / jnp.maximum(g_norm, div_eps),
    )
    return grad * factor


class adaptive_grad_clip(GradientTransformation):
    r"""Adaptive gradient clipping (AGC): bounds updates relative to the params.

    Unit by unit (see :func:`unitwise_norm`), with :math:`\|\cdot\|` the unit
    norm: :math:`u = g` if :math:`\|g\| < \lambda \max(\|\theta\|, \epsilon)`,
    else :math:`u = g\, \lambda \max(\|\theta\|, \epsilon) / \|g\|`.

    Args:
      clipping: :math:`\lambda`, the largest ratio of update norm to parameter
        norm, >= 0 (inf: no clipping).
      eps: :math:`\epsilon`, >= 0, so that zero-initialized params can move.
      axis: the axes a unit norm reduces over (see :func:`unitwise_norm`).

    Returns:
      A transformation with an empty state; `update` needs `params`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.adaptive_grad_clip(0.1)
      >>> p = jnp.array([3.0, 4.0])
      >>> tx.update(jnp.array([6.0, 8.0]), tx.init(p), p)[0]
      Array([0.3, 0.4], dtype=float32)

    References:
      Brock et al., High-Performance Large-Scale Image Recognition Without
      Normalization, 2021 (arXiv:2102.06171).
    """

    clipping: Any = hyper(valid=CLIP_BOUND)
    eps: Any = hyper(default=0.001, valid=NONNEGATIVE)
    axis: Any = static_field(default=None)

    def update_state(self, updates, state, params=None, **extra_args):
        if params is None:
            raise ValueError("adaptive_grad_clip needs params passed to update")
        clipping, eps, axis = self.clipping, self.eps, self.axis

        def agc(g, p):
            max_norm = clipping * jnp.maximum(unitwise_norm(p, axis), eps)
            return unitwise_clip(unitwise_norm(g, axis), max_norm, g)

        return jax.tree.map(agc, updates, params), state


# ----------------------------------------------------------------------------
# Per-example clipping (differential privacy). Functions, as in optax.


def _check_batched(grads: Any, name: str) -> None:
    leaves = jax.tree.leaves(grads)
    if not leaves:
        return
    batch = jnp.shape(leaves[0])[0] if jnp.ndim(leaves[0]) else None
    if batch is None or any(
        jnp.ndim(g) < 1 or jnp.shape(g)[0] != batch for g in leaves
    ):
        shapes = jax.tree.map(jnp.shape, grads)
        raise ValueError(
            f"{name} expects every leaf of grads to have the same leading batch "
            f"axis; got shapes {shapes}"
        )


# The per-example functions take their bound as an argument, not as a field:
# the same declaration, checked at the call.
_CLIP_BOUND_ARGUMENT = Spec(CLIP_BOUND, schedule=False, array=True, allow_none=False)


def _validate_clip_bound(name: str, value: Any) -> None:
    # Only Python numbers: these functions run inside jit, where a bound is
    # traced, and reading a concrete array here would wait on the device.
    if isinstance(value, (int, float)):
        validate(name, value, _CLIP_BOUND_ARGUMENT)


def per_example_global_norm_clip(
    grads: Any, l2_norm_clip: Any
) -> tuple[Any, jax.Array]:
    r"""Clips each example's gradient by its global norm, then sums over examples.

    Example :math:`i` with gradient :math:`g_i` (all leaves together) is
    weighted by :math:`\min(1, C / \|g_i\|)` (1 when the norm is 0).

    Args:
      grads: a tree whose leaves all have a leading batch axis.
      l2_norm_clip: :math:`C`, the largest per-example norm, >= 0 (inf: no
        clipping).

    Returns:
      `(sum, num_clipped)`: the sum of the clipped gradients (a tree like
      `grads` without the batch axis) and the number of examples clipped.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> grads = [jnp.array([[0.0, 6.0, 8.0], [0.0, 3.0, 4.0]])]
      >>> gradax.per_example_global_norm_clip(grads, 5.0)
      ([Array([0., 6., 8.], dtype=float32)], Array(1, dtype=int32))

    References:
      Abadi et al., Deep Learning with Differential Privacy, 2016
      (arXiv:1607.00133).
    """
    _check_batched(grads, "per_example_global_norm_clip")
    _validate_clip_bound("l2_norm_clip", l2_norm_clip)
    norms = jax.vmap(gtree.norm)(grads)
    weights = jnp.nan_to_num(jnp.minimum(l2_norm_clip / norms, 1.0), nan=1.0)
    num_clipped = jnp.sum(weights < 1.0)
    total = jax.tree.map(lambda g: jnp.tensordot(weights, g, axes=1), grads)
    return total, num_clipped


def per_example_layer_norm_clip(
    grads: Any, global_l2_norm_clip: Any, uniform: bool = True
) -> tuple[Any, Any]:
    r"""Clips each example's gradient leaf by leaf, then sums over examples.

    Leaf :math:`k` of :math:`K` is clipped as in
    :func:`per_example_global_norm_clip` with its own bound: :math:`C/\sqrt{K}`
    if `uniform`, else :math:`C\sqrt{D_k / D}` with :math:`D_k` the size of
    one example of leaf :math:`k` and :math:`D` the total.

    Args:
      grads: a tree whose leaves all have a leading batch axis.
      global_l2_norm_clip: :math:`C`, >= 0 (inf: no clipping).
      uniform: split :math:`C` equally between leaves (else by size).

    Returns:
      `(sums, num_clipped)`: two trees like `grads`, the sums of clipped
      gradients (without the batch axis) and, per leaf, the number of examples
      clipped.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> grads = {"w": jnp.array([[0.0, 6.0, 8.0], [0.0, 3.0, 4.0]])}
      >>> gradax.per_example_layer_norm_clip(grads, 5.0)
      ({'w': Array([0., 6., 8.], dtype=float32)}, {'w': Array(1, dtype=int32)})

    References:
      McMahan et al., Learning Differentially Private Recurrent Language
      Models, 2017 (arXiv:1710.06963).
    """
    _check_batched(grads, "per_example_layer_norm_clip")
    _validate_clip_bound("global_l2_norm_clip", global_l2_norm_clip)
    leaves, treedef = jax.tree.flatten(grads)
    if uniform:
        bounds = [global_l2_norm_clip * (1.0 / len(leaves)) ** 0.5 for _ in leaves]
    else:
        sizes = [math.prod(jnp.shape(g)[1:]) for g in leaves]
        total = sum(sizes)
        bounds = [global_l2_norm_clip * (size / total) ** 0.5 for size in sizes]
    results = [
        per_example_global_norm_clip(g, bound)
        for g, bound in zip(leaves, bounds, strict=True)
    ]
    sums = jax.tree.unflatten(treedef, [r[0] for r in results])
    counts = jax.tree.unflatten(treedef, [r[1] for r in results])
    return sums, counts
