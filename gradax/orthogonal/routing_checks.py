"""Warnings about Muon's routing: likely input or output layers, dead patterns.

Muon is for the hidden matrices of a network; KellerJordan and Moonlight
keep the embedding, the output head and the input layer on AdamW. The
default routing is optax's (every 2-D leaf to Muon), kept for the same
numbers, and it cannot tell one layer from another. So gradax warns, once
per leaf, when a leaf routed to Muon looks like an input or output layer:

- by name: a word of its path starts as an embedding's or a head's does
  (`embed`, `wte`, `tok`, `lm_head`, `head`, `logit`, ...);
- by shape: one of its widths belongs to no other matrix of the tree. A
  hidden layer shares its widths (the hidden width, d_model, d_ff) with the
  layers around it; the input width, a class count, or a vocabulary that
  only the embedding (or only the head) holds belongs to one matrix.

Every leaf of two or more axes counts for the widths, whatever its routing:
a leaf routed to Muon as its dimension numbers read it, any other as "auto"
reads it (`(m, n)`, stacked `(L, m, n)`, conv `(h, w, c_in, c_out)`). A
stacked leaf counts as L matrices, a leaf cut into heads as one matrix per
head, so a stacked layer's widths are shared by its own layers. A conv
kernel's widths are its channel counts. A width that is a whole multiple of
a conv kernel's output channels (8 or more) is a flattened feature map, the
input of the first dense layer after the convolutions, not an input width.
A tree with fewer than two matrices has nothing to compare, and gets no
warning by shape.
"""

from __future__ import annotations

import re
import warnings
from collections import Counter
from collections.abc import Iterator
from typing import Any, NamedTuple

import jax
import numpy as np

from .._core.pytree import caller_stacklevel
from ..linalg.matrices import (
    MuonDimensionNumbers,
    is_spec_leaf,
    matrix_axes,
)
from .blocks import matrix_blocks

# Paths that look like a token embedding or an output head. Keller Jordan and
# Moonlight keep these on AdamW; the head does measurably worse under Muon.
# A word starts there, not in the middle of one: linen's attention module is
# `MultiHeadDotProductAttention_0`, and its `(heads, head_dim)` biases are
# not a head.
EMBEDDING_OR_HEAD = re.compile(
    r"(?<![a-z])(?:embed|wte|wpe|tok|vocab|lm_head|unembed|head|logit|readout)",
    re.IGNORECASE,
)

# A conv kernel with fewer output channels than this (an RGB or a gray
# image) would make most widths its multiples: not read as a feature map.
_MIN_FEATURE_CHANNELS = 8

# What has been warned about, so that each warning is given once per process
# (not at every update, not at every trace): leaf paths and exclude patterns.
_warned: set[Any] = set()

_SILENCE = 'warnings.filterwarnings("ignore", category=gradax.MuonRoutingWarning)'


class MuonRoutingWarning(UserWarning):
    """A leaf routed to Muon looks like an input or output layer, or an
    `exclude=` pattern of :func:`gradax.muon_labels` matches nothing.

    Given once per leaf (or pattern) in a process, at the user's line that
    built the routing or called `init`. The message names the leaves and
    the fix. To silence it where the routing is meant, filter its category.

    Example:
      >>> import warnings
      >>> import jax.numpy as jnp, gradax
      >>> mlp = {"fc1": jnp.zeros((784, 256)), "fc2": jnp.zeros((256, 10))}
      >>> with warnings.catch_warnings():
      ...     warnings.filterwarnings("ignore", category=gradax.MuonRoutingWarning)
      ...     state = gradax.muon(0.02).init(mlp)  # both layers on Muon, quietly
    """


def path_text(path: tuple) -> str:
    """A leaf's path as the report shows it and `exclude` matches it.

    A flax nnx variable adds `.value` to the path of its array; the report
    leaves it out, so the path reads the same whether the optimizer was given
    `nnx.Param` variables (`init`) or their arrays (`update`).
    """
    return jax.tree_util.keystr(_without_value(path))


def _without_value(path: tuple) -> tuple:
    if len(path) > 1 and isinstance(path[-1], jax.tree_util.GetAttrKey):
        if path[-1].name == "value":
            return path[:-1]
    return path


class _Leaf(NamedTuple):
    path: tuple  # jax key path, `.value` of a flax variable removed
    text: str  # as path_text shows it
    shape: tuple[int, ...]
    dims: Any  # its dimension numbers; None: not routed to Muon


