"""The state `update` is given and gives back: what `init` makes.

A state leaf whose dtype or weak type changes between steps breaks
`lax.cond`, `lax.while_loop` and `lax.scan` and makes `jit` retrace;
:func:`match_state` casts every leaf back, and raises on a change of
structure or shape, which no cast can mend.

Before any arithmetic, the outermost `update` checks what it was given
(:func:`check_update_dtypes`, :func:`check_state`): a state that is not the
tree its `init` makes for these params (another transformation's, one
restored without a template, one made for other parameters) and integer or
boolean gradients raise :class:`UpdateError`, naming each path with what was
expected and what was given.
"""

from __future__ import annotations

import contextvars
import weakref
from collections.abc import Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .storage import holds_stored, is_stored, store_all
from .treecheck import (
    Difference,
    canonical_key,
    differences,
    field_names,
    is_leaf,
    is_terminal,
    tree_difference,
)


def is_weakly_typed(x: Any) -> bool:
    """Whether an array or tracer is weakly typed (came from a Python scalar)."""
    return bool(getattr(x, "weak_type", False))


def cast_like(x: Any, template: Any) -> jax.Array:
    """`x` with the dtype and weak type of `template` (same shape).

    JAX has no public cast *to* a weak type, but two public operations keep
    their operand's: `lax.full_like` (a weakly typed template gives a
    weakly typed fill) and an indexed `set` (the result is typed like the
    array written into). So a scalar is filled into the template, and an
    array set into a weakly typed copy of it.
    """
    x = jnp.asarray(x)
    if not is_weakly_typed(template):
        return jax.lax.convert_element_type(x, template.dtype)
    value = jax.lax.convert_element_type(x, template.dtype)
    if x.ndim == 0:
        return jax.lax.full_like(template, value)
    return jax.lax.full_like(template, 0).at[...].set(value)


def match_state(new_state: Any, old_state: Any, owner: str) -> Any:
    """Return `new_state` cast to the structure/dtypes/weak types of the old.

    A stored leaf in the old state (a `StoredLeaf` such as an 8-bit
    `QuantizedArray`, which the hooks read as an array) is stored again the
    same way.
    """
    # No stored leaf in the old state (read once per structure): JAX's own
    # flatten, without a Python call per node.
    leaf_test = is_stored if holds_stored(old_state) else None
    new_leaves, new_def = jax.tree_util.tree_flatten_with_path(
        new_state, is_leaf=leaf_test
    )
    old_leaves, old_def = jax.tree_util.tree_flatten(old_state, is_leaf=leaf_test)
    if new_def != old_def:
        message = tree_difference(new_state, old_state, "new state", "old state")
        raise TypeError(f"{owner}.update changed the structure of its state: {message}")
    out: list[Any] = []
    to_store: list[int] = []  # indices of leaves to store again
    for (path, new), old in zip(new_leaves, old_leaves, strict=True):
        if leaf_test is not None and is_stored(old):
            if not is_stored(new):
                to_store.append(len(out))
            out.append(new)
            continue
        # Inline, not a function per leaf: this runs for every state leaf
        # of every part at every update.
        old_dtype, new_dtype = getattr(old, "dtype", None), getattr(new, "dtype", None)
        if (
            old_dtype is None
            or new_dtype is None
            or not hasattr(old, "shape")
            or not hasattr(new, "shape")
            or (
                old_dtype == new_dtype
                and old.shape == new.shape
                and getattr(old, "weak_type", False) == getattr(new, "weak_type", False)
            )
        ):
            out.append(new)
            continue
        if tuple(old.shape) != tuple(new.shape):
            raise TypeError(
                f"{owner}.update changed the shape of state leaf "
                f"{jax.tree_util.keystr(path)} from {tuple(old.shape)} to "
                f"{tuple(new.shape)}"
            )
        out.append(cast_like(new, old))
    if to_store:
        olds = [old_leaves[i] for i in to_store]
        stored = store_all([out[i] for i in to_store], olds)
        for index, leaf in zip(to_store, stored, strict=True):
            out[index] = leaf
    return jax.tree_util.tree_unflatten(new_def, out)


