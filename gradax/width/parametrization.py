r"""Width transfer: each update scaled by its role and width against a base model.

A model is tuned at a small *base* width; the same hyperparameters are then
used at any larger width. :func:`width_multipliers` compares each
parameter's shape with the base model's and gives the factor its update is
multiplied by; :class:`width_transfer` wraps any optimizer (gradax or optax)
and applies them. The state is the wrapped optimizer's, unchanged: the
factors are plain numbers, computed from static shapes, never stored.

The rules (each factor is 1 at the base shape, so the base model trains
exactly as the wrapped optimizer alone would):

- Adam-like updates (entrywise normalized: AdamW, Adam, Lion, the AdamW
  group of the Muon family), µP for Adam (Yang et al., Tensor Programs V,
  arXiv:2203.03466, table 3), equivalently the spectral condition (Yang,
  Simon, Bernstein, arXiv:2310.17813) for an update of entries O(lr):
  the factor is `base_fan_in / fan_in`.

  * "hidden" (fan-in and fan-out grow): `1 / m`, m the fan-in's ratio.
  * "output" (the head; only the fan-in grows): `1 / m`.
  * "embedding" (input weights; the fan-in is a vocabulary or input size
    that does not grow): 1.
  * "vector" (biases, norm gains, scalars): 1.

- Orthogonalized updates (the matrices of `muon`, `dion`, `normuon`, ...):
  spectral norm 1 times the optimizer's shape factor `s(fan_in, fan_out)`
  (`shape_scaling`, `consistent_rms`). The spectral condition asks for
  `sqrt(fan_out / fan_in)`; the factor is `[sqrt(fan_out / fan_in) /
  s(fan_in, fan_out)]`, divided by the same at the base shape. KellerJordan's
  `sqrt(max(1, fan_out / fan_in))` and `"spectral"` give 1 when both fans
  grow together; Moonlight's `0.2 * sqrt(max(fan_in, fan_out))` gives
  `1 / sqrt(m)`.

Weight decay: the factor multiplies the whole step, the decoupled decay
`-lr * weight_decay * W` included, so a leaf's decay per step is
`factor * lr * weight_decay`: the rule of per-group learning rates in
torch's AdamW, which microsoft/mup's `MuAdamW(decoupled_wd=True)` follows.
mup's default keeps `lr * weight_decay` the same at every width (it
multiplies a group's decay by the width ratio). With gradax's parametrization
Muon's hidden matrices have factor 1 (KellerJordan or spectral scaling), so
their decay is already width-independent; for AdamW's hidden and output
matrices (factor `1 / m`) pass `weight_decay * m` to get mup's default.
"""

from __future__ import annotations

import math
import re
from typing import Any

import jax

from .._core.protocol import (
    GradientTransformation,
    TransformationLike,
    transformation_field,
)
from .._core.pytree import static_field
from ..orthogonal.blocks import matrix_blocks
from ..orthogonal.dimensions import MuonDimensionNumbers, shape_scale
from ..orthogonal.groups import MuonGroups
from ..orthogonal.hyperball import HyperballGroups
from ..orthogonal.routing import muon_labels, path_text, quiet_report

ROLES = ("hidden", "output", "embedding", "vector")

# The output head and the input embedding, told apart by name where the
# shapes cannot (both have one growing axis). The head first: "unembed"
# contains "embed". The same words as muon_labels' warning, split in two.
_OUTPUT = re.compile(r"lm_head|unembed|head|logit|readout", re.IGNORECASE)
_EMBEDDING = re.compile(r"embed|wte|wpe|tok|vocab", re.IGNORECASE)


def _shapes_by_path(tree: Any) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Each leaf's path (as muon_labels shows it) and shape, hashable."""
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return tuple((path_text(p), tuple(int(n) for n in x.shape)) for p, x in leaves)


def _check_roles(roles: Any, name: str) -> Any:
    """`roles` as a hashable tuple of (compiled pattern, role), or a function."""
    if roles is None or callable(roles):
        return roles
    items = roles.items() if isinstance(roles, dict) else roles
    out = []
    for item in items:
        try:
            pattern, role = item
        except (TypeError, ValueError):
            raise ValueError(
                f"{name} must map regular expressions to roles, got {item!r}"
            ) from None
        if role not in ROLES:
            raise ValueError(
                f"{name}: role for {pattern!r} must be one of {ROLES}, got {role!r}"
            )
        try:
            re.compile(pattern)
        except (re.error, TypeError) as error:
            raise ValueError(
                f"{name}: {pattern!r} is not a valid regular expression: {error}"
            ) from None
        out.append((pattern, role))
    return tuple(out)


