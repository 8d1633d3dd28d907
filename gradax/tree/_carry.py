"""Carry an optimizer state across a change of configuration: `carry_state`.

A state tree follows the configuration (optax's layout): a schedule adds a
`count`, a clip shifts the chain, a wrapper adds a level. `carry_state`
builds the new transformation's state and fills it, leaf by leaf, from the old
state, matching leaves by their paths; what it cannot match it takes from the
new `init` and reports.

Matching is structural: it reads paths, shapes and dtypes, so it runs under
`jit` and `eval_shape`. Values are read for one thing only: several old
leaves that fit a new one equally well and all hold the same value (two
counts of the same steps) are no real choice, so the first is taken. A
traced value cannot be read, and such a tie stays ambiguous.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._core.treecheck import canonical_key, children, is_leaf

_Key = tuple[Any, ...]  # canonical path: positions as int, names as str

# A partition's group labels are the keys under this field. They are left out
# of a leaf's names, so a parameter's moments follow it from group to group.
_LABELLED = "inner_states"
# Leaves below this field are hyperparameter values (inject_hyperparams): the
# configuration, which the new transformation sets, not training progress.
_HYPERPARAMS = "hyperparams"
# A state's step count: a new one is taken from an old one where it can be.
_COUNT = "count"
# Leaves below this field are the last step's metrics (gradax.with_metrics):
# observations, computed again at the next step, not training progress.
_METRICS = "metrics"


class _Leaf(NamedTuple):
    """A leaf of a state tree, with what matching reads of its place."""

    path: str  # jax.tree_util.keystr of its path, as reports show it
    key: _Key  # canonical path: the same for a state and its orbax restore
    names: tuple[str, ...]  # the named entries of ``key``, labels left out
    owner: str | None  # class of the NamedTuple/dataclass holding it, if known
    node: _Key  # ``key`` of that holder: the leaves of one state share it
    value: Any

    @property
    def is_count(self) -> bool:
        return bool(self.names) and self.names[-1] == _COUNT

    @property
    def is_hyperparameter(self) -> bool:
        return _HYPERPARAMS in self.names

    @property
    def is_observation(self) -> bool:
        return _METRICS in self.names


def _names(key: _Key) -> tuple[str, ...]:
    names, after_labelled = [], False
    for entry in key:
        if not after_labelled and not isinstance(entry, int):
            names.append(str(entry))
        after_labelled = entry == _LABELLED
    return tuple(names)


def _leaves(tree: Any) -> list[_Leaf]:
    """The leaves of `tree` in flattening order, each with its place."""
    out: list[_Leaf] = []

    def walk(node: Any, path: tuple, owner: str | None, holder: _Key) -> None:
        # One level at a time, so that each leaf knows the node holding it.
        if is_leaf(node):
            key = tuple(canonical_key(e) for e in path)
            leaf = _Leaf(
                jax.tree_util.keystr(path), key, _names(key), owner, holder, node
            )
            out.append(leaf)
            return
        for entry, child in children(node):
            child_path = (*path, entry)
            if isinstance(entry, jax.tree_util.GetAttrKey):
                key = tuple(canonical_key(e) for e in path)
                walk(child, child_path, type(node).__name__, key)
            else:
                walk(child, child_path, owner, holder)

    walk(tree, (), None, ())
    return out


def _aval(value: Any) -> tuple[tuple[int, ...], Any] | None:
    """Shape and dtype, read without touching a device; None for a non-array."""
    try:
        aval = jax.typeof(value)
    except TypeError:
        return None
    return tuple(aval.shape), aval.dtype


def _readable(value: Any) -> np.ndarray | None:
    """The value on the host, or None where it cannot be read here.

    Traced values (inside `jit`, `eval_shape`), abstract ones and arrays
    spread over several hosts have no value this process can read; a
    transfer guard may forbid the read.
    """
    if isinstance(value, jax.core.Tracer):
        return None
    if isinstance(value, jax.Array):
        if not value.is_fully_addressable:
            return None
    elif not isinstance(value, (np.ndarray, np.generic, bool, int, float, complex)):
        return None
    try:
        return np.asarray(value)
    except RuntimeError:  # jax.transfer_guard("disallow")
        return None


def _one_value(leaves: list[_Leaf]) -> bool | None:
    """Whether the leaves hold one value (the same shape, dtype and entries).

    None when some value cannot be read (traced): nobody can tell.
    """
    avals = {_aval(leaf.value) for leaf in leaves}
    if len(avals) != 1 or None in avals:
        return False
    values = [_readable(leaf.value) for leaf in leaves]
    readable = [value for value in values if value is not None]
    if len(readable) < len(values):
        return None
    return all(np.array_equal(readable[0], value) for value in readable[1:])


def _show(aval: tuple[tuple[int, ...], Any] | None) -> str:
    if aval is None:
        return "not an array"
    shape, dtype = aval
    return f"{dtype}[{','.join(map(str, shape))}]"


class _Pool:
    """The old leaves a new leaf can come from, found by their names.

    Candidates have the same names, or names that end the new leaf's or are
    ended by them (a wrapper level added or removed). Indexed by every ending
    of the names, so that a large state is matched in linear time.
    """

    def __init__(self, leaves: list[_Leaf]) -> None:
        self._order = {leaf.path: n for n, leaf in enumerate(leaves)}
        self._by_names: dict[tuple[str, ...], list[_Leaf]] = {}
        self._by_ending: dict[tuple[str, ...], list[_Leaf]] = {}
        for leaf in leaves:
            self._by_names.setdefault(leaf.names, []).append(leaf)
            for k in range(1, len(leaf.names) + 1):
                self._by_ending.setdefault(leaf.names[-k:], []).append(leaf)

    def candidates(self, names: tuple[str, ...]) -> list[_Leaf]:
        if not names:  # a path of positions only: no ending to go by
            return list(self._by_names.get((), []))
        found = list(self._by_ending.get(names, []))  # the same or longer
        for k in range(1, len(names)):
            found += self._by_names.get(names[-k:], [])  # shorter
        return sorted(found, key=lambda leaf: self._order[leaf.path])


def _common_tail(a: _Key, b: _Key) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[-1 - n] == b[-1 - n]:
        n += 1
    return n


def _closeness(new: _Leaf, old: _Leaf) -> tuple[bool, bool, bool, int]:
    # Most telling first: the same kind of state (known when the old state
    # kept its classes), the same names, the same path, then the longest
    # common end of the paths (a clip shifting a chain changes the front).
    return (
        new.owner is not None and new.owner == old.owner,
        new.names == old.names,
        new.key == old.key,
        _common_tail(new.key, old.key),
    )


@dataclasses.dataclass(frozen=True)
class CarryReport:
    """What :func:`carry_state` did with every leaf; `print` it to read it.

    Paths are written as :func:`jax.tree_util.keystr` writes them.

    Attributes:
        carried: `(new path, old path, how)` for each leaf of the new state
            taken from the old state.
        filled: `(new path, why)` for each leaf of the new state taken from
            the new transformation's `init`.
        dropped: `(old path, why)` for each leaf of the old state that went
            nowhere. (Of equally close old leaves that hold one value, those
            not taken are not dropped: their value was carried.)
        replaced: old hyperparameter values (below an `inject_hyperparams`
            state's `hyperparams`); the new transformation's own values are
            used instead.
        ambiguous: `(new path, candidate old paths)` for each leaf that
            several old leaves of different values (or of values that could
            not be read: traced) fitted equally well; it was filled (and is
            in `filled` too). Equally close old leaves that all hold the same
            value are no choice: the first is carried.
    """

    carried: tuple[tuple[str, str, str], ...]
    filled: tuple[tuple[str, str], ...]
    dropped: tuple[tuple[str, str], ...]
    replaced: tuple[str, ...]
    ambiguous: tuple[tuple[str, tuple[str, ...]], ...]

    def __str__(self) -> str:
        lines = [
            f"carried {len(self.carried)}, filled {len(self.filled)}, "
            f"dropped {len(self.dropped)}, replaced {len(self.replaced)}"
        ]
        lines += [f"carried  {new} <- {old} ({how})" for new, old, how in self.carried]
        lines += [f"filled   {new} ({why})" for new, why in self.filled]
        lines += [f"dropped  {old} ({why})" for old, why in self.dropped]
        lines += [f"replaced {old} (by the new value)" for old in self.replaced]
        return "\n".join(lines)


class _Plan:
    """Where each leaf of the new state comes from, and why.

    `taken[i]` is `(old leaf, how)` for a new leaf `i` carried over,
    `fill_reason[i]` the reason a new leaf comes from `init`, `tied[i]`
    the equally close old leaves of an ambiguous one (also filled),
    `traced` the ambiguous ones whose candidates' values could not be read,
    and `represented` the old leaves of a tie of one value that were not
    taken (their value was: they are not dropped).
    """

    def __init__(
        self,
        new_leaves: list[_Leaf],
        old_leaves: list[_Leaf],
        sources: dict[str, str | None],
        keep_hyperparams: bool,
    ) -> None:
        self.new = new_leaves
        self.keep_hyperparams = keep_hyperparams
        self.taken: dict[int, tuple[_Leaf, str]] = {}
        self.fill_reason: dict[int, str] = {}
        self.tied: dict[int, list[_Leaf]] = {}
        self.traced: set[int] = set()
        # New leaf -> the old leaves of its tie of one value it did not take.
        self._same_value: dict[int, list[_Leaf]] = {}
        # Why an old leaf went unused: a definite reason, or the closer leaf
        # that a new leaf took instead of it.
        self._unused: dict[str, str] = {}
        self._lost: dict[str, str] = {}
        self._states: dict[_Key, list[int]] = {}  # new leaves by their state
        self._observations = {old.path: old.is_observation for old in old_leaves}
        for i, new in enumerate(new_leaves):
            self._states.setdefault(new.node, []).append(i)

        by_path = {old.path: old for old in old_leaves}
        new_paths = {new.path for new in new_leaves}
        unknown = [p for p in sources if p not in new_paths]
        unknown += [p for p in sources.values() if p is not None and p not in by_path]
        if unknown:
            raise ValueError(f"carry_state: sources names unknown paths {unknown}")

        pool = _Pool([old for old in old_leaves if not self.hyper(old)])
        for i, new in enumerate(new_leaves):
            if new.path in sources:
                self._from_sources(i, new, sources[new.path], by_path)
            elif self.hyper(new):
                self.fill_reason[i] = "hyperparameter: the new transformation's value"
            else:
                self._match(i, new, pool.candidates(new.names))
        # Ties settle by their state first (a count goes with its moments),
        # then by value: candidates that all hold one value are no choice.
        self._settle_ties_of_one_value(counts=False)
        self._counts_go_with_their_moments()
        self._settle_ties_of_one_value(counts=True)
        self._counts_start_with_their_moments()
        for i, tied in self.tied.items():
            paths = ", ".join(old.path for old in tied)
            unread = " (traced: their values cannot be compared)"
            unread = unread if i in self.traced else ""
            self.fill_reason[i] = (
                f"ambiguous: {paths} fit equally{unread}; see sources="
            )
            for old in tied:
                self._unused.setdefault(old.path, f"ambiguous for {self.new[i].path}")

    def hyper(self, leaf: _Leaf) -> bool:
        return leaf.is_hyperparameter and not self.keep_hyperparams

    def observation(self, path: str) -> bool:
        """Whether the old leaf at `path` is the last step's metrics."""
        return self._observations.get(path, False)

    def why_unused(self, path: str) -> str:
        if self.observation(path):
            return "the last step's metrics, not training progress"
        if path in self._unused:
            return self._unused[path]
        if path in self._lost:
            return f"no place in the new state; {self._lost[path]}"
        return "no place in the new state"

    def _from_sources(
        self, i: int, new: _Leaf, source: str | None, by_path: dict[str, _Leaf]
    ) -> None:
        if source is None:
            self.fill_reason[i] = "sources= asks for init's value"
            return
        old = by_path[source]
        have, want = _aval(old.value), _aval(new.value)
        if have != want:
            raise ValueError(
                f"carry_state: sources gives {source} ({_show(have)}) "
                f"for {new.path} ({_show(want)})"
            )
        self.taken[i] = (old, "sources=")

    def _take(self, i: int, old: _Leaf, how: str) -> None:
        """Carry `old` to new leaf `i` if its shape and dtype fit."""
        new = self.new[i]
        have, want = _aval(old.value), _aval(new.value)
        if have == want:
            self.taken[i] = (old, how)
            return
        self.fill_reason[i] = f"{old.path} is {_show(have)}, not {_show(want)}"
        self._unused.setdefault(
            old.path, f"is {_show(have)}, {new.path} is {_show(want)}"
        )

    def _match(self, i: int, new: _Leaf, candidates: list[_Leaf]) -> None:
        if not candidates:
            self.fill_reason[i] = "new: no old leaf of these names"
            return
        best = max(_closeness(new, old) for old in candidates)
        chosen = [old for old in candidates if _closeness(new, old) == best]
        if len(chosen) > 1:
            self.tied[i] = chosen
            return
        old = chosen[0]
        if old.key == new.key:
            how = "same path"
        elif old.names == new.names:
            how = "same names"
        else:
            how = "wrapped differently"
        self._take(i, old, how)
        for other in candidates:
            if other is not old:
                self._lost.setdefault(other.path, f"new {new.path} took {old.path}")

    def _moments(self, i: int) -> list[int]:
        """The other leaves of new leaf `i`'s state, counts and
        hyperparameters aside: the progress a count goes with."""
        return [
            j
            for j in self._states[self.new[i].node]
            if j != i and not (self.new[j].is_count or self.hyper(self.new[j]))
        ]

    def _settle_ties_of_one_value(self, counts: bool) -> None:
        """Carry the first of equally close old leaves that hold one value.

        Only the ties of counts (`counts=True`) or of other leaves. A tie
        whose values cannot be read (traced) stays, marked in `traced`.
        """
        for i in list(self.tied):
            if self.new[i].is_count != counts:
                continue
            tied = self.tied[i]
            same = _one_value(tied)
            if same is None:
                self.traced.add(i)
            if not same:
                continue
            del self.tied[i]
            self.traced.discard(i)
            first, others = tied[0], ", ".join(old.path for old in tied[1:])
            holds = "holds" if len(tied) == 2 else "hold"
            how = f"equally close to {others}, which {holds} the same value"
            self._take(i, first, how)
            self._same_value[i] = tied[1:]

    @property
    def represented(self) -> set[str]:
        """Old leaves not taken whose value a new leaf carries from an equal
        one (a tie of one value): no loss, so not dropped."""
        return {
            other.path
            for i, others in self._same_value.items()
            if i in self.taken
            for other in others
        }

    def _counts_go_with_their_moments(self) -> None:
        # A count goes with the moments of its state: a tie between old
        # counts goes to the count of the old state those moments came from,
        # when that is one state.
        for i in list(self.tied):
            if not self.new[i].is_count:
                continue
            came_from = {
                self.taken[j][0].node for j in self._moments(i) if j in self.taken
            }
            owners = [old for old in self.tied[i] if {old.node} == came_from]
            if len(owners) == 1:
                del self.tied[i]
                self._take(i, owners[0], "count of the state its moments came from")

    def _counts_start_with_their_moments(self) -> None:
        # A count whose moments all start from ``init`` starts from ``init``
        # too (Adam's zero moments with a late count would skip the bias
        # correction's warm-up).
        for i, new in enumerate(self.new):
            if (
                i not in self.taken
                or not new.is_count
                or self.taken[i][1] == "sources="
            ):
                continue
            moments = self._moments(i)
            if moments and not any(j in self.taken for j in moments):
                old, _ = self.taken.pop(i)
                self.fill_reason[i] = "its state's other leaves start from init"
                for unused in [old, *self._same_value.get(i, [])]:
                    self._unused.setdefault(unused.path, f"{new.path} starts from init")


def _refuse_fresh(
    old_state: Any, old_leaves: list[_Leaf], new_leaves: list[_Leaf], plan: _Plan
) -> None:
    """Raise where nothing carried because the old state is not a state.

    That is: it has no array leaves, or none shares a path with the new
    state. Leaves that share paths but do not fit are reported, not refused.
    """
    progress = [
        i
        for i, leaf in enumerate(new_leaves)
        if _aval(leaf.value) is not None and not plan.hyper(leaf)
    ]
    if not progress:
        return  # a stateless transformation: nothing to lose
    arrays = [leaf for leaf in old_leaves if _aval(leaf.value) is not None]
    pool = _Pool(arrays)
    if any(pool.candidates(new_leaves[i].names) for i in progress):
        return  # paths in common: the report says why each was not taken
    if not arrays:
        given = repr(old_state)
        given = given if len(given) <= 60 else given[:57] + "..."
        what = (
            f"old_state has no array leaves (it is a {type(old_state).__name__}: "
            f"{given})"
        )
    else:
        shown = ", ".join(leaf.path for leaf in arrays[:4])
        more = f" and {len(arrays) - 4} more" if len(arrays) > 4 else ""
        first = ", ".join(new_leaves[i].path for i in progress[:4])
        what = (
            f"old_state shares no path with the new state (old_state's leaves: "
            f"{shown}{more}; the new state's: {first}"
            f"{' ...' if len(progress) > 4 else ''})"
        )
    raise ValueError(
        f"carry_state: {what}. Nothing would carry over, and the training would "
        "restart from init. Pass the state that init returned for the old "
        "configuration (or its restored checkpoint), or allow_fresh=True to "
        "start from init on purpose."
    )


def carry_state(
    old_state: Any,
    tx: Any,
    params: Any,
    *,
    strict: bool = False,
    keep_hyperparams: bool = False,
    sources: Mapping[str, str | None] | None = None,
    allow_fresh: bool = False,
) -> tuple[Any, CarryReport]:
    """Carries an optimizer state over to a new transformation.

    When a configuration change alters the state tree (a constant learning
    rate becomes a schedule, a clip joins the chain, the optimizer is wrapped
    in `inject_hyperparams`, `MultiSteps` or `masked`, parameters are
    regrouped by `partition`, or the reverse of any of these), this keeps the
    training progress: it builds `tx`'s state for `params` and takes each
    leaf from the old state where one matches, else from `tx.init`.

    Matching reads paths, shapes and dtypes; values only to settle a tie:

    - A leaf's *names* are the field names and dict keys on its path, without
      positions (a clip shifting the chain moves no names) and without the
      group labels of `partition`. The candidates for a new leaf are the old
      leaves with the same names, or whose names end its names or are ended
      by them (a wrapper level added or removed: `inner_state`,
      `inner_opt_state`).
    - Of the candidates, the closest wins: the same state class (when the old
      state has its classes), then the same names, the same path, the longest
      common end of the paths. Several equally close candidates that all
      hold the same value (two counts of the same steps) are no choice: the
      first is carried, and the report says which others held the value.
      Otherwise, or when their values are traced (under `jit`), they are
      *ambiguous*: the leaf is filled and the report says so; `sources`
      settles it.
    - A carried leaf must have the new leaf's shape and dtype; otherwise the
      new leaf is filled and the report gives both.
    - A new `count` takes an old one, e.g. a new schedule's count takes
      Adam's. A count goes with its state's moments: of equally close old
      counts, the one of the state the moments came from wins; when the
      moments all start from `init`, so does the count (Adam's bias
      correction stays consistent).
    - Hyperparameter values kept in an `inject_hyperparams` state come from
      the new transformation: its configuration is the one that runs.

    The old state may be any pytree: a gradax or optax state, or one restored
    by orbax without a target (NamedTuples as dicts, tuples as lists). An
    old leaf may fill several new leaves (a count); each extra use is a copy,
    so donating the new state never donates one buffer twice.

    Args:
        old_state: the state to carry over.
        tx: the new transformation (gradax or optax), or its init function.
        params: the parameters, as `tx.init` takes them.
        strict: raise if a leaf of the old state is dropped or a match is
            ambiguous (replaced hyperparameters and the last step's metrics
            of a dropped `with_metrics` are not losses; equally close leaves
            of one value are no ambiguity).
        keep_hyperparams: carry the old hyperparameter values like any leaf,
            for a state whose values were set by hand.
        sources: overrides, `{new path: old path}` as the report writes them;
            `None` as the old path takes the leaf from `init`.
        allow_fresh: accept a result with nothing carried over. By default an
            old state with no array leaves (a string, `None`, an empty
            tree), or with none that fits a leaf of the new state, is an
            error: the training would silently restart from `init`.

    Returns:
        new_state: the state, with the tree of `tx.init(params)`.
        report: a :class:`CarryReport`: tuples of paths (as
            :func:`jax.tree_util.keystr` writes them) `carried` (new, old,
            how), `filled` (new, why), `dropped` (old, why), `replaced`
            (old hyperparameters) and `ambiguous` (new, candidates); printed,
            one line a path.

    Raises:
        ValueError: if nothing carries over and `allow_fresh` is False
            (the message says what `old_state` was); with `strict=True`,
            if something was dropped or
            ambiguous (the message names the paths); for a path in
            `sources` that is not in the states, or names an old leaf of
            another shape or dtype.

    Example:
        >>> import jax.numpy as jnp
        >>> import gradax
        >>> params = {"w": jnp.ones(3)}
        >>> old = gradax.adam(1e-3).init(params)
        >>> tx = gradax.adam(gradax.linear_schedule(1e-3, 0.0, 100))
        >>> state, report = gradax.tree.carry_state(old, tx, params, strict=True)
        >>> print(report)
        carried 4, filled 0, dropped 0, replaced 0
        carried  [0].count <- [0].count (same path)
        carried  [0].mu['w'] <- [0].mu['w'] (same path)
        carried  [0].nu['w'] <- [0].nu['w'] (same path)
        carried  [1].count <- [0].count (same names)
    """
    init = tx.init if hasattr(tx, "init") else tx
    # Shapes only: nothing is allocated for leaves the old state provides
    # (and init's side effects, such as muon_labels' report, are skipped).
    # Imported here: gradax.tree is loadable on its own (test_tree checks
    # that loading it creates no device arrays), without the package.
    from .._core.state_guard import state_shapes

    template = state_shapes(init, params)
    new_leaves = _leaves(template)
    old_leaves = _leaves(old_state)
    plan = _Plan(new_leaves, old_leaves, dict(sources or {}), keep_hyperparams)
    if not plan.taken and not allow_fresh:
        _refuse_fresh(old_state, old_leaves, new_leaves, plan)

    # Fill from ``init``, compiled so that only the leaves asked for are built.
    fill = sorted(plan.fill_reason)
    filled_values: list[Any] = []
    if fill:

        def build(p: Any) -> list[Any]:
            leaves = jax.tree_util.tree_leaves(init(p))
            return [leaves[i] for i in fill]

        filled_values = jax.jit(build)(params)
    values: list[Any] = [None] * len(new_leaves)
    for i, value in zip(fill, filled_values, strict=True):
        values[i] = value
    used: set[str] = set()
    for i, (old, _) in sorted(plan.taken.items()):
        value = jnp.asarray(old.value)
        values[i] = jnp.array(value, copy=True) if old.path in used else value
        used.add(old.path)
    new_state = jax.tree_util.tree_unflatten(
        jax.tree_util.tree_structure(template), values
    )

    kept = used | plan.represented  # carried, or their value was
    report = CarryReport(
        carried=tuple(
            (new_leaves[i].path, old.path, how)
            for i, (old, how) in sorted(plan.taken.items())
        ),
        filled=tuple((new_leaves[i].path, plan.fill_reason[i]) for i in fill),
        dropped=tuple(
            (old.path, plan.why_unused(old.path))
            for old in old_leaves
            if old.path not in kept and not plan.hyper(old)
        ),
        replaced=tuple(
            old.path for old in old_leaves if plan.hyper(old) and old.path not in used
        ),
        ambiguous=tuple(
            (new_leaves[i].path, tuple(old.path for old in tied))
            for i, tied in sorted(plan.tied.items())
        ),
    )
    # Dropping a with_metrics wrapper drops its metrics, not training progress.
    lost = [old for old, _ in report.dropped if not plan.observation(old)]
    if strict and (lost or report.ambiguous):
        raise ValueError(
            "carry_state(strict=True): the old state does not carry over whole; "
            "pass sources= to choose, or strict=False to accept.\n" + str(report)
        )
    return new_state, report