def match_dtypes(new_updates: Any, old_updates: Any) -> Any:
    """Cast updates back to the dtypes of the gradients they came from."""
    new_leaves, new_def = jax.tree_util.tree_flatten(new_updates)
    old_leaves, old_def = jax.tree_util.tree_flatten(old_updates)
    if new_def != old_def:
        return new_updates
    out = []
    for new, old in zip(new_leaves, old_leaves, strict=True):
        old_dtype = getattr(old, "dtype", None)
        if old_dtype is None or getattr(new, "dtype", old_dtype) == old_dtype:
            out.append(new)
        elif jnp.iscomplexobj(new) and not jnp.iscomplexobj(old):
            # A real gradient must not get an imaginary part; keep it visible.
            out.append(new)
        else:
            out.append(jax.lax.convert_element_type(new, old_dtype))
    return jax.tree_util.tree_unflatten(new_def, out)


# ----------------------------------------------------------------------------
# Mistakes in what ``update`` is given, named before any arithmetic runs.


class UpdateError(ValueError, TypeError):
    """What `update` was given does not fit: the updates, state or params.

    Raised by a transformation's `update` (at its first call, under `jit`
    too) for gradients whose tree or shapes differ from the params', integer
    or boolean gradients, and a state that is not the one its `init` makes
    for these params: a state from another transformation, one restored
    without a template, or one made for parameters of another tree or shape.
    The message names each path, what was expected and what was given. It is
    a ValueError and a TypeError, so code catching either sees it.
    """

    __module__ = "gradax"


def _dtype_name(dtype: np.dtype) -> str:
    if dtype == jax.dtypes.float0:
        return "float0, the gradient of an integer input"
    return dtype.name


def check_update_dtypes(updates: Any, owner: str) -> None:
    """Refuse integer, boolean and float0 gradients, naming each leaf."""
    bad = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(updates)[0]:
        dtype = getattr(leaf, "dtype", None)
        if dtype is None:
            continue
        dtype = np.dtype(dtype)
        if dtype == jax.dtypes.float0 or dtype == np.bool_:
            bad.append((path, dtype))
        elif np.issubdtype(dtype, np.integer):
            bad.append((path, dtype))
    if not bad:
        return
    where = ", ".join(
        f"{jax.tree_util.keystr(path) or '<root>'} ({_dtype_name(dtype)})"
        for path, dtype in bad
    )
    raise UpdateError(
        f"{owner}.update expects floating-point (or complex) updates; given "
        f"integer or boolean ones at {where}. An integer or boolean leaf has no "
        "gradient to follow: leave it out of the params the optimizer sees "
        "(e.g. eqx.filter(model, eqx.is_inexact_array)), or cast it to a float "
        "dtype if it is meant to be trained."
    )


# True while ``init`` runs only for the shapes of its state (the check below):
# code with side effects in ``init`` (a printed report) skips them.
_shapes_only: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "gradax_init_for_shapes", default=False
)


def initializing_for_shapes() -> bool:
    """Whether `init` is running only to learn its state's shapes."""
    return _shapes_only.get()


def state_shapes(init: Any, params: Any) -> Any:
    """`jax.eval_shape(init, params)`, with `init`'s side effects skipped."""
    token = _shapes_only.set(True)
    try:
        return jax.eval_shape(init, params)
    finally:
        _shapes_only.reset(token)


# The state ``init`` makes, by transformation object and parameter shapes:
# an update loop outside ``jit`` traces ``init`` once, not at every step.
_EXPECTED: dict[int, tuple[Any, Any, Any]] = {}
_EXPECTED_SIZE = 64
_FAILED = object()


def _shapes_key(tree: Any) -> Any:
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    return treedef, tuple(
        (np.shape(x), str(getattr(x, "dtype", type(x).__name__))) for x in leaves
    )


def expected_state(tx: Any, like: Any) -> Any:
    """`jax.eval_shape(tx.init, like)`, or None where `init` cannot be traced."""
    try:
        key = _shapes_key(like)
        hash(key)
    except TypeError:
        key = None
    entry = _EXPECTED.get(id(tx))
    if key is not None and entry is not None:
        ref, cached_key, expected = entry
        if ref() is tx and cached_key == key:
            return None if expected is _FAILED else expected
    try:
        expected = state_shapes(tx.init, like)
    except Exception:  # an init that needs values: nothing to compare
        expected = _FAILED
    if key is not None:
        try:
            ref = weakref.ref(tx)
        except TypeError:
            ref = None
        if ref is not None:
            if len(_EXPECTED) >= _EXPECTED_SIZE:
                _EXPECTED.pop(next(iter(_EXPECTED)))
            _EXPECTED[id(tx)] = (ref, key, expected)
    return None if expected is _FAILED else expected