def _role(path: str, shape: tuple[int, ...], base: tuple[int, ...], roles: Any) -> str:
    """A leaf's role: the user's override first, then its shape and name."""
    if callable(roles):
        chosen = roles(path, shape)
        if chosen is not None:
            if chosen not in ROLES:
                raise ValueError(
                    f"roles returned {chosen!r} for {path}; it must be one of "
                    f"{ROLES} or None"
                )
            return chosen
    elif roles:
        for pattern, role in roles:
            if re.search(pattern, path):
                return role
    if len(shape) < 2:
        return "vector"
    grown = sum(1 for n, b in zip(shape, base, strict=True) if n != b)
    if grown >= 2:
        return "hidden"
    if _OUTPUT.search(path):
        return "output"
    if _EMBEDDING.search(path):
        return "embedding"
    # One growing axis and no telling name: the (fan_in, fan_out) layout
    # of flax and gradax decides (a growing fan-in is a readout).
    return "hidden"


def _adam_factor(role: str, shape: tuple[int, ...], base: tuple[int, ...]) -> float:
    # A leaf with no entries has nothing to scale (and a width 0 no ratio).
    if role in ("vector", "embedding") or len(shape) < 2 or 0 in shape:
        return 1.0
    if role == "output":
        # Every growing axis is the fan-in: the fan-out is the vocabulary.
        return math.prod(b / n for n, b in zip(shape, base, strict=True))
    # hidden: the fan-in axes as muon_labels' "auto" routing reads them
    # (2-D (fan_in, fan_out), stacked (L, fan_in, fan_out), conv (h, w,
    # c_in, c_out)); other ranks count every axis but the last.
    if len(shape) <= 4:
        dims = _auto_dims(len(shape))
        fan_in = matrix_blocks(shape, dims).fans[0][0]
        base_fan_in = matrix_blocks(base, dims).fans[0][0]
        return base_fan_in / fan_in
    return math.prod(base[:-1]) / math.prod(shape[:-1])


def _auto_dims(ndim: int) -> Any:
    return {
        2: MuonDimensionNumbers(0, 1),
        3: MuonDimensionNumbers(1, 2),
        4: MuonDimensionNumbers((0, 1, 2), 3),
    }[ndim]


def _spectral(fan_in: int, fan_out: int, rule: str) -> float:
    # rms=1: Moonlight's 0.2 cancels in the ratio to the base.
    return math.sqrt(fan_out / fan_in) / shape_scale(fan_in, fan_out, rule, 1.0)


def _orthogonal_factors(
    path: str, shape: tuple[int, ...], base: tuple[int, ...], dims: Any, rule: str
) -> tuple[float, ...]:
    """One factor per block shape of an orthogonalized leaf."""
    blocks = matrix_blocks(shape, dims)
    try:
        base_blocks = matrix_blocks(base, dims)
    except ValueError as error:
        raise ValueError(
            f"width_transfer: the base shape {base} of {path} does not fit its "
            f"routing {dims}: {error}"
        ) from error
    if len(base_blocks.fans) != len(blocks.fans):
        raise ValueError(
            f"width_transfer: {path} has {len(blocks.fans)} block shapes, its "
            f"base {len(base_blocks.fans)}; the split must keep its blocks"
        )
    return tuple(
        _spectral(fi, fo, rule) / _spectral(bi, bo, rule)
        for (fi, fo), (bi, bo) in zip(blocks.fans, base_blocks.fans, strict=True)
    )


def _muon_routing(tx: Any, tree: Any) -> tuple[Any, str]:
    """The dimension numbers of the orthogonalized leaves, and the shape rule.

    None for an optimizer that is not of the Muon family: every leaf is
    then Adam-like.
    """
    if not isinstance(tx, MuonGroups):
        return None, "none"
    with quiet_report():
        _, dims = muon_labels(
            tree, tx.muon_weight_dimension_numbers, print_report=False
        )
    if isinstance(tx, HyperballGroups):
        # The sphere fixes each step's norm relative to the weight's (the
        # angular step is the rate at every width), and a multiplied step
        # would leave the sphere: these matrices keep factor 1.
        return dims, "sphere"
    return dims, tx.shape_rule()


