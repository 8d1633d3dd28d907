"""Wrappers about the layout of updates: flatten, freeze, apply_every."""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import tree as gtree
from .._core.axes import ravel, reshape_like
from .._core.declarations import PERIOD, hyper
from .._core.numerics import safe_increment
from .._core.protocol import (
    Alias,
    GradientTransformation,
    TransformationLike,
    transformation_field,
    zero_count,
)
from .._core.pytree import is_tree_function, static_field
from .._core.simple import set_to_zero
from .masked import masked, partition


def _as_vector(tree: Any) -> jax.Array:
    """All leaves of `tree` raveled and joined into one vector."""
    leaves = jax.tree.leaves(tree)
    if not leaves:
        return jnp.zeros((0,))
    return jnp.concatenate([ravel(jnp.asarray(x)) for x in leaves])


def _from_vector(vector: jax.Array, like: Any) -> Any:
    """Cut `vector` into the shapes of the leaves of `like`."""
    leaves, treedef = jax.tree.flatten(like)
    sizes = [int(np.size(x)) for x in leaves]
    pieces = jnp.split(vector, np.cumsum(sizes)[:-1]) if leaves else []
    return jax.tree.unflatten(
        treedef,
        [reshape_like(p, x) for p, x in zip(pieces, leaves, strict=True)],
    )


class flatten(GradientTransformation):
    """Runs `inner` on one vector holding all parameters.

    The updates (and params) are raveled and concatenated into a single vector
    before the inner transformation, whose result is cut back into the
    original shapes. Many small leaves then cost one kernel instead of many,
    for a little more memory. Leaves of different dtypes are promoted to a
    common one in the vector; the updates returned have the gradients' dtypes.

    Args:
      inner: the inner transformation (gradax or optax). Its state is that of
        a single vector parameter.

    Returns:
      A transformation whose state is the inner state.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> params = {"w": jnp.ones((2, 2)), "b": jnp.ones(3)}
      >>> tx = gradax.flatten(gradax.adam(0.1))
      >>> state = tx.init(params)
      >>> state[0].mu.shape
      (7,)
      >>> tx.update(params, state)[0]["w"].shape
      (2, 2)
    """

    inner: TransformationLike = transformation_field()

    def init_state(self, params):
        return self.inner.init(_as_vector(params))

    def update_state(self, updates, state, params=None, **extra_args):
        flat_updates = _as_vector(updates)
        flat_params = None if params is None else _as_vector(params)
        try:
            new_flat, state = self.inner.update(
                flat_updates, state, flat_params, **extra_args
            )
        except (TypeError, ValueError) as err:
            raise ValueError(
                f"flatten: the inner transformation failed on the flattened "
                f"updates ({flat_updates.size} elements from "
                f"{len(jax.tree.leaves(updates))} leaves). Do the updates have "
                "the leaves and shapes of the params given to init?"
            ) from err
        return _from_vector(new_flat, updates), state


class freeze(Alias):
    """Sets the updates of the selected parameters to zero.

    Chain it with an optimizer to keep some parameters fixed, or use
    :class:`selective_transform`, which also keeps the optimizer's state off
    the frozen leaves.

    Args:
      mask: True freezes. A single boolean (all or nothing), or a tree of
        booleans like the params (or a prefix of it). It must be static.

    Returns:
      A transformation equal to `masked(set_to_zero(), mask)`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> params = {"a": jnp.ones(2), "b": jnp.ones(2)}
      >>> tx = gradax.freeze({"a": True, "b": False})
      >>> tx.update(params, tx.init(params))[0]
      {'a': Array([0., 0.], dtype=float32), 'b': Array([1., 1.], dtype=float32)}
    """

    mask: Any = static_field(converter=lambda mask, name: _static_mask(mask, name))

    def build(self):
        return masked(set_to_zero(), self.mask)