def _leaves(dims: Any, tree: Any) -> Iterator[_Leaf]:
    """Each leaf of `tree` with its path, shape and dimension numbers."""
    flat_dims, treedef = jax.tree_util.tree_flatten_with_path(
        dims, is_leaf=is_spec_leaf
    )
    # One entry of dims per leaf (or per prefix subtree, a masked part).
    for (path, d), part in zip(flat_dims, treedef.flatten_up_to(tree), strict=True):
        for sub_path, leaf in jax.tree_util.tree_flatten_with_path(part)[0]:
            full = _without_value(path + sub_path)
            yield _Leaf(full, jax.tree_util.keystr(full), tuple(np.shape(leaf)), d)


def _as_auto_reads(ndim: int) -> MuonDimensionNumbers:
    """How "auto" routing reads a leaf of `ndim` >= 2 axes."""
    if ndim == 3:
        return MuonDimensionNumbers(1, 2)
    if ndim == 4:
        return MuonDimensionNumbers((0, 1, 2), 3)
    return MuonDimensionNumbers(ndim - 2, ndim - 1)


def _matrices(shape: tuple[int, ...], dims: Any) -> list[tuple[int, int, int]]:
    """`(count, width in, width out)` of each block shape a leaf holds.

    A side of several axes (a conv kernel's `(h, w, c_in)`) is as wide as
    its last axis, the channels: its kernel size says nothing of the layer.
    """
    try:
        blocks = matrix_blocks(shape, dims)
        reduction = matrix_axes(dims.reduction_axis, len(shape))
        output = matrix_axes(dims.output_axis, len(shape))
    except (ValueError, TypeError, IndexError):
        return []  # not a matrix under these numbers: the optimizer says so

    def width(axes: tuple[int, ...], fan: int) -> int:
        return fan if len(axes) == 1 else shape[axes[-1]]

    return [
        (count, width(reduction, fan_in), width(output, fan_out))
        for count, (fan_in, fan_out) in zip(blocks.counts, blocks.fans, strict=True)
    ]


def _likely_input_or_output(leaves: list[_Leaf]) -> list[tuple[_Leaf, str]]:
    """Each leaf routed to Muon that looks like an input or output layer,
    with why (the rule is in this module's docstring)."""
    widths: Counter[int] = Counter()  # width -> how many matrices have it
    channels: set[int] = set()  # output channels of the conv kernels
    total = 0
    routed = []
    for leaf in leaves:
        if len(leaf.shape) < 2:
            continue
        read = leaf.dims if leaf.dims is not None else _as_auto_reads(len(leaf.shape))
        matrices = _matrices(leaf.shape, read)
        for count, width_in, width_out in matrices:
            total += count
            for width in {width_in, width_out}:
                widths[width] += count
        if len(leaf.shape) == 4 and matrices:
            channels.add(matrices[0][2])
        if leaf.dims is not None:
            routed.append((leaf, matrices))

    def lone(width: int) -> bool:
        if total < 2 or widths[width] != 1:
            return False
        # A flattened (h, w, c) feature map: the first dense layer's input.
        return not any(
            c >= _MIN_FEATURE_CHANNELS and width % c == 0 and width > c
            for c in channels
        )

    flagged = []
    for leaf, matrices in routed:
        reasons = []
        if EMBEDDING_OR_HEAD.search(leaf.text):
            reasons.append("its name reads as an embedding or output head")
        sizes = sorted({w for _, *pair in matrices for w in pair if lone(w)})
        if sizes:
            wide = " or ".join(str(w) for w in sizes)
            reasons.append(f"no other matrix is {wide} wide")
        if reasons:
            flagged.append((leaf, f"{leaf.text} {leaf.shape}: {' and '.join(reasons)}"))
    return flagged


def _key_name(path: tuple) -> str:
    """A regular expression for the last key of `path`: `fc1`, or for a list
    index the list's name with it (`layers[0]`, escaped)."""
    last = path[-1]
    if isinstance(last, jax.tree_util.DictKey) and isinstance(last.key, str):
        return re.escape(last.key)
    if isinstance(last, jax.tree_util.GetAttrKey):
        return re.escape(last.name)
    return re.escape(jax.tree_util.keystr(path[-2:]).lstrip("."))


def suggested_exclude(flagged: list[_Leaf], leaves: list[_Leaf]) -> str:
    """An `exclude` pattern that matches the flagged leaves and no other leaf
    routed to Muon. For each, the first that does of: the name of its layer
    (`fc1` for `['fc1']['kernel']`), its own name, the same as whole words,
    its whole path."""
    keep = [leaf.text for leaf in leaves if leaf.dims is not None]
    keep = [text for text in keep if text not in {leaf.text for leaf in flagged}]
    names = []
    for leaf in flagged:
        keys = [_key_name(leaf.path[:-1])] if len(leaf.path) > 1 else []
        keys.append(_key_name(leaf.path))
        # Whole words where a bare name is inside another (`head` inside
        # linen's `MultiHeadDotProductAttention_0`, `fc1` inside `fc10`).
        candidates = [*keys, *(rf"\b{key}\b" for key in keys)]
        for name in candidates:
            compiled = re.compile(name)
            if compiled.search(leaf.text) and not any(map(compiled.search, keep)):
                break
        else:
            name = f"^{re.escape(leaf.text)}$"
        names.append(name)
    return "|".join(dict.fromkeys(names))