def _check_depth(base_depth: Any, depth: Any, exponent: Any) -> tuple:
    """`(base_depth, depth, exponent)` validated; `(None, None, exponent)` if off."""
    if (base_depth is None) != (depth is None):
        raise ValueError(
            "width_transfer: give base_depth and depth together (the block "
            f"counts of the base and the target model), got base_depth="
            f"{base_depth!r}, depth={depth!r}"
        )
    for name, value in (("base_depth", base_depth), ("depth", depth)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise ValueError(
                f"width_transfer: {name} must be a positive integer (a number of "
                f"residual blocks), got {value!r}"
            )
    if (
        isinstance(exponent, bool)
        or not isinstance(exponent, (int, float))
        or not 0.5 <= exponent <= 1.0
    ):
        raise ValueError(
            "width_transfer: depth_exponent must be a number in [0.5, 1] (0.5: "
            f"Depth-µP, 1: CompleteP), got {exponent!r}"
        )
    return base_depth, depth, float(exponent)


def branch_multiplier(base_depth: int, depth: int, exponent: float = 0.5) -> float:
    """The model's residual-branch multiplier for depth transfer.

    `(base_depth / depth) ** exponent`: each block's output is multiplied by
    it before it is added to the residual stream (Depth-µP's `1/sqrt(L)` for
    exponent 1/2, CompleteP's `1/L` for 1), relative to the base model, whose
    multiplier is 1. The optimizer's half is `width_transfer(...,
    base_depth=, depth=, depth_exponent=)`.
    """
    _check_depth(base_depth, depth, exponent)
    return (base_depth / depth) ** exponent


def _depth_factor(depth: tuple) -> float:
    """The hidden matrices' factor `(depth / base_depth) ** (exponent - 1)`."""
    base_depth, target, exponent = depth
    if base_depth is None:
        return 1.0
    return (target / base_depth) ** (exponent - 1.0)


def _rows(
    tree: Any,
    base_shapes: Any,
    roles: Any,
    tx: Any,
    depth: tuple = (None, None, 0.5),
) -> list[tuple]:
    """(path, shape, base shape, role, kind, factors) of each leaf of `tree`."""
    by_depth = _depth_factor(depth)
    base = dict(base_shapes)
    dims_tree, rule = _muon_routing(tx, tree)
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    if dims_tree is None:
        dims_list = [None] * len(leaves)
    else:
        flat, treedef = jax.tree_util.tree_flatten(
            dims_tree, is_leaf=lambda x: x is None or hasattr(x, "reduction_axis")
        )
        # One entry of dims per parameter (a leaf or a prefix subtree).
        per_param = treedef.flatten_up_to(tree)
        dims_list = []
        for d, sub in zip(flat, per_param, strict=True):
            dims_list += [d] * len(jax.tree.leaves(sub))
    rows: list[tuple] = []
    for (p, leaf), dims in zip(leaves, dims_list, strict=True):
        path = path_text(p)
        shape = tuple(int(n) for n in leaf.shape)
        if path not in base:
            raise ValueError(
                f"width_transfer: the parameter {path} is not in base_params "
                f"(its paths: {', '.join(list(base)[:8])}...)"
            )
        base_shape = base[path]
        if len(base_shape) != len(shape):
            raise ValueError(
                f"width_transfer: {path} has shape {shape}, its base {base_shape}: "
                "the ranks must agree"
            )
        role = _role(path, shape, base_shape, roles)
        if dims is not None and rule == "sphere":
            rows.append((path, shape, base_shape, role, "sphere", (1.0,)))
            continue
        if dims is not None:
            kind = f"muon:{rule}"
            factors = _orthogonal_factors(path, shape, base_shape, dims, rule)
        else:
            kind = "adam"
            factors = (_adam_factor(role, shape, base_shape),)
        if role == "hidden" and by_depth != 1.0:
            # Depth: the residual blocks' matrices (the hidden role).
            factors = tuple(f * by_depth for f in factors)
        rows.append((path, shape, base_shape, role, kind, factors))
    return rows


def _format(rows: list[tuple]) -> str:
    table = [("path", "shape", "base", "role", "update", "multiplier")]
    for path, shape, base, role, kind, factors in rows:
        table.append(
            (
                path,
                str(shape),
                str(base),
                role,
                kind,
                " / ".join(f"{f:.4g}" for f in factors),
            )
        )
    widths = [max(len(r[i]) for r in table) for i in range(6)]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in table
    )