def _static_mask(mask: Any, name: str) -> Any:
    """A mask with Python booleans as leaves (arrays would not be static)."""

    def leaf(m):
        if isinstance(m, (bool, np.bool_)):
            return bool(m)
        if isinstance(m, (np.ndarray, jax.Array)) and np.shape(m) == ():
            if isinstance(m, jax.core.Tracer):
                raise ValueError(f"{name} must be static, got a traced value {m}")
            return bool(m)
        raise ValueError(
            f"{name} must hold booleans (True: frozen), got {type(m).__name__}: {m!r}"
        )

    if is_tree_function(mask):
        return mask
    return jax.tree.map(leaf, mask)


class selective_transform(Alias):
    """Runs an optimizer on the unfrozen parameters only; the rest get zeros.

    Unlike chaining :class:`freeze`, the optimizer keeps no state for frozen
    leaves.

    Args:
      optimizer: the optimizer of the trained leaves (gradax or optax).
      freeze_mask: True freezes. A single boolean, or a tree of booleans like
        the params (or a prefix of it). It must be static.

    Returns:
      A transformation equal to `partition({"train": optimizer, "freeze":
      set_to_zero()}, labels)` with labels from `freeze_mask`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> params = {"a": jnp.ones(2), "b": jnp.ones(2)}
      >>> mask = {"a": True, "b": False}
      >>> tx = gradax.selective_transform(gradax.adam(0.1), freeze_mask=mask)
      >>> state = tx.init(params)
      >>> tx.update(params, state)[0]["a"]
      Array([0., 0.], dtype=float32)
      >>> gradax.tree.get(state, "mu")  # no Adam moments for the frozen leaf
      {'a': MaskedNode(), 'b': Array([0., 0.], dtype=float32)}
    """

    optimizer: TransformationLike = transformation_field()
    freeze_mask: Any = static_field(
        kw_only=True, converter=lambda mask, name: _static_mask(mask, name)
    )

    def build(self):
        mask = self.freeze_mask
        if is_tree_function(mask):
            labels = functools.partial(_labels_from_mask_fn, mask)
        else:
            labels = _freeze_labels(mask)
        return partition({"train": self.optimizer, "freeze": set_to_zero()}, labels)


def _freeze_labels(mask: Any) -> Any:
    return jax.tree.map(lambda m: "freeze" if m else "train", mask)


def _labels_from_mask_fn(mask_fn: Any, tree: Any) -> Any:
    return _freeze_labels(mask_fn(tree))


class ApplyEvery(NamedTuple):
    """State of :class:`apply_every`."""

    count: jax.Array  # int32 scalar: position in the period, in [0, k)
    grad_acc: Any  # like params: the sum of this period's updates


class apply_every(GradientTransformation):
    """Sums updates over `k` steps and emits the sum every `k`-th step.

    On the other steps the updates are zeros. Unlike :class:`MultiSteps`, the
    transformations chained before this one still run (and change their
    state) at every step, so it is not the same as a `k` times larger batch.

    Args:
      k: the period, an integer >= 1.

    Returns:
      A transformation with state :class:`ApplyEvery`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.apply_every(k=2)
      >>> state = tx.init(jnp.zeros(2))
      >>> updates, state = tx.update(jnp.ones(2), state)
      >>> updates
      Array([0., 0.], dtype=float32)
      >>> tx.update(jnp.ones(2), state)[0]
      Array([2., 2.], dtype=float32)
    """

    # A period, not a schedule: the state's count runs modulo it.
    k: Any = hyper(default=1, valid=PERIOD, schedule=False)

    def init_state(self, params):
        return ApplyEvery(count=zero_count(), grad_acc=gtree.zeros_like(params))

    def update_state(self, updates, state, params=None, **extra_args):
        phase = state.count % self.k
        keep = phase != 0
        grad_acc = jax.tree.map(
            lambda g, acc: jnp.where(keep, acc + g, g), updates, state.grad_acc
        )
        emit = phase == self.k - 1
        new_updates = jax.tree.map(
            lambda acc: jnp.where(emit, acc, jnp.zeros_like(acc)), grad_acc
        )
        return new_updates, ApplyEvery(
            count=safe_increment(state.count) % self.k, grad_acc=grad_acc
        )