def _literal(pattern: str) -> str:
    """`pattern` as the user would write it in Python source."""
    if "\\" in pattern and '"' not in pattern:
        return f'r"{pattern}"'
    return repr(pattern) if '"' in pattern else f'"{pattern}"'


def warn_likely_input_or_output(
    dims: Any, tree: Any, *, who: str, fix: Any, exclude: str | None = None
) -> None:
    """One :class:`MuonRoutingWarning` for the leaves routed to Muon that look
    like an input or output layer and were not warned about before.

    `who` routes them ("gradax.muon"); `fix(pattern)` says how to pass
    `exclude=pattern` to that routing (`pattern` already written as Python).
    """
    leaves = list(_leaves(dims, tree))
    flagged = [
        (leaf, why)
        for leaf, why in _likely_input_or_output(leaves)
        if leaf.text not in _warned
    ]
    if not flagged:
        return
    _warned.update(leaf.text for leaf, _ in flagged)
    pattern = suggested_exclude([leaf for leaf, _ in flagged], leaves)
    if exclude:
        pattern = f"{exclude}|{pattern}"
    reasons = "; ".join(why for _, why in flagged)
    warnings.warn(
        f"{who} routes to Muon leaves that look like the model's input or "
        f"output layer, which KellerJordan and Moonlight keep on AdamW (Muon is "
        f"for hidden matrices): {reasons}. To keep them on AdamW, "
        f"{fix(_literal(pattern))}. If they are hidden layers, silence this "
        f"with {_SILENCE} (the rule: docs/muon.md, 'Input and output layers').",
        MuonRoutingWarning,
        stacklevel=caller_stacklevel(),
    )


def top_level_alternatives(pattern: str) -> list[str]:
    """The branches of `pattern`'s outermost `|` (outside groups and sets)."""
    parts, start, depth, i = [], 0, 0, 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            i += 1  # the escaped character is literal
        elif char == "[":
            # A set: up to its closing ], which may come first (`[]a]`, `[^]a]`).
            i += 2 if pattern[i + 1 : i + 2] == "^" else 1
            i += 1 if pattern[i : i + 1] == "]" else 0
            while i < len(pattern) and pattern[i] != "]":
                i += 2 if pattern[i] == "\\" else 1
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "|" and depth == 0:
            parts.append(pattern[start:i])
            start = i + 1
        i += 1
    parts.append(pattern[start:])
    return parts


def warn_unmatched_exclude(exclude: str, tree: Any) -> None:
    """One :class:`MuonRoutingWarning` for the branches of `exclude` that
    match no leaf's path (each pattern and branch once per process), with
    the paths a branch would match if case were ignored.

    A part hidden by a mask (an empty node, such as `gradax.MaskedNode`) has
    a path too: a routing function inside the user's own `partition` sees
    the embedding masked out, and `exclude="embed"` is not dead there.
    """
    flat = jax.tree_util.tree_flatten_with_path(
        tree, is_leaf=lambda x: isinstance(x, tuple) and not x
    )[0]
    texts = [path_text(path) for path, _ in flat]
    dead, near = [], []
    for branch in top_level_alternatives(exclude):
        try:
            compiled = re.compile(branch)
        except re.error:
            continue  # only valid as a whole (an inline flag): not checked alone
        if any(compiled.search(text) for text in texts):
            continue
        dead.append(branch)
        caseless = re.compile(branch, re.IGNORECASE)
        near += [f"{branch!r} would match {t}" for t in texts if caseless.search(t)][:2]
    key = ("exclude", exclude, tuple(dead))
    if not dead or key in _warned:
        return
    _warned.add(key)
    if dead == [exclude]:
        what = f"exclude={exclude!r} matches no path"
    else:
        branches = ", ".join(repr(b) for b in dead)
        verb = "matches" if len(dead) == 1 else "match"
        what = f"{branches} in exclude={exclude!r} {verb} no path"
    if near:
        hint = (
            f"Case counts: {'; '.join(near)} if case were ignored (write it "
            "as the path does, or (?i:...) to ignore case)"
        )
    else:
        examples = ", ".join(texts[:4]) + (", ..." if len(texts) > 4 else "")
        hint = f"The paths read: {examples}. Fix the spelling or drop it"
    warnings.warn(
        f"gradax.muon_labels: {what}, so it sends nothing to AdamW. {hint}; "
        f"{_SILENCE} silences this.",
        MuonRoutingWarning,
        stacklevel=caller_stacklevel(),
    )
