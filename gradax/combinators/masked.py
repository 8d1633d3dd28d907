"""Applying a transformation to part of the parameters: masked and partition."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Any, NamedTuple

import jax

from .._core.protocol import (
    GradientTransformation,
    TransformationLike,
    as_transformation,
    transformation_field,
)
from .._core.pytree import field, is_tree_function, static_field
from ..tree.params_placeholder import is_params_placeholder


class MaskedNode(NamedTuple):
    """Stands in for a leaf hidden by a mask (an empty pytree node)."""


class MaskedState(NamedTuple):
    """State of :class:`masked`."""

    inner_state: Any


def _describe_prefix_mismatch(prefix: Any, tree: Any, prefix_name: str) -> str:
    """Name a path where `prefix` is not a tree prefix of `tree`."""
    prefix_paths = [p for p, _ in jax.tree_util.tree_flatten_with_path(prefix)[0]]
    tree_paths = [p for p, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]
    for path in prefix_paths:
        covered = any(t[: len(path)] == path for t in tree_paths)
        if not covered:
            return (
                f"{prefix_name} has an entry at {jax.tree_util.keystr(path)} that "
                "the parameters do not have"
            )
    for path in tree_paths:
        if not any(path[: len(p)] == p for p in prefix_paths):
            return (
                f"the parameters have a leaf at {jax.tree_util.keystr(path)} that "
                f"{prefix_name} does not cover"
            )
    return (
        f"{prefix_name} has the same paths as the parameters but other "
        f"container types: {jax.tree.structure(prefix)} vs {jax.tree.structure(tree)}"
    )


def map_prefix(fn: Callable, prefix: Any, tree: Any, prefix_name: str) -> Any:
    """`jax.tree.map(fn, prefix, tree)` with an error that names a path."""
    try:
        jax.tree.structure(prefix).flatten_up_to(tree)
    except (ValueError, TypeError) as err:
        raise ValueError(
            f"{prefix_name} does not fit the parameters: "
            f"{_describe_prefix_mismatch(prefix, tree, prefix_name)}."
        ) from err
    return jax.tree.map(fn, prefix, tree)


def mask_tree(tree: Any, mask: Any, prefix_name: str = "mask") -> Any:
    """Replace the parts of `tree` where `mask` is False by MaskedNode."""
    return map_prefix(lambda m, t: t if m else MaskedNode(), mask, tree, prefix_name)


class masked(GradientTransformation):
    """Applies `inner` only where `mask` is True; other updates pass through.

    Args:
      inner: the transformation to apply to the selected leaves.
      mask: a tree of booleans with the structure of the params (or a prefix of
        it), or a function of the params/updates returning one.
      mask_compatible_extra_args: also mask extra arguments whose tree matches
        the updates.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> params = {"w": jnp.ones(2), "b": jnp.ones(2)}
      >>> tx = gradax.masked(gradax.scale(0.0), {"w": True, "b": False})
      >>> tx.update(params, tx.init(params))[0]["b"]
      Array([1., 1.], dtype=float32)
    """

    _checks_update_shapes = False  # the inner transformation checks

    inner: TransformationLike = transformation_field()
    mask: Any = static_field()
    mask_compatible_extra_args: bool = static_field(default=False, kw_only=True)

    def _mask_for(self, tree: Any) -> Any:
        return self.mask(tree) if is_tree_function(self.mask) else self.mask

    def init_state(self, params):
        # The stand-in of gradax.tree.map_params is never given to a mask
        # function (init_masked does not read the mask for it).
        mask = None if is_params_placeholder(params) else self._mask_for(params)
        return init_masked(self.inner, mask, params)

    def update_state(self, updates, state, params=None, **extra_args):
        mask = self._mask_for(updates)
        if self.mask_compatible_extra_args:
            extra_args = mask_extra_args(mask, updates, extra_args)
        return update_masked(self.inner, mask, updates, state, params, extra_args)


def mask_extra_args(mask: Any, updates: Any, extra_args: dict) -> dict:
    """`extra_args` with those shaped like the updates masked."""
    structure = jax.tree.structure(updates)
    return {
        k: mask_tree(v, mask) if jax.tree.structure(v) == structure else v
        for k, v in extra_args.items()
    }


def init_masked(inner: TransformationLike, mask: Any, params: Any) -> MaskedState:
    """`masked(inner, mask).init(params)`, for a mask already computed."""
    if is_params_placeholder(params):
        # gradax.tree.map_params asks where the params go: the stand-in has
        # no leaves for the mask to fit, and the inner state holds it whole
        # (as in optax; the state's masked leaves are empty nodes).
        return MaskedState(inner_state=inner.init(params))
    return MaskedState(inner_state=inner.init(mask_tree(params, mask)))


def update_masked(
    inner: TransformationLike,
    mask: Any,
    updates: Any,
    state: MaskedState,
    params: Any,
    extra_args: dict,
) -> tuple[Any, MaskedState]:
    """`masked(inner, mask).update(...)`'s rule, for a mask already computed
    (and extra arguments already masked where asked for)."""
    masked_params = None if params is None else mask_tree(params, mask)
    new_updates, inner_state = inner.update(
        mask_tree(updates, mask), state.inner_state, masked_params, **extra_args
    )
    merged = jax.tree.map(
        lambda m, new, old: new if m else old, mask, new_updates, updates
    )
    return merged, MaskedState(inner_state=inner_state)


class PartitionState(NamedTuple):
    """State of :class:`partition`: one masked state per label."""

    inner_states: dict[Hashable, MaskedState]


def _transformations_by_label(value: Any, name: str) -> dict:
    """Converter of `partition`'s `transforms`: label -> gradax transformation."""
    if not isinstance(value, Mapping):
        raise TypeError(
            f"{name} must be a mapping from label to transformation, got "
            f"{type(value).__name__}"
        )
    return {
        label: as_transformation(tx, f"{name}[{label!r}]")
        for label, tx in value.items()
    }