def width_multipliers(
    params: Any,
    base_params: Any,
    tx: Any = None,
    *,
    roles: Any = None,
    base_depth: int | None = None,
    depth: int | None = None,
    depth_exponent: float = 0.5,
    print_report: bool = False,
) -> Any:
    """The factor each parameter's update is multiplied by at this width.

    See :class:`width_transfer` for the rules.

    Args:
      params: the parameters at the target width (arrays or
        ShapeDtypeStructs).
      base_params: the parameters of the base model, the same tree at the
        width where the hyperparameters were tuned (only shapes are read).
      tx: the optimizer; a Muon-family optimizer (`muon`, `dion`, ...)
        makes its routed matrices orthogonalized. None or any other: every
        leaf is Adam-like.
      roles: overrides of the roles, as in :class:`width_transfer`.
      base_depth, depth, depth_exponent: depth transfer, as in
        :class:`width_transfer`.
      print_report: print a table: path, shape, base shape, role, the
        update's kind and the multiplier.

    Returns:
      A tree like `params` of Python floats; a leaf split into blocks of
      different shapes (fused QKV) whose blocks get different factors holds
      a tuple of them, one per block shape.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> base = {"embed": jnp.zeros((10, 8)), "w": jnp.zeros((8, 8)),
      ...         "head": jnp.zeros((8, 10)), "b": jnp.zeros(8)}
      >>> wide = {"embed": jnp.zeros((10, 32)), "w": jnp.zeros((32, 32)),
      ...         "head": jnp.zeros((32, 10)), "b": jnp.zeros(32)}
      >>> gradax.width_multipliers(wide, base, gradax.adamw(1e-3))
      {'b': 1.0, 'embed': 1.0, 'head': 0.25, 'w': 0.25}
    """
    roles = _check_roles(roles, "roles")
    depth_rule = _check_depth(base_depth, depth, depth_exponent)
    rows = _rows(params, _shapes_by_path(base_params), roles, tx, depth_rule)
    if print_report:
        print(_format(rows))
    treedef = jax.tree.structure(params)
    factors = [r[5][0] if len(set(r[5])) == 1 else r[5] for r in rows]
    return jax.tree.unflatten(treedef, factors)


def _scaled(update: Any, factors: tuple[float, ...], dims: Any) -> Any:
    if len(set(factors)) == 1:
        return update * factors[0] if factors[0] != 1.0 else update
    blocks = matrix_blocks(update.shape, dims)
    stacks = blocks.to_stacks(update)
    return blocks.from_stacks([f * s for f, s in zip(factors, stacks, strict=True)])