class _Problem(NamedTuple):
    kind: str  # the hint it calls for: "library", "plain", "other", "keys", "shape"
    path: str
    expected: str
    given: str


def _describe(x: Any) -> str:
    if x is None:
        return "None"
    fields = field_names(x)
    if is_terminal(x) and fields is None:  # an EmptyState() reads as below
        shape = getattr(x, "shape", None)
        if shape is None:
            return f"a {type(x).__name__} ({x!r})"
        return f"an array of shape {tuple(shape)}"
    if fields is not None:
        return f"{type(x).__name__}({', '.join(fields)})"
    if isinstance(x, dict):
        keys = ", ".join(repr(k) for k in sorted(x, key=repr))
        return f"a dict with keys {keys}" if x else "an empty dict"
    if isinstance(x, (list, tuple)):
        if 0 < len(x) <= 6:
            parts = ", ".join(
                type(e).__name__ if field_names(e) is not None else _describe(e)
                for e in x
            )
            return f"a {type(x).__name__} ({parts})"
        return f"a {type(x).__name__} of {len(x)}"
    return type(x).__name__


# States of one field, `count`, that optax and gradax both name, by class
# name: a state restored or built by optax (its own classes) reads the same
# as gradax's, in update and here.
_COUNT_ONLY = ("ScaleByScheduleState", "WeightDecaySchedule")


def is_count_only(state: Any) -> bool:
    """Whether `state` is a one-field count state of optax's or gradax's."""
    return type(state).__name__ in _COUNT_ONLY and field_names(state) == ("count",)


def _same_class(expected: Any, given: Any) -> bool:
    return type(expected) is type(given) or is_count_only(given)


def _hint_kind(d: Difference) -> str:
    """Which hint a difference calls for, read from what the two sides are."""
    expected, given = d.expected, d.given
    if d.kind == "shape":
        return "shape"
    if d.kind == "leaf":
        # A dict where the params have an array: another params tree. State
        # where init makes none (an EmptyState given a restored schedule's
        # {'count': ...}), or none where init makes some: another
        # configuration, not other params.
        return "keys" if isinstance(given, dict) and is_leaf(expected) else "other"
    fields, given_fields = field_names(expected), field_names(given)
    if fields is not None:
        if given_fields == fields:
            return "library"  # the same fields in another library's class
        plain = (isinstance(given, dict) and set(given) == set(fields)) or (
            given_fields is None
            and isinstance(given, (list, tuple))
            and len(given) == len(fields)
        )
        return "plain" if plain else "other"
    if isinstance(expected, dict) and isinstance(given, dict):
        return "keys"
    return "other"


def _problems(expected: Any, given: Any) -> list[_Problem]:
    """Each place `given` differs from `expected`, outermost first."""
    problems = []
    for d in differences(expected, given, same_class=_same_class):
        kind, where = _hint_kind(d), "state" + jax.tree_util.keystr(d.path)
        shown_expected, shown_given = _describe(d.expected), _describe(d.given)
        if kind == "library":
            shown_expected += f" (from {type(d.expected).__module__})"
            shown_given += f" (from {type(d.given).__module__})"
        problems.append(_Problem(kind, where, shown_expected, shown_given))
    return problems