class partition(GradientTransformation):
    """Applies a different transformation to each group of parameters.

    This is the safe way to give parameter groups their own settings: label
    every leaf, and map each label to its transformation.

    Args:
      transforms: a mapping from label to transformation.
      param_labels: a tree of labels like the params (or a prefix of it), or a
        function of the params returning one.
      mask_compatible_extra_args: passed on to :class:`masked`.

    Raises:
      ValueError: if a label in `param_labels` has no transformation.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> params = {"w": jnp.ones(2), "b": jnp.ones(2)}
      >>> tx = gradax.partition(
      ...     {"decay": gradax.adamw(1e-3), "plain": gradax.adam(1e-3)},
      ...     {"w": "decay", "b": "plain"},
      ... )
      >>> state = tx.init(params)
    """

    _checks_update_shapes = False  # each group's transformation checks

    transforms: Mapping[Hashable, TransformationLike] = field(
        converter=_transformations_by_label
    )
    param_labels: Any = static_field()
    mask_compatible_extra_args: bool = static_field(default=False, kw_only=True)

    def _labels_for(self, tree: Any) -> Any:
        labels = self.param_labels
        labels = labels(tree) if is_tree_function(labels) else labels
        missing = set(jax.tree.leaves(labels)) - set(self.transforms)
        if missing:
            label = sorted(map(repr, missing))[0]
            raise ValueError(
                f"partition: the label {label} appears in param_labels but has no "
                f"transformation; known labels are {sorted(map(repr, self.transforms))}"
            )
        return labels

    # Each group is `masked(transforms[label], labels == label)`, applied
    # with the rule of masked directly: the labels are computed once per
    # call, and no transformation is built in init, update or a trace.

    def init_state(self, params):
        labels = self._labels_for(params)
        return PartitionState(
            inner_states={
                label: init_masked(tx, _is_label(labels, label), params)
                for label, tx in self.transforms.items()
            }
        )

    def update_state(self, updates, state, params=None, **extra_args):
        labels = self._labels_for(updates)
        new_states = {}
        for label, tx in self.transforms.items():
            mask = _is_label(labels, label)
            group_args = extra_args
            if self.mask_compatible_extra_args:
                group_args = mask_extra_args(mask, updates, extra_args)
            updates, new_states[label] = update_masked(
                tx, mask, updates, state.inner_states[label], params, group_args
            )
        return updates, PartitionState(inner_states=new_states)


def _is_label(labels: Any, label: Hashable) -> Any:
    """The mask of the leaves labelled `label`."""
    return jax.tree.map(lambda x: x == label, labels)


multi_transform = partition
