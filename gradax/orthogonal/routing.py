"""Which parameters Muon orthogonalizes, and which go to AdamW."""

from __future__ import annotations

import contextlib
import contextvars
import re
from collections.abc import Iterator
from typing import Any

import jax

from .._core.state_guard import initializing_for_shapes
from ..linalg.matrices import full_dimension_numbers, is_spec_leaf
from .blocks import matrix_blocks
from .dimensions import SHAPE_SCALINGS, shape_scale
from .routing_checks import _warned as _warned  # tests clear it
from .routing_checks import (
    path_text,
    warn_likely_input_or_output,
    warn_unmatched_exclude,
)

# True while an optimizer resolves its routing for ``update``: a routing
# function that calls muon_labels printed its report at ``init`` already.
_quiet_report: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "gradax_quiet_muon_report", default=False
)


@contextlib.contextmanager
def quiet_report(quiet: bool = True) -> Iterator[None]:
    """Within this block, :func:`muon_labels` prints no report when `quiet`."""
    token = _quiet_report.set(quiet)
    try:
        yield
    finally:
        _quiet_report.reset(token)


def muon_labels(
    params: Any,
    weight_dimension_numbers: Any = None,
    *,
    exclude: str | None = None,
    consistent_rms: float | None = None,
    shape_scaling: str | None = None,
    print_report: bool = True,
) -> tuple[Any, Any]:
    """The routing of each parameter, with a readable report.

    Args:
      params: the parameter tree (arrays or ShapeDtypeStructs; flax nnx
        variables too: their paths are shown without the trailing
        `.value`, and `exclude` matches them that way).
      weight_dimension_numbers: as `muon_weight_dimension_numbers` of
        :class:`muon` (None: 2-D leaves; "auto": also stacked and conv).
      exclude: a regular expression; leaves whose path (as the report
        shows it) it matches anywhere go to AdamW (e.g. `"embed|head"`).
        Case counts, as in Python's `re` (`head` must not catch linen's
        `MultiHeadDotProductAttention_0`). A branch of the pattern that
        matches no path gets a :class:`MuonRoutingWarning` naming it, and
        the paths it would match if case were ignored (`Embed` for
        `['embed']`: write `embed`, or `(?i:Embed)`).
      consistent_rms: as in :class:`muon`, for the scale column.
      shape_scaling: as in :class:`muon`, for the scale column.
      print_report: print the table (path, shape, group, the matrices it
        is orthogonalized as, scale factor). A leaf split into blocks
        (`num_heads`, `split_sizes`) shows one `count x (fan_in,
        fan_out)` per block shape and one scale per block shape. Called by
        an optimizer's routing function, it prints when the optimizer's
        `init` runs, not again at each `update`.

    Returns:
      `(labels, dimension_numbers)`: a tree of "muon"/"adam" and a tree of
      MuonDimensionNumbers or None, to pass as
      `muon_weight_dimension_numbers`.

    Warns:
      MuonRoutingWarning: once per leaf, for a leaf left on Muon that looks
        like the model's input or output layer (by its name, or a width no
        other matrix has), with the `exclude` that moves it to AdamW; and
        for a branch of `exclude` that matches nothing. Not while an
        optimizer's `update` calls it.

    Raises:
      ValueError: `exclude` is not a valid regular expression, or
        `shape_scaling` is not a known rule.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> params = {"embed": jnp.zeros((10, 4)), "w": jnp.zeros((4, 4))}
      >>> labels, dims = gradax.muon_labels(params, exclude="embed",
      ...                                   print_report=False)
      >>> labels
      {'embed': 'adam', 'w': 'muon'}
    """
    if shape_scaling is not None and shape_scaling not in SHAPE_SCALINGS:
        raise ValueError(
            f"shape_scaling must be one of {SHAPE_SCALINGS} or None, got "
            f"{shape_scaling!r}"
        )
    pattern = None if exclude is None else _compile_exclude(exclude)
    dims = full_dimension_numbers(
        weight_dimension_numbers, params, default_2d_only=True
    )
    if pattern is not None:
        dims = jax.tree_util.tree_map_with_path(
            lambda path, d: None if pattern.search(path_text(path)) else d,
            dims,
            is_leaf=is_spec_leaf,
        )
    # Over the params' structure: a part hidden by a mask (gradax.MaskedNode,
    # an empty node) has no leaves and stays as it is, and a None (an
    # equinox-filtered field) stays None, as in jax.tree.map over the params.
    labels = jax.tree.map(lambda _, d: "adam" if d is None else "muon", params, dims)
    # Told once, when called by the user or by init (not again at update).
    if not _quiet_report.get() and not initializing_for_shapes():
        if print_report:
            rule = shape_scaling or ("keller" if consistent_rms is None else "rms")
            print(_report(params, dims, rule, consistent_rms))
        if exclude is not None:
            warn_unmatched_exclude(exclude, params)
        warn_likely_input_or_output(
            dims,
            params,
            who="gradax.muon_labels",
            fix=lambda pattern: f"pass exclude={pattern}",
            exclude=exclude,
        )
    return labels, dims


def _compile_exclude(exclude: str) -> re.Pattern:
    """`exclude` compiled, or a ValueError that names it and the pattern."""
    if not isinstance(exclude, str):
        raise ValueError(
            f"exclude must be a regular expression (a str), got {exclude!r}"
        )
    try:
        return re.compile(exclude)
    except re.error as error:
        raise ValueError(
            f"exclude must be a valid regular expression, got {exclude!r}: {error}"
        ) from error


def _report(params: Any, dims: Any, rule: str, rms: float | None) -> str:
    rows = [("path", "shape", "group", "matrices", "scale")]
    flat_dims, treedef = jax.tree_util.tree_flatten_with_path(
        dims, is_leaf=is_spec_leaf
    )
    # One parameter (a leaf, or a prefix subtree of leaves) per entry of dims.
    flat_params = treedef.flatten_up_to(params)
    for (path, d), param in zip(flat_dims, flat_params, strict=True):
        for sub_path, leaf in jax.tree_util.tree_flatten_with_path(param)[0]:
            where = path_text(path + sub_path)
            shape = tuple(leaf.shape)
            if d is None:
                # "adam" as in the labels: AdamW unless the optimizer's adam= says.
                rows.append((where, str(shape), "adam", "-", "-"))
                continue
            blocks = matrix_blocks(shape, d)
            fans = list(zip(blocks.counts, blocks.fans, strict=True))
            matrices = " + ".join(f"{n} x ({fi}, {fo})" for n, (fi, fo) in fans)
            scales = " / ".join(
                f"{shape_scale(fi, fo, rule, rms or 0.2):.4g}" for fi, fo in blocks.fans
            )
            rows.append((where, str(shape), "muon", matrices, scales))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in rows
    ]
    return "\n".join(lines)