_HINTS = {
    "library": (
        "The state's classes come from another library (a state built by "
        "optax): gradax's update reads its own. Convert it with state, "
        "report = gradax.tree.carry_state(optax_state, tx, params), or "
        "restore an optax checkpoint with the target tx.init(params)."
    ),
    "plain": (
        "This looks like a state restored without a template: orbax without a "
        "target gives plain dicts and lists in place of the state's classes. "
        "Restore with the target tx.init(params) (orbax: "
        "args=ocp.args.StandardRestore(tx.init(params))), or convert the "
        "restored tree with state, report = gradax.tree.carry_state(restored, "
        "tx, params)."
    ),
    # Restored without a template, and saved by another configuration: a
    # template tx.init(params) does not fit the checkpoint either.
    "plain_other": (
        "This looks like a state restored without a template (orbax without a "
        "target gives plain dicts and lists in place of the state's classes), "
        "saved by another configuration of this transformation or by another "
        "one (a schedule added or removed, a wrapper): the template "
        "tx.init(params) would not fit the checkpoint either. Carry it over "
        "with state, report = gradax.tree.carry_state(restored, tx, params), "
        "or restore it with the template of the transformation that saved it "
        "and carry that over."
    ),
    "other": (
        "This state was made by another transformation, or another "
        "configuration of this one. Pass the state this transformation's "
        "init(params) returned; to keep the progress of an old state across a "
        "change of optimizer or configuration, use state, report = "
        "gradax.tree.carry_state(old_state, tx, params)."
    ),
}


# The float dtypes a state may have been made for, tried when a state does not
# fit: the usual cause is a model cast to another precision since ``init``.
_FLOAT_CANDIDATES = ("bfloat16", "float16", "float32", "float64")


def _cast_floats(like: Any, chosen: set[int], target: Any) -> Any:
    """`like` as shapes, its float leaves numbered in `chosen` `target`."""
    leaves, treedef = jax.tree_util.tree_flatten(like)
    shapes = [
        jax.ShapeDtypeStruct(np.shape(x), target if i in chosen else jnp.result_type(x))
        for i, x in enumerate(leaves)
    ]
    return treedef.unflatten(shapes)


def _fits_when_cast(
    tx: Any, like: Any, state: Any, chosen: set[int], dtypes: list, target: Any
) -> bool:
    """Whether `state` is `init`'s for `like` with `chosen` made `target`."""
    chosen_now = {i for i in chosen if dtypes[i] != target}
    if not chosen_now:
        return False
    try:
        expected = state_shapes(tx.init, _cast_floats(like, chosen_now, target))
    except Exception:  # an init that cannot take these dtypes
        return False
    return not differences(expected, state, same_class=_same_class)


def _made_for_other_dtypes(
    tx: Any, like: Any, state: Any, problems: list[_Problem], side: str
) -> str | None:
    """Which parameter dtypes `state` was made for, where a cast explains it.

    Tries each float dtype for the leaves that the differing state paths
    name (`state.low_bits['w']` names `['w']`), then for every float
    leaf. Only run on the way to an error, so its cost is no one's.
    """
    try:
        leaves = jax.tree_util.tree_flatten_with_path(like)[0]
        dtypes = [jnp.result_type(x) for _, x in leaves]
    except TypeError:
        return None
    paths = [jax.tree_util.keystr(path) for path, _ in leaves]
    floats = {i for i, d in enumerate(dtypes) if jnp.issubdtype(d, jnp.floating)}
    named = {i for i in floats if any(p.path.endswith(paths[i]) for p in problems)}
    enabled = jax.config.read("jax_enable_x64")
    targets = [jnp.dtype(n) for n in _FLOAT_CANDIDATES if n != "float64" or enabled]
    for chosen in (named, floats):
        # Several dtypes may fit (bfloat16 and float16 make the same tree).
        fits = [
            t for t in targets if _fits_when_cast(tx, like, state, chosen, dtypes, t)
        ]
        if not fits:
            continue
        chosen_now = sorted(i for i in chosen if dtypes[i] not in fits)
        changed = [f"{paths[i]} is {dtypes[i]}" for i in chosen_now]
        more = f" (and {len(changed) - 4} more)" if len(changed) > 4 else ""
        return (
            f"The state was made for {' or '.join(map(str, fits))} {side} where "
            f"{', '.join(changed[:4])}{more} now: the {side}' dtypes "
            "changed since init. Cast them back, or make the state with "
            "init for these; carry_state carries the progress where the "
            "leaves still fit."
        )
    return None


def _as_mapping(d: Difference) -> bool:
    """Whether `d` is a mapping given for a list, a tuple or an 8-bit leaf,
    keyed as that node's children that hold leaves (0, 1, ...; `codes`,
    `scales`): nnx leaves out a child that is None."""
    expected, given = d.expected, d.given
    sequence = isinstance(expected, (list, tuple)) and field_names(expected) is None
    if not isinstance(given, Mapping) or not (sequence or is_stored(expected)):
        return False
    leaves = jax.tree_util.tree_flatten_with_path(expected)[0]
    return set(given) == {canonical_key(path[0]) for path, _ in leaves}


