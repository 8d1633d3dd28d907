"""What a transformation is made of, part by part, beside its state.

:func:`sites` walks a transformation down through its compositions (chains,
partitions, aliases, wrappers) and hands each part with the piece of the
state it keeps, before and after a step. :func:`group_labels` reads the
parameter groups off the same walk: the labels of the outermost
`partition` (the Muon family's "muon" and "adam" groups are one). The
walk reads only structure and the states it is given; it builds nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any, NamedTuple

import jax

from .._core.protocol import Alias, GradientTransformation, ScheduleState
from .._core.pytree import is_tree_function
from ..combinators.chain import chain, named_chain
from ..combinators.conditional import (
    apply_if_finite,
    conditionally_mask,
    conditionally_transform,
)
from ..combinators.masked import mask_tree, masked, partition
from ..combinators.multi_steps import MultiSteps
from ..combinators.offload import offload_state
from ..combinators.spikes import skip_loss_spikes
from ..orthogonal.groups import MuonGroups, routes_each_leaf
from ..precision.master import master_weights
from ..precision.rounding import stochastic_rounding
from ..precision.update_dtype import cast_updates
from ..sharding.zero import shard_state

# Wrappers that hand their inner transformation the gradients they are given
# (widened to float32 at most, which keeps their values), with its state in
# a field `inner_state` of their own.
_PASS_THROUGH_INNER_STATE = (
    apply_if_finite,
    skip_loss_spikes,
    conditionally_transform,
    conditionally_mask,
    master_weights,
    stochastic_rounding,
    offload_state,
)
# Wrappers whose state is the inner transformation's own, unchanged.
_PASS_THROUGH_SAME_STATE = (shard_state, cast_updates)


class Site(NamedTuple):
    """One part of a transformation, with the state it keeps.

    Attributes:
      tx: the part.
      old: its state as the step was given it (None when unknown).
      new: its state after the step (None when unknown).
      group: the parameter group it acts on (a label of the outermost
        partition), or None for the whole tree.
      raw: whether it receives the gradients the whole transformation was
        given (those of its group), unchanged.
      grouped: whether the parts below may still define the groups (they
        see the parameters' own tree, not a flattened or stacked one).
      host: whether its state lives in host memory (:class:`offload_state`).
      tree: the tree of updates it receives (a partition's group sees its
        leaves only), or None where not known.
    """

    tx: Any
    old: Any
    new: Any
    group: str | None
    raw: bool
    grouped: bool
    host: bool = False
    tree: Any = None


def _field(state: Any, name: str) -> Any:
    return None if state is None else getattr(state, name)


def _item(state: Any, key: Any) -> Any:
    return None if state is None else state[key]


def own_state(site: Site) -> tuple[Any, Any]:
    """The states of a part's contents: a :class:`ScheduleState` taken off."""
    old, new = site.old, site.new
    if isinstance(old, ScheduleState):
        return old.inner_state, _field(new, "inner_state")
    return old, new


def muon_parts(tx: MuonGroups, tree: Any | None) -> GradientTransformation | None:
    """The parts a Muon-family optimizer runs on `tree` (built once, held).

    None where they depend on a tree that is not known (the part's own tree
    differs from the one the whole transformation was given).
    """
    if routes_each_leaf(tx.muon_weight_dimension_numbers):
        return tx.parts()
    if tree is None:
        return None
    # A routing that reads the whole tree: the optimizer keeps the parts it
    # built for it (the ones its update runs), found by the same call.
    return tx.parts_for(tree, quiet=True)


def _wrapped(tx: Any) -> Any:
    """What a wrapper wraps: its field `inner` (or `tx`)."""
    part = getattr(tx, "inner", None)
    return part if part is not None else tx.tx


def _single_part(tx: Any) -> Any | None:
    """The one transformation among `tx`'s fields, or None."""
    parts = [
        getattr(tx, f.name)
        for f in dataclasses.fields(tx)
        if isinstance(getattr(tx, f.name, None), GradientTransformation)
    ]
    return parts[0] if len(parts) == 1 else None


def children(site: Site) -> list[Site]:
    """The parts directly inside `site`'s transformation, with their states."""
    tx, tree = site.tx, site.tree
    old, new = own_state(site)

    def inside(part: Any, state_field: str, **changes: Any) -> list[Site]:
        """The site of `part`, whose states are the field `state_field` of tx's."""
        old_part, new_part = _field(old, state_field), _field(new, state_field)
        return [site._replace(tx=part, old=old_part, new=new_part, **changes)]

    if isinstance(tx, chain):
        olds = old if old is not None else [None] * len(tx.transforms)
        news = new if new is not None else [None] * len(tx.transforms)
        return [
            site._replace(tx=t, old=o, new=n, raw=site.raw and i == 0)
            for i, (t, o, n) in enumerate(zip(tx.transforms, olds, news, strict=True))
        ]
    if isinstance(tx, named_chain):
        return [
            site._replace(
                tx=t,
                old=_item(old, name),
                new=_item(new, name),
                raw=site.raw and i == 0,
            )
            for i, (name, t) in enumerate(zip(tx.names, tx.transforms, strict=True))
        ]
    if isinstance(tx, partition):
        defines = site.group is None and site.grouped
        labels = None if tree is None else _labels_of(tx, tree)
        out = []
        for label, t in tx.transforms.items():
            inner_old = _field(_item(_field(old, "inner_states"), label), "inner_state")
            inner_new = _field(_item(_field(new, "inner_states"), label), "inner_state")
            out.append(
                site._replace(
                    tx=t,
                    old=inner_old,
                    new=inner_new,
                    group=str(label) if defines else site.group,
                    raw=site.raw and defines,
                    grouped=False,
                    tree=None
                    if labels is None
                    else mask_tree(
                        tree, jax.tree.map(lambda x, la=str(label): x == la, labels)
                    ),
                )
            )
        return out
    if isinstance(tx, masked):
        masked_tree = None if tree is None else mask_tree(tree, _mask_of(tx, tree))
        return inside(
            tx.inner, "inner_state", raw=False, grouped=False, tree=masked_tree
        )
    if isinstance(tx, MuonGroups):
        parts = muon_parts(tx, tree)
        return [] if parts is None else [site._replace(tx=parts, old=old, new=new)]
    if isinstance(tx, Alias):
        return [site._replace(tx=tx.parts(), old=old, new=new)]
    if isinstance(tx, _PASS_THROUGH_INNER_STATE):
        host = site.host or isinstance(tx, offload_state)
        return inside(_wrapped(tx), "inner_state", host=host)
    if isinstance(tx, _PASS_THROUGH_SAME_STATE):
        return [site._replace(tx=tx.tx, old=old, new=new)]
    if isinstance(tx, MultiSteps):
        # The inner optimizer sees accumulated gradients, on the params' tree.
        return inside(tx.inner_opt, "inner_opt_state", raw=False)
    if _is_with_metrics(tx):
        return inside(tx.inner, "inner_state")
    # Any other wrapper of one transformation: where its part's state is in
    # its own is not known, so the part is walked without states (its
    # constant learning rate is still read), and its gradients and tree may
    # differ from the ones given.
    part = _single_part(tx)
    if part is not None:
        return [
            site._replace(
                tx=part,
                old=None,
                new=None,
                raw=False,
                grouped=False,
                host=False,
                tree=None,
            )
        ]
    return []


def _is_with_metrics(tx: Any) -> bool:
    # Marked on the class rather than imported: its module imports this one.
    return getattr(type(tx), "_records_metrics", False) is True


def sites(tx: Any, old: Any = None, new: Any = None, *, tree: Any) -> Iterator[Site]:
    """Every part of `tx`, outermost first, with its state before and after.

    Args:
      tx: a gradax transformation.
      old: `tx`'s state before the step (None: not read).
      new: `tx`'s state after the step (None: not read).
      tree: the updates (or params) the step is given: the Muon family's
        routing and a partition's labels are read from it.
    """
    stack = [Site(tx, old, new, group=None, raw=True, grouped=True, tree=tree)]
    while stack:
        site = stack.pop()
        yield site
        stack.extend(reversed(children(site)))


def _mask_of(tx: masked, tree: Any) -> Any:
    """A masked transformation's mask for `tree` (it may be a function)."""
    return tx.mask(tree) if is_tree_function(tx.mask) else tx.mask


def _labels_of(tx: partition, tree: Any) -> Any:
    """A partition's label of every leaf of `tree` (its labels may be a
    prefix of the tree, or a function of it)."""
    labels = tx.param_labels
    if is_tree_function(labels):
        labels = labels(tree)
    return jax.tree.map(
        lambda label, sub: jax.tree.map(lambda _: str(label), sub), labels, tree
    )


def group_labels(tx: Any, params: Any) -> Any | None:
    """The parameter group of every leaf, as :func:`gradax.with_metrics` names it.

    The groups are the labels of the outermost :class:`gradax.partition`
    (or `multi_transform`) inside `tx`, found through chains, optimizers
    built from parts and the wrappers that keep the parameters' tree: for
    the Muon family, "muon" for the orthogonalized matrices and "adam" for
    the rest. Labels that are not strings are shown by `str`.

    Args:
      tx: a gradax transformation (an optax one has no groups gradax can see).
      params: the parameters (arrays or `jax.ShapeDtypeStruct`), for a
        routing or labels computed from them.

    Returns:
      A tree like `params` of group names, or None when `tx` has no groups
      (its metrics are those of the whole tree).

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> params = {"w": jnp.ones((4, 3)), "b": jnp.ones(3)}
      >>> gradax.group_labels(gradax.muon(0.02), params)
      {'b': 'adam', 'w': 'muon'}
    """
    return labels_of_sites(sites(tx, tree=params))


def labels_of_sites(site_list: Any) -> Any | None:
    """The groups' labels, from a walk (:func:`sites`): those of the first
    partition that defines groups, or None."""
    for site in site_list:
        if isinstance(site.tx, partition) and site.grouped and site.group is None:
            return _labels_of(site.tx, site.tree)
    return None