class width_transfer(GradientTransformation):
    r"""Any optimizer, with hyperparameters that transfer across width.

    Each leaf's update is multiplied by a factor from its role and its shape
    against the base model's (:func:`width_multipliers`): at the base width
    every factor is 1; at width :math:`m` times the base,

    .. math::
      \text{Adam-like: } c = \frac{\text{fan-in}_0}{\text{fan-in}}
      \ (\text{hidden, output: } 1/m;\ \text{embedding, vector: } 1),\qquad
      \text{orthogonalized: } c = \frac{\sqrt{f_o/f_i}\,/\,s(f_i, f_o)}
      {\sqrt{f_{o,0}/f_{i,0}}\,/\,s(f_{i,0}, f_{o,0})},

    with :math:`s` the Muon family's shape factor. Roles: a leaf with fewer
    than two axes is a "vector"; one with two or more growing axes is
    "hidden"; one with a single growing axis is the "output" head or an
    "embedding", told by its name (as `muon_labels` tells them), else
    "hidden" under the `(fan_in, fan_out)` layout. Which leaves are
    orthogonalized is the optimizer's own routing (`muon_labels`).

    The model's initialization must be µP's too (see docs/width-transfer.md):
    hidden weights with variance `1 / fan_in`, the output head with
    variance `1 / fan_in**2` (or zeros), embeddings with a variance that does
    not shrink with width; with heads of growing size, attention logits
    scaled by `1 / d_head`.

    Weight decay scales with the factor (the whole step is multiplied); see
    gradax.width.parametrization's module docstring for mup's alternative.

    Args:
      inner: the optimizer (gradax or optax), tuned at the base width.
      base_params: the base model's parameters (or ShapeDtypeStructs): the
        same tree as the params, at the base width. Only shapes are kept.
      roles: None, a dict `{regular expression: role}` (the first pattern
        that matches a leaf's path, as `muon_labels` prints it, wins), or a
        function `(path, shape) -> role or None`. Roles: "hidden",
        "output", "embedding", "vector".

    Returns:
      A transformation whose state is `inner`'s state.

    Raises:
      ValueError: a role is unknown, a pattern is not a regular expression,
        or (at `init`/`update`) a parameter is missing from `base_params`
        or has another rank there.

    Example:
      >>> import jax, jax.numpy as jnp, gradax
      >>> base = {"w": jnp.zeros((8, 8)), "head": jnp.zeros((8, 4))}
      >>> params = {"w": jnp.ones((32, 32)), "head": jnp.ones((32, 4))}
      >>> tx = gradax.width_transfer(gradax.adam(1e-2), base)
      >>> state = tx.init(params)
      >>> updates, state = tx.update(params, state)
      >>> float(updates["w"][0, 0]), float(updates["head"][0, 0])
      (-0.0025, -0.0025)

    References:
      Yang et al., Tensor Programs V, 2022 (arXiv:2203.03466). Yang, Simon,
      Bernstein, A Spectral Condition for Feature Learning, 2023
      (arXiv:2310.17813).
    """

    inner: TransformationLike = transformation_field()
    base_params: Any = static_field(converter=lambda value, name: _base_shapes(value))
    roles: Any = static_field(
        default=None,
        kw_only=True,
        converter=lambda value, name: _check_roles(value, name),
    )
    base_depth: Any = static_field(default=None, kw_only=True)
    depth: Any = static_field(default=None, kw_only=True)
    depth_exponent: Any = static_field(default=0.5, kw_only=True)

    def __check_init__(self):
        _check_depth(self.base_depth, self.depth, self.depth_exponent)

    @property
    def _depth(self) -> tuple:
        return (self.base_depth, self.depth, float(self.depth_exponent))

    @property
    def branch_multiplier(self) -> float:
        """The model's residual-branch multiplier (1 without depth transfer)."""
        if self.base_depth is None:
            return 1.0
        return branch_multiplier(self.base_depth, self.depth, self.depth_exponent)

    def multipliers(self, params: Any, *, print_report: bool = False) -> Any:
        """The factors for `params` (see :func:`width_multipliers`)."""
        rows = _rows(
            params, self.base_params, self.roles, _unwrapped(self.inner), self._depth
        )
        if print_report:
            print(_format(rows))
        return jax.tree.unflatten(
            jax.tree.structure(params),
            [r[5][0] if len(set(r[5])) == 1 else r[5] for r in rows],
        )

    def init_state(self, params):
        _rows(params, self.base_params, self.roles, _unwrapped(self.inner), self._depth)
        return self.inner.init(params)

    def update_state(self, updates, state, params=None, **extra_args):
        new_updates, state = self.inner.update(updates, state, params, **extra_args)
        tx = _unwrapped(self.inner)
        rows = _rows(new_updates, self.base_params, self.roles, tx, self._depth)
        dims_tree, _ = _muon_routing(tx, new_updates)
        leaves, treedef = jax.tree.flatten(new_updates)
        if dims_tree is None:
            dims = [None] * len(leaves)
        else:
            flat, dtree = jax.tree_util.tree_flatten(
                dims_tree, is_leaf=lambda x: x is None or hasattr(x, "reduction_axis")
            )
            dims = []
            for d, sub in zip(flat, dtree.flatten_up_to(new_updates), strict=True):
                dims += [d] * len(jax.tree.leaves(sub))
        scaled = [
            _scaled(u, row[5], d) for u, row, d in zip(leaves, rows, dims, strict=True)
        ]
        return jax.tree.unflatten(treedef, scaled), state


def _base_shapes(value: Any) -> Any:
    if isinstance(value, tuple) and all(
        isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], str) for v in value
    ):
        return value  # already converted (a rebuilt transformation)
    return _shapes_by_path(value)


def _unwrapped(tx: Any) -> Any:
    """The optimizer a gradax `Foreign` wrapper holds, else `tx` itself."""
    return getattr(tx, "tx", tx) if type(tx).__name__ == "Foreign" else tx