def _in_expected_tree(expected: Any, given: Any) -> Any:
    """`given`'s leaves in `expected`'s tree, where they are the same leaves.

    flax's `nnx.Optimizer` hands back what sat inside one of its variables
    (SM3's, SOAP's and Kron's per-parameter lists, 8-bit leaves) as nnx
    `State` mappings; only that difference is read through, and only where
    every leaf is at the same place, with the same shape and dtype.
    """
    if not all(_as_mapping(d) for d in differences(expected, given)):
        return None
    want, treedef = jax.tree_util.tree_flatten_with_path(expected)
    have = jax.tree_util.tree_flatten_with_path(given)[0]
    if len(want) != len(have):
        return None
    for (want_path, want_leaf), (have_path, have_leaf) in zip(want, have, strict=True):
        if (
            tuple(map(canonical_key, want_path)) != tuple(map(canonical_key, have_path))
            or np.shape(have_leaf) != want_leaf.shape
            or getattr(have_leaf, "dtype", None) != want_leaf.dtype
        ):
            return None
    return jax.tree_util.tree_unflatten(treedef, [leaf for _, leaf in have])


def check_state(tx: Any, updates: Any, state: Any, params: Any, owner: str) -> Any:
    """Raise :class:`UpdateError` where `state` is not what `init` makes.

    The state `init` makes is computed for `params`, or, without params,
    for the updates (which then stand for the params); only shapes are
    compared, and classes by their field names (a state built by optax reads
    the same as gradax's).

    Returns None, or a state for `update` to run on:
    - for a transformation whose `init` makes a state without leaves (a
      stateless one) given another state, the state `init` makes: `update`
      hands the given state back unchanged, as optax's stateless
      transformations do (maxdiffusion passes its train state to
      `clip_by_global_norm(...).update`);
    - for a state whose lists or 8-bit leaves came back as mappings (flax's
      `nnx.Optimizer`), its leaves in `init`'s tree: `update` hands the new
      leaves back in the given tree.
    """
    like = params if params is not None else updates
    expected = expected_state(tx, like)
    if expected is None:
        return None
    if not jax.tree_util.tree_leaves(expected):
        if state is None or not differences(expected, state, same_class=_same_class):
            return None
        return expected
    if state is None:
        raise UpdateError(
            f"{owner}.update was given state=None: pass the state its "
            "init(params) returned"
        )
    problems = _problems(expected, state)
    if not problems:
        return None
    read_through = _in_expected_tree(expected, state)
    if read_through is not None:
        return read_through
    against = "the params given" if params is not None else "the updates given"
    side = "these params" if params is not None else "these updates"
    shown = problems[:8]
    lines = [
        f"  {p.path}: expected (for {side}) {p.expected}; given {p.given}"
        for p in shown
    ]
    if len(problems) > len(shown):
        lines.append(f"  ... and {len(problems) - len(shown)} more")
    kinds = {p.kind for p in problems}
    order = ("library", "plain", "other")
    if {"plain", "other"} <= kinds:  # one cause: a restore of another config
        kinds = (kinds - {"plain", "other"}) | {"plain_other"}
        order = ("library", "plain_other")
    hints = [_HINTS[k] for k in order if k in kinds]
    cast = _made_for_other_dtypes(tx, like, state, problems, side.split()[-1])
    if cast is not None:
        hints = [cast]  # the one cause that explains every difference
    elif kinds & {"keys", "shape"}:
        if params is None:
            hints.append(
                "update was called without params, so the updates stand for "
                "the params: their tree or shapes differ from those of the "
                "params this state was made for. Pass gradients with the "
                "params' tree and shapes (and params=... to have the two "
                "compared leaf by leaf), or make the state with init for "
                "these params."
            )
        else:
            hints.append(
                "The state was made for parameters of another tree or other "
                "shapes: make it with init for these params, or carry the old "
                "one over with state, report = gradax.tree.carry_state("
                "old_state, tx, params)."
            )
    raise UpdateError(
        f"{owner}.update was given a state that is not the one its init makes "
        f"for {against}:\n" + "\n".join(lines) + "\n" + "\n".join(hints)
    )
