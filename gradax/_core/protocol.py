"""The gradient-transformation protocol, and the guarantees every one keeps.

A transformation is an immutable pytree with `init(params)` and
`update(updates, state, params=None, **extra_args)`, the protocol optax
speaks. Those two methods are written once, here, in
:class:`GradientTransformation`; a subclass writes two hooks instead:

- `init_state(params) -> state`
- `update_state(updates, state, params, **extra_args) -> (updates, state)`

and the base's `init`/`update` wrap them with what every transformation
guarantees:

- schedule resolution: each field declared to accept a schedule holds its
  value at the current step while the hook runs. The step is the `count` of
  the transformation's own state. A transformation whose state has no count
  keeps one only while a field actually holds a schedule, as optax does: a
  stateless one then has :class:`ScaleByScheduleState` (`count` alone, what
  optax's `scale_by_schedule` and scheduled `add_decayed_weights` keep),
  and one with state of its own has a :class:`ScheduleState` around it (only
  reachable through gradax-only options, such as a schedule for `trace`'s
  `decay`). So the state's tree is optax's for every call optax accepts;
  `gradax.tree.carry_state` carries a state across a change of
  configuration that alters the tree;
- state stability: `update` returns state with exactly the tree, shapes,
  dtypes and weak types it was given, and updates with the gradients' dtypes;
- quantized state: a leaf stored 8-bit (`int8_blockwise` given as a
  moment's dtype) reaches the hook as a float32 array and what the hook
  returns is stored again the same way;
- tree checks: `updates` and `params` must have the same tree and leaf
  shapes; the error names every differing path;
- sharding: under `jit` on a mesh with Auto axes, each state leaf shaped
  like a parameter is tied to that parameter's sharding.

optax's own idioms hold too: `GradientTransformation(init_fn, update_fn)`
builds a transformation from two functions, and every transformation unpacks
as `init, update = tx`.
"""

from __future__ import annotations

import contextvars
import inspect
import operator
import struct
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol

import jax
import jax.numpy as jnp

from .._compat import Self
from .axes import shard_state_like_params
from .declarations import (
    LEARNING_RATE,
    HyperparameterWarning,
    hyper,
    is_static,
    register_transformation_converter,
    static_field,
)
from .declarations import transformation_field as transformation_field
from .half import cast_to, plan_update_dtypes
from .hyper import as_hyperparameter, is_schedule, resolve
from .numerics import safe_increment
from .optax_wrapper import dropped_by_optax
from .pytree import (
    Module,
    ModuleMeta,
    StaticValue,
    building_parts,
    caller_stacklevel,
    is_building_parts,
    safe_equal,
)
from .state_guard import (
    UpdateError,
    check_state,
    check_update_dtypes,
    is_count_only,
    match_dtypes,
    match_state,
)
from .storage import load_state, update_in_passes
from .treecheck import require_params, shape_differences, tree_difference

Params = Any
"""A pytree of parameters (arrays at the leaves)."""
Updates = Any
"""A pytree of gradients or updates with the same structure as the parameters."""
OptState = Any
"""A transformation's state: any pytree that ``init`` returns."""


class EmptyState(NamedTuple):
    """State of a transformation that keeps none."""


class ScaleByScheduleState(NamedTuple):
    """The step count of a stateless transformation given a schedule.

    optax's `ScaleByScheduleState`: what `scale_by_schedule` keeps, and
    what any stateless gradax transformation keeps while one of its fields
    holds a schedule (with a number it keeps `EmptyState()`, as in optax).
    """

    count: jax.Array  # int32 scalar: number of updates done


class WeightDecaySchedule(NamedTuple):
    """The step count of `add_decayed_weights` with a scheduled weight decay.

    optax's name for the same one-field state as :class:`ScaleByScheduleState`.
    """

    count: jax.Array  # int32 scalar: number of updates done


def read_through_to_inner(self: Any, name: str) -> Any:
    """A wrapper state's ``__getattr__``: an attribute it lacks is its
    ``inner_state``'s (``state.mu`` of a wrapped Adam)."""
    if name.startswith("__") or name == "_loads_itself":
        raise AttributeError(name)
    return getattr(self.inner_state, name)


class ScheduleState(NamedTuple):
    """A step count around the state of a transformation that has none.

    Only gradax-only options make one: a schedule given to a field whose
    optax twin takes a number (`trace(decay=schedule)`), on a
    transformation whose own state keeps no count. Reading an attribute it
    lacks reads the inner state's (`state.trace` for the momentum of
    `trace`).
    """

    count: jax.Array  # int32 scalar: number of updates done
    inner_state: Any

    __getattr__ = read_through_to_inner


# Where a transformation keeps the facts `_remembered` computed once.
_MEMO = "_remembered_facts"

# How many ``update`` calls of gradax transformations enclose the current one:
# the outermost checks what it was given, for every part inside it.
_update_depth: contextvars.ContextVar[int] = contextvars.ContextVar(
    "gradax_update_depth", default=0
)
# Whether an enclosing ``update`` compared the updates' shapes with the
# params'. Until one has (the combinators that hand updates on unchanged, and
# per-example gradients, leave it to their parts), a part checks them itself.
_shapes_checked: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "gradax_shapes_checked", default=False
)


def _parts(tx: Any) -> list[GradientTransformation]:
    """The transformations among `tx`'s fields (a chain's, a wrapper's)."""
    leaves = jax.tree_util.tree_leaves(
        tx, is_leaf=lambda x: x is not tx and isinstance(x, GradientTransformation)
    )
    return [p for p in leaves if isinstance(p, GradientTransformation)]


def _has_per_example_updates(tx: Any) -> bool:
    """Whether `tx` or a transformation inside it takes per-example updates."""
    if getattr(tx, "_per_example_updates", False):
        return True
    return any(_has_per_example_updates(p) for p in _parts(tx))


def _shapes_checked_at_edge(tx: Any) -> bool:
    """Whether every part of `tx` takes updates shaped like the params.

    Then the outermost `update` compares all their shapes at once. Not so
    where a part takes per-example gradients, or where the parts are not
    known from `tx`'s tree: built from a factory at each step
    (`inject_hyperparams`), or functions and optax objects.
    """
    if getattr(tx, "_per_example_updates", False) or getattr(tx, "_opaque", False):
        return False
    if isinstance(tx, (FunctionTransformation, Foreign)):
        return False
    return all(_shapes_checked_at_edge(p) for p in _parts(tx))


def _remembered(tx: Any, key: str, compute: Callable[[Any], Any]) -> Any:
    """`compute(tx)`, kept on `tx`: a fact of its fields, which never change.

    A training loop calls `update` on the same object at every step; these
    facts (which parts it holds, whether a field is a schedule) would
    otherwise cost a walk over its parts each time. A copy with other
    fields (`_with_fields`, `replace`) and an object JAX unflattens start
    with none.
    """
    values = getattr(tx, "__dict__", None)
    if values is None:  # a class with __slots__
        return compute(tx)
    memo = values.get(_MEMO)
    if memo is None:
        memo = {}
        object.__setattr__(tx, _MEMO, memo)
    if key not in memo:
        memo[key] = compute(tx)
    return memo[key]


def _any_schedule(tx: Any) -> bool:
    return any(is_schedule(getattr(tx, n)) for n in tx._schedulable)


def _holds_user_functions(tx: Any) -> bool:
    """Whether a part of `tx` is the user's functions or another library's."""
    return any(
        isinstance(p, (FunctionTransformation, Foreign)) or _holds_user_functions(p)
        for p in _parts(tx)
    )


def _holds_own_parts(tx: Any) -> bool:
    """Whether `tx` or a part of it is a gradax update rule (not a user's)."""
    if isinstance(tx, (FunctionTransformation, Foreign)):
        return False
    parts = _parts(tx)
    return not parts or any(_holds_own_parts(p) for p in parts)


def zero_count() -> jax.Array:
    """A fresh int32 step counter."""
    return jnp.zeros([], jnp.int32)


def _accepts(fn: Callable) -> tuple[bool, bool | frozenset[str]]:
    """Whether `fn` takes a third positional argument (params), and which
    keyword arguments after it: True for `**kwargs`, else their names."""
    try:
        parameters = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return True, True
    P = inspect.Parameter
    kinds = [p.kind for p in parameters]
    positional = sum(k in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD) for k in kinds)
    if P.VAR_KEYWORD in kinds:
        return P.VAR_POSITIONAL in kinds or positional >= 3, True
    # Named keywords past (updates, state, params): `update(u, s, p, value=None)`.
    named = frozenset(
        p.name
        for i, p in enumerate(parameters)
        if p.kind is P.KEYWORD_ONLY or (p.kind is P.POSITIONAL_OR_KEYWORD and i >= 3)
    )
    return P.VAR_POSITIONAL in kinds or positional >= 3, named


def _third_parameter(fn: Callable) -> str | None:
    """The name of `fn`'s third positional parameter (where params go)."""
    try:
        parameters = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    if (
        len(parameters) >= 3
        and parameters[2].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    ):
        return parameters[2].name
    return None


def call_update_fn(
    fn: Callable, updates: Any, state: Any, params: Any, extra_args: dict
) -> Any:
    """Call an optax-style `update` function with what it accepts.

    Extra keyword arguments the function does not name are dropped when it
    takes no `**kwargs` (gradax passes them to every transformation; optax's
    plain ones ignore them), and `params` for a function that takes only two
    arguments. What it accepts, it gets exactly as given.
    """
    takes_params, keywords = _accepts(fn)
    third = _third_parameter(fn) if extra_args and params is None else None
    if third is not None and third in extra_args:
        # optax hands `tx.update(u, s, name=x)` to the function as written:
        # a keyword naming its third parameter is that parameter (init2winit's
        # SAM passes `grad_fn_params_tuple=(grad_fn, params)` so).
        extra_args = dict(extra_args)
        params = extra_args.pop(third)
    if extra_args and isinstance(keywords, frozenset):
        extra_args = {k: v for k, v in extra_args.items() if k in keywords}
    if not takes_params:
        return fn(updates, state, **extra_args)
    return fn(updates, state, params, **extra_args)


# What makes a subclass of GradientTransformation gradax's kind (an immutable
# pytree with hooks and declared fields) rather than optax's (a NamedTuple of
# two functions): see _TransformationMeta.
_HOOKS = ("init_state", "update_state")


def _is_gradax_kind_body(namespace: dict[str, Any]) -> bool:
    """Whether a class body writes a hook, declares a field or says abstract."""
    if any(name in namespace for name in _HOOKS) or namespace.get("_abstract"):
        return True
    annotations = namespace.get("__annotations__", {})
    # An annotated name given a value is a dataclass field; an annotation
    # alone is also what a NamedTuple subclass may write (kauldron's
    # ``loss_to_optimizer: dict[...]``), so it does not decide.
    return any(name in namespace for name in annotations)


class _TransformationMeta(ModuleMeta):
    """Tells a user's optax-style subclass from a gradax one, at class creation.

    optax's `GradientTransformation` is a NamedTuple, and frameworks extend
    it: `class Staged(optax.GradientTransformation)` with an extra method,
    built as `Staged(init, update)`. A direct subclass whose body writes no
    hook (`init_state`/`update_state`), declares no field (an annotated
    name with a value) and does not set `_abstract = True` is that kind: its
    base becomes :class:`NamedTupleTransformation`, which behaves as optax's
    NamedTuple does. Every other subclass is gradax's kind.
    """

    def __new__(mcls, name: str, bases: tuple[type, ...], namespace: dict, **kwargs):
        base = globals().get("GradientTransformation")
        if (
            base is not None
            and base in bases
            and not _is_gradax_kind_body(namespace)
            and all(
                b is base
                or not isinstance(b, ModuleMeta)
                or getattr(b, "_tuple_kind", False)
                for b in bases
            )
        ):
            bases = tuple(NamedTupleTransformation if b is base else b for b in bases)
        return super().__new__(mcls, name, bases, namespace, **kwargs)


class GradientTransformation(Module, metaclass=_TransformationMeta):
    """Base class of gradax transformations (the optax init/update protocol).

    Subclasses are frozen dataclasses whose numeric hyperparameters are fields
    declared with `hyper(default, valid_range)`; structure (flags, dtypes,
    masks) is declared with `static_field()`. A subclass implements
    :meth:`init_state` and :meth:`update_state`; :meth:`init` and
    :meth:`update` here call them and keep the guarantees listed in this
    module's documentation.

    Called directly, as optax users do, `GradientTransformation(init_fn,
    update_fn)` builds a :class:`FunctionTransformation`. optax's kind of
    subclass, a NamedTuple of `(init, update)` with methods of its own,
    derives from :class:`NamedTupleTransformation`. For optax code that
    subclasses this class instead, a subclass that writes no hook and
    declares no field is given that base when it is created (a
    compatibility path; new code names its base).

    Args:
      init: called directly, optax's `init_fn(params) -> state`.
      update: called directly, optax's
        `update_fn(updates, state, params=None) -> (updates, state)`.
    """

    # False for transformations whose fields are resolved by what they build
    # (see :class:`Alias`), never by the base.
    _resolves_schedules: ClassVar[bool] = True
    # Schedulable fields the subclass evaluates itself, at a step count of its
    # own (MultiSteps' every_k_schedule counts gradients, not updates).
    _self_resolved: ClassVar[tuple[str, ...]] = ()
    # Set for each class: the fields the base resolves at the step count.
    _schedulable: ClassVar[tuple[str, ...]] = ()
    # False where updates may legitimately differ in shape from the params:
    # per-example gradients with a leading batch axis, and the combinators
    # that hand updates on unchanged (their parts check what they receive).
    _checks_update_shapes: ClassVar[bool] = True
    # Keyword arguments ``update`` cannot work without (``value`` for Polyak
    # steps); missing ones are reported before anything else is checked.
    _required_extra_args: ClassVar[tuple[str, ...]] = ()
    # True where the updates are per-example (a leading batch axis the params
    # lack): without params, their shapes say nothing of the state's.
    _per_example_updates: ClassVar[bool] = False
    # The state a stateless subclass keeps while a field holds a schedule
    # (optax names it per transformation; the tree is the same).
    _count_state: ClassVar[type] = ScaleByScheduleState
    # True for optax's kind of subclass: a NamedTuple of two functions.
    _tuple_kind: ClassVar[bool] = False
    # True where the parts are not fields (built by a factory at each step).
    _opaque: ClassVar[bool] = False
    # The dtypes of the updates this returns, one of _half.POLICIES: a
    # wrapper (master_weights, stochastic_rounding, cast_updates) declares
    # its policy here or in update_dtypes, and the base applies it; no
    # wrapper overrides update.
    _update_dtypes: ClassVar[str] = "grads"
    # True where the state is exactly the parts' states (an alias's, a
    # chain's), each kept stable by its part's own update: not checked again.
    _state_is_parts: ClassVar[bool] = False

    if not TYPE_CHECKING:
        # Hidden from static tools, which would otherwise stop at this
        # signature instead of reading each subclass's ``__init__``.

        def __new__(cls, *args, **kwargs):
            if cls is GradientTransformation:
                # optax's idiom; Python then runs FunctionTransformation.__init__.
                return object.__new__(FunctionTransformation)
            return object.__new__(cls)

    def __init_subclass__(cls, **kwargs: Any):
        if cls._tuple_kind:
            # optax's kind is a tuple, not a dataclass pytree: JAX flattens it
            # as a NamedTuple, as it does optax's. Module's setup is skipped.
            super(Module, cls).__init_subclass__(**kwargs)
            return
        super().__init_subclass__(**kwargs)
        cls._schedulable = tuple(
            name
            for name, spec in cls._declared
            if cls._resolves_schedules
            and spec.schedule
            and name not in cls._self_resolved
        )

    def _convert_field(self, field: Any, value: Any) -> Any:
        # A data field holding an optax transformation keeps it wrapped (a
        # pytree node JAX can flatten); numbers and schedules in canonical form.
        if is_static(field):
            return value
        if is_foreign_transformation(value):
            return Foreign(value)
        return as_hyperparameter(value)

    # -- optax's (init, update) pair ----------------------------------------

    def __iter__(self) -> Iterator[Callable]:
        return iter((self.init, self.update))

    def __len__(self) -> int:
        return 2

    def __getitem__(self, index: int) -> Callable:
        return (self.init, self.update)[index]

    # -- the hooks a subclass writes -----------------------------------------

    def init_state(self, params: Params) -> OptState:
        """The initial state (hook; called by :meth:`init`).

        By default none: `EmptyState()`, what a stateless transformation
        keeps (with a schedule, :meth:`init` adds the step count).
        """
        del params
        return EmptyState()

    def update_state(
        self,
        updates: Updates,
        state: OptState,
        params: Params | None = None,
        **extra_args: Any,
    ) -> tuple[Updates, OptState]:
        """New updates and state (hook; called by :meth:`update`).

        Runs with every schedulable field replaced by its value at this step.
        """
        raise NotImplementedError(f"{self._public_name()} does not define update_state")

    def schedule_count(self, state: OptState) -> jax.Array | None:
        """The step at which schedules are evaluated, read from the state.

        By default the state's `count` (the number of updates done), or
        None when it has none; a subclass whose count means something else
        overrides this.
        """
        count = getattr(state, "count", None)
        # A tuple's ``count`` method is not a step count.
        return None if callable(count) else count

    def _params_like_updates(self, params: Params) -> Params:
        """The part of `params` that must have the updates' tree."""
        return params

    # -- the protocol --------------------------------------------------------

    def at_step(self, count: Any) -> GradientTransformation:
        """This transformation with each schedule replaced by its value at `count`."""
        values = {
            name: resolve(getattr(self, name), count)
            for name in self._schedulable
            if is_schedule(getattr(self, name))
        }
        return self._with_fields(**values) if values else self

    def holds_schedule(self) -> bool:
        """Whether a field this class resolves holds a schedule (not a number)."""
        return _remembered(self, "holds_schedule", _any_schedule)

    def init(self, params: Params) -> OptState:
        """The initial state for `params`."""
        # The default hook reads no field, so its schedules are not evaluated
        # at step 0: eagerly, that is one small compiled program per
        # operation of the schedule (18 for a warmup-cosine learning rate),
        # where optax's init evaluates nothing.
        if type(self).init_state is GradientTransformation.init_state:
            state = self.init_state(params)
        else:
            state = self.at_step(zero_count()).init_state(params)
        if self.holds_schedule() and self.schedule_count(state) is None:
            if isinstance(state, tuple) and not state:  # EmptyState()
                state = self._count_state(count=zero_count())
            else:
                state = ScheduleState(count=zero_count(), inner_state=state)
        return shard_state_like_params(state, params)

    def update(
        self,
        updates: Updates,
        state: OptState,
        params: Params | None = None,
        **extra_args: Any,
    ) -> tuple[Updates, OptState]:
        """Transform `updates`; returns `(new_updates, new_state)`."""
        policy, targets = self.update_dtypes(), None
        if policy != "grads":
            require_params(params, self._public_name())
            updates, targets = plan_update_dtypes(policy, updates, params)
        if targets is not None:
            new_updates, new_state = self._checked_update(
                updates, state, params, extra_args
            )
            return cast_to(new_updates, targets), new_state
        return self._checked_update(updates, state, params, extra_args)

    def update_dtypes(self) -> str:
        """This transformation's update-dtype policy (see `gradax/_core/half.py`).

        "grads" (the default): the updates keep the gradients' dtypes.
        A wrapper whose policy depends on a field (`cast_updates(to=...)`)
        overrides this; others set the class attribute `_update_dtypes`.
        """
        return self._update_dtypes

    def _checked_update(
        self, updates: Updates, state: OptState, params: Params | None, extra_args: dict
    ) -> tuple[Updates, OptState]:
        """The checks at the edge, then the update rule (inner levels: the rule)."""
        missing = [n for n in self._required_extra_args if extra_args.get(n) is None]
        if missing:
            raise TypeError(
                f"{self._public_name()}.update needs the keyword argument(s) "
                f"{', '.join(missing)}: call update(updates, state, params, "
                + ", ".join(f"{n}=..." for n in missing)
                + ")."
                + dropped_by_optax()
            )
        if isinstance(self, (FunctionTransformation, Foreign)):
            # The user's own functions (or another library's object) get
            # their arguments exactly as given, as optax hands them on: a
            # sharpness-aware trainer passes `(grad_fn, params)` as params.
            return self._transform(updates, state, params, extra_args)
        outermost = _update_depth.get() == 0
        if not outermost and _shapes_checked.get():
            # Inside another gradax update, which checked what the user gave
            # it for every part inside: straight to the update rule.
            return self._transform(updates, state, params, extra_args)
        name = self._public_name()
        if outermost:
            try:
                check_update_dtypes(updates, name)
            except UpdateError:
                if _holds_own_parts(self):
                    raise
        checked = False
        if params is not None and updates is not None:  # None: an empty tree
            like = self._params_like_updates(params)
            difference = tree_difference(updates, like, "updates", "params")
            if difference is not None and _holds_user_functions(self):
                # What optax's combinator would hand its parts: the params as
                # given (a sharpness-aware trainer's `(grad_fn, params)`), to
                # the user's functions and to every part, unchecked.
                difference, like, checked = None, None, True
            if difference is not None:
                raise UpdateError(
                    f"{name}.update: Tree mismatch: the updates must have the "
                    f"params' tree; {difference}."
                )
            # The edge checks every part's shapes at once, unless a part
            # takes per-example gradients (a leading batch axis the params
            # lack): then the part after it checks what it receives.
            if like is not None and (
                self._checks_update_shapes
                or (
                    outermost
                    and _remembered(self, "shapes_at_edge", _shapes_checked_at_edge)
                )
            ):
                differences = shape_differences(updates, like)
                if differences:
                    raise UpdateError(
                        f"{name}.update: Shape mismatch between updates and "
                        f"params (given vs expected) at {'; '.join(differences)}"
                    )
                checked = True
        token = _shapes_checked.set(True) if checked else None
        try:
            if outermost:
                return self._guarded_transform(updates, state, params, extra_args)
            return self._transform(updates, state, params, extra_args)
        finally:
            if token is not None:
                _shapes_checked.reset(token)

    def _guarded_transform(
        self, updates: Updates, state: OptState, params: Params | None, extra_args: dict
    ) -> tuple[Updates, OptState]:
        """:meth:`_transform`, its state compared with init's where it fails."""
        guarded = not isinstance(self, (FunctionTransformation, Foreign)) and (
            params is not None or not _has_per_example_updates(self)
        )
        if not guarded:
            return self._transform(updates, state, params, extra_args)
        # The state is compared with what init makes only when the update
        # fails: a right state (every step of a training loop) costs no trace
        # of init. A wrong one fails somewhere (a missing field, a tree
        # mismatch, a changed structure in match_state), and the comparison
        # then says why, in place of that error.
        try:
            return self._transform(updates, state, params, extra_args)
        except Exception:
            try:
                stand_in = check_state(
                    self, updates, state, params, self._public_name()
                )
            except UpdateError as diagnosis:
                raise diagnosis from None
            if stand_in is None:
                raise
        # A stateless transformation given some other state (maxdiffusion
        # passes its train state to clip_by_global_norm): it runs on the
        # state its init makes and hands the given one back, as optax's do.
        # A state whose lists came back as mappings (flax nnx) runs in init's
        # tree and gets its new leaves back in its own.
        new_updates, new_state = self._transform(updates, stand_in, params, extra_args)
        if not jax.tree_util.tree_leaves(stand_in):
            return new_updates, state
        return new_updates, jax.tree_util.tree_unflatten(
            jax.tree_util.tree_structure(state), jax.tree_util.tree_leaves(new_state)
        )

    def _transform(
        self, updates: Updates, state: OptState, params: Params | None, extra_args: dict
    ) -> tuple[Updates, OptState]:
        """The update rule at this step, with the state kept stable."""
        holds_schedule = self.holds_schedule()
        rewrap: Any = None
        inner, count = state, self.schedule_count(state)
        if holds_schedule and isinstance(state, ScheduleState):
            inner, rewrap = state.inner_state, type(state)
        elif holds_schedule and is_count_only(state):
            inner, rewrap = EmptyState(), type(state)
        if count is None and holds_schedule:
            # Without a step count no schedule can be read. A state with no
            # count is accepted otherwise (optax's tests pass None or 0 to
            # stateless transformations).
            raise TypeError(
                f"{self._public_name()}.update was given a state not made by its "
                f"init (no step count in {type(state).__name__}); a state made "
                "before a schedule was given carries over with "
                "gradax.tree.carry_state"
            )
        tx = self if count is None else self.at_step(count)
        # Stored state leaves (8-bit ones) are read as arrays and stored
        # again by match_state, so the hooks never see a code (see
        # storage.py). A state that is its parts' is handed on as it is:
        # each part loads and stores its own.
        parts_keep_state = self._state_is_parts and rewrap is None
        loaded = inner if parts_keep_state else load_state(inner)
        depth = _update_depth.set(_update_depth.get() + 1)
        try:
            # (8-bit leaves: the rule is traced once more for their block
            # maxima and once for their codes; see update_in_passes.)
            new_updates, new_inner = update_in_passes(
                tx.update_state, updates, inner, loaded, params, extra_args
            )
        except (TypeError, AttributeError, IndexError) as error:
            if state is not None or isinstance(error, UpdateError):
                raise
            # optax's tests pass None to stateless transformations, which
            # works; one that keeps state fails on it somewhere inside. The
            # error met is named too: it may have another cause.
            raise UpdateError(
                f"{self._public_name()}.update was given state=None: pass the "
                f"state its init(params) returned (the error met: "
                f"{type(error).__name__}: {error})"
            ) from error
        finally:
            _update_depth.reset(depth)
        if not parts_keep_state:
            new_inner = match_state(new_inner, inner, self._public_name())
        if rewrap is ScheduleState:
            new_state = ScheduleState(safe_increment(count), new_inner)
        elif rewrap is not None:
            new_state = rewrap(count=safe_increment(count))
        else:
            new_state = new_inner
        return match_dtypes(new_updates, updates), new_state


GradientTransformationExtraArgs = GradientTransformation
"""optax's name for a transformation whose ``update`` takes extra keyword
arguments; every gradax transformation does."""


# A tuple first, so its __getitem__, __iter__, __eq__ and __hash__ are the
# NamedTuple's, not the base's (which only reads as a pair).
class NamedTupleTransformation(tuple, GradientTransformation):  # type: ignore[inconsistent-inheritance]  # noqa: SLOT001
    """optax's kind of transformation: a NamedTuple of `(init, update)`.

    A user's subclass of :class:`GradientTransformation` (or
    `GradientTransformationExtraArgs`) that writes no hook and declares no
    field gets this class as its base, so it behaves as a subclass of optax's
    NamedTuple: built as `Cls(init, update)`, `Cls(init=..., update=...)`
    or `super().__new__(cls, init, update)`; unpacked, indexed,
    `_replace`-d and `_asdict`-ed; extra methods; attributes set on the
    instance; and `isinstance(tx, GradientTransformation)`. `init` and
    `update` are the functions themselves, called as they are (no gradax
    checks), as in optax. Inside a gradax combinator it is wrapped like any
    optax transformation (:class:`Foreign`).

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> class Staged(gradax.GradientTransformation):
      ...     def stages(self):
      ...         return 1
      >>> tx = Staged(lambda params: (), lambda u, s, p=None: (2 * u, s))
      >>> init, update = tx
      >>> update(jnp.ones(2), init(jnp.ones(2)))[0]
      Array([2., 2.], dtype=float32)
    """

    _tuple_kind = True
    _fields: ClassVar[tuple[str, str]] = ("init", "update")
    _field_defaults: ClassVar[dict[str, Any]] = {}

    if not TYPE_CHECKING:
        init = property(operator.itemgetter(0), doc="``init(params) -> state``.")
        update = property(
            operator.itemgetter(1),
            doc="``update(updates, state, params=None, **extra_args)``.",
        )

    def __new__(cls, init: Callable, update: Callable):
        return tuple.__new__(cls, (init, update))

    def __init__(self, *args: Any, **kwargs: Any):
        # Everything was set by __new__ (a subclass's own __new__ may take
        # more arguments, as a NamedTuple subclass's may).
        del args, kwargs

    # Instances take attributes, as a NamedTuple subclass's do (it has a
    # __dict__); the fields themselves stay read-only properties.
    __setattr__ = object.__setattr__
    __delattr__ = object.__delattr__

    def _finish_init(self) -> None:
        # No declared fields to convert or check.
        pass

    @classmethod
    def _make(cls, iterable: Iterable[Any]) -> Any:
        """A new instance from two items (`NamedTuple._make`)."""
        result = tuple.__new__(cls, iterable)
        if len(result) != 2:
            raise TypeError(f"Expected 2 arguments, got {len(result)}")
        return result

    def _replace(self, **changes: Any) -> Any:
        """A copy with `init` and/or `update` replaced (`NamedTuple._replace`)."""
        unknown = set(changes) - set(self._fields)
        if unknown:
            raise ValueError(f"Got unexpected field names: {sorted(unknown)!r}")
        pairs = zip(self._fields, self, strict=True)
        return self._make(changes.get(name, value) for name, value in pairs)

    def _asdict(self) -> dict[str, Any]:
        """`{"init": ..., "update": ...}` (`NamedTuple._asdict`)."""
        return dict(zip(self._fields, self, strict=True))

    def __getnewargs__(self) -> tuple[Any, ...]:
        return tuple(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(init={self[0]!r}, update={self[1]!r})"


class FunctionTransformation(GradientTransformation):
    """A transformation from an `init` and an `update` function.

    What `gradax.GradientTransformation(init_fn, update_fn)` builds, as in
    optax. The functions are static (part of the tree definition). As in
    optax, `update` hands its arguments to the function exactly as given:
    no tree, shape or dtype check of `params` or the updates (a
    sharpness-aware trainer passes `(grad_fn, params)` as params), and every
    extra keyword argument the function names or takes as `**kwargs`. The
    guarantees of :class:`GradientTransformation` apply to what it returns.

    Args:
      init: `init(params) -> state`.
      update: `update(updates, state, params=None, **extra_args) ->
        (updates, state)`; extra arguments are dropped when it takes no
        `**kwargs`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.GradientTransformation(
      ...     lambda params: (), lambda u, s, p=None: (2 * u, s)
      ... )
      >>> tx.update(jnp.ones(2), tx.init(jnp.ones(2)))[0]
      Array([2., 2.], dtype=float32)
    """

    init_fn: Callable[[Params], OptState] = static_field()
    update_fn: Callable[..., tuple[Updates, OptState]] = static_field()

    def __init__(self, init: Callable, update: Callable):
        for name, fn in (("init", init), ("update", update)):
            if not callable(fn):
                raise TypeError(
                    f"GradientTransformation({name}=...) must be a function, "
                    f"got {type(fn).__name__}: {fn!r}"
                )
        object.__setattr__(self, "init_fn", init)
        object.__setattr__(self, "update_fn", update)

    def init_state(self, params):
        return self.init_fn(params)

    def update_state(self, updates, state, params=None, **extra_args):
        return call_update_fn(self.update_fn, updates, state, params, extra_args)


# Where an Alias keeps the parts it holds, and where its fields are in them.
_PARTS = "_parts"
_WHERE = "_fields_in_parts"


def _own_float(value: float) -> float:
    """A float object equal to `value` (same bits) that no one else holds."""
    return struct.unpack("d", struct.pack("d", value))[0]


def _at(node: Any, path: tuple[Any, ...]) -> Any:
    """What `path` (a JAX key path) names in `node`."""
    for key in path:
        if isinstance(key, jax.tree_util.GetAttrKey):
            node = getattr(node, key.name)
        elif isinstance(key, jax.tree_util.SequenceKey):
            node = node[key.idx]
        elif isinstance(key, jax.tree_util.DictKey):
            node = node[key.key]
        else:  # a node registered without keys: its children in order
            children = jax.tree_util.tree_flatten(node, lambda x, n=node: x is not n)
            node = children[0][key.key]
    return node


def _is_concrete(value: Any) -> bool:
    """A Python number, or a gradax object (a schedule) holding no tracer:
    comparable at once. (Under `jit` each copy's leaves are tracers of their
    own, equal or not.)"""
    if type(value) in (int, float):
        return True
    return isinstance(value, Module) and not any(
        isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(value)
    )


def _warn_if_copies_differ(
    owner: str, name: str, first: Any, parts: Any, copies: tuple[Any, ...]
) -> None:
    """Warn where the parts hold different values of one field.

    An alias passes a field to several parts (Muon's `learning_rate` to both
    groups); an edit of one place in the tree (`eqx.tree_at(lambda t:
    t.learning_rate, tx, x)`) reaches only the first, which the field then
    reads, while the others keep training with the old value.
    """
    for path in copies[1:]:
        other = _at(parts, path)
        if _is_concrete(other) and not safe_equal(first, other):
            warnings.warn(
                f"{owner}: the parts hold different values of {name}: "
                f"{first!r} at {jax.tree_util.keystr(copies[0])}, {other!r} at "
                f"{jax.tree_util.keystr(path)}. An edit of one place in the "
                "tree (eqx.tree_at) reaches only that part; "
                f"tx.replace({name}=...) sets every copy",
                HyperparameterWarning,
                stacklevel=caller_stacklevel(),
            )
            return


class _FieldsInParts:
    """Where each numeric field of an alias is among its parts: a key path.

    Part of the alias's tree definition (hashable, compared by content), so
    an alias unflattened by JAX reads its fields from the parts it is given,
    each as the very object the parts hold there. So a tree mapped with
    `None` a leaf (equinox's partition of a tangent tree, as optimistix's
    implicit JVP does) reads the same, and `eqx.tree_at(lambda t:
    t.learning_rate, tx, schedule)` finds the field in the tree and may
    replace it with a value of another structure (another schedule).
    """

    __slots__ = ("_hash", "names", "paths")

    def __init__(self, paths: tuple[tuple[str, tuple[Any, ...]], ...]):
        self.paths = paths  # (field, key path of each copy in the parts)
        self.names = frozenset(name for name, _ in paths)  # read from parts
        self._hash = hash(paths)

    def read(self, parts: Any, owner: str) -> dict[str, Any]:
        """Each field's value, read from `parts` (from the first copy)."""
        values = {name: _at(parts, copies[0]) for name, copies in self.paths}
        for name, copies in self.paths:
            if len(copies) > 1 and _is_concrete(values[name]):
                _warn_if_copies_differ(owner, name, values[name], parts, copies)
        return values

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _FieldsInParts) and self.paths == other.paths

    def __hash__(self) -> int:
        return self._hash


def _locate_fields(alias: Alias, built: Any) -> _FieldsInParts | None:
    """Where `alias`'s numeric fields went in `built`, found by identity.

    A field given to several parts (a learning rate shared by two groups)
    is found at each; a value that several fields hold (an array given
    twice, a small int) is told apart by the name of the part's field. None
    where a field cannot be found, or not told apart: the build computed
    something from it.
    """
    unused = alias.unused_fields()
    fields = {n: alias.__dict__[n] for n in alias._data_fields if n not in unused}
    fields = {n: v for n, v in fields.items() if jax.tree_util.tree_leaves(v)}
    if not fields:
        return _FieldsInParts(())
    holders: dict[int, list[str]] = {}
    for name, value in fields.items():
        holders.setdefault(id(value), []).append(name)
    entries, _ = jax.tree_util.tree_flatten_with_path(
        built, is_leaf=lambda x: id(x) in holders
    )
    found: dict[int, list[tuple[Any, ...]]] = {}  # id -> the key path of each hit
    for path, entry in entries:
        if id(entry) in holders:
            found.setdefault(id(entry), []).append(path)
    paths = []
    for name, value in fields.items():
        hits = found.get(id(value), [])
        if len(holders[id(value)]) > 1 or (type(value) is int and len(hits) > 1):
            # One object, several fields (or a cached small int): by the name
            # of the part's field that holds it.
            hits = [path for path in hits if _last_name(path) == name]
        if not hits:
            return None
        paths.append((name, tuple(hits)))
    return _FieldsInParts(tuple(paths))


def _last_name(path: tuple[Any, ...]) -> str:
    key = path[-1] if path else None
    return key.name if isinstance(key, jax.tree_util.GetAttrKey) else ""


class Alias(GradientTransformation):
    """A transformation defined as a composition of others (e.g. `adamw`).

    Its fields are the user's arguments: declared, validated, shown by `repr`
    and compared by equality. It builds its composition (:meth:`build`) once,
    when it is constructed, and holds it as its only pytree child. Each
    numeric field is then read through the part that holds it (`adamw(...).b1`
    is its `scale_by_adam`'s `b1`, the same leaf), so unflattening it under
    `jit`, `init`, `update` and a trace build nothing; a changed field
    (:meth:`replace`) builds the parts again. Schedules are passed on to the
    parts, which resolve them at their own step counts.

    A field that reaches no part as it is (the build computes something from
    it) cannot be read through the parts: such an alias keeps its fields as
    its pytree children instead, and builds its parts again after JAX
    unflattens it (no registry entry does; the registry's protocol check
    fails for one). A field the build does not read at all is named by
    :meth:`unused_fields`.
    """

    _resolves_schedules = False
    _checks_update_shapes = False  # the parts check
    _state_is_parts = True  # the parts keep it stable

    def build(self) -> GradientTransformation:
        """The composition this alias stands for, built from its fields."""
        raise NotImplementedError

    def unused_fields(self) -> tuple[str, ...]:
        """Fields this configuration's build does not read (none by default).

        They stay structure, not leaves: no part holds them. (The Muon
        family's `adam_*` options, when `adam=` replaces their group.)
        """
        return ()

    def parts(self) -> GradientTransformation:
        """The composition this alias holds (built when it was constructed)."""
        built = self.__dict__.get(_PARTS)
        if built is None:
            # An alias whose fields are its children, unflattened by JAX.
            built = self.build()
            object.__setattr__(self, _PARTS, built)
        return built

    def _finish_init(self) -> None:
        values = self.__dict__
        for name in self._data_fields:
            # A float of its own, so the parts' leaves that are this field's
            # are found by identity (a literal 0.0 is one object per module).
            # An alias built as another's part keeps the float it is given,
            # which the outer alias looks for.
            if type(values[name]) is float and not is_building_parts():
                values[name] = _own_float(values[name])
        super()._finish_init()
        values.pop(_WHERE, None)
        with building_parts():
            built = self.build()
        values[_PARTS] = built
        where = _locate_fields(self, built)
        if where is not None:
            values[_WHERE] = where

    def _with_fields(self, **values: Any) -> Self:
        current = {name: getattr(self, name) for name in self._data_fields}
        obj = super()._with_fields(**{**current, **values})
        # The parts were built from the old fields: a copy builds its own.
        obj.__dict__.pop(_PARTS, None)
        obj.__dict__.pop(_WHERE, None)
        return obj

    @classmethod
    def _register_pytree(cls, data: tuple[str, ...], static: tuple[str, ...]) -> None:
        keys = tuple(jax.tree_util.GetAttrKey(name) for name in data)
        parts_key = (jax.tree_util.GetAttrKey(_PARTS),)

        def aux_of(obj, where):
            statics = tuple(StaticValue(getattr(obj, n)) for n in static)
            if where is None:
                return (None, statics)
            # Fields with no leaves (None, a leafless part) are structure.
            leafless = tuple(
                (n, StaticValue(obj.__dict__[n])) for n in data if n not in where.names
            )
            return (where, statics, leafless)

        def flatten_with_keys(obj):
            where = obj.__dict__.get(_WHERE)
            if where is None:
                children = [
                    (k, getattr(obj, n)) for k, n in zip(keys, data, strict=True)
                ]
            else:
                children = [(parts_key[0], obj.__dict__[_PARTS])]
            return children, aux_of(obj, where)

        def flatten(obj):
            where = obj.__dict__.get(_WHERE)
            if where is None:
                children = [getattr(obj, n) for n in data]
            else:
                children = [obj.__dict__[_PARTS]]
            return children, aux_of(obj, where)

        def unflatten(aux, children):
            obj = object.__new__(cls)
            values = obj.__dict__
            where, statics = aux[0], aux[1]
            for name, wrapped in zip(static, statics, strict=True):
                values[name] = wrapped.value
            if where is None:
                values.update(zip(data, children, strict=True))
            else:
                values[_PARTS] = children[0]
                values[_WHERE] = where
                values.update((name, wrapped.value) for name, wrapped in aux[2])
                # Read now: a field with a default is also a class attribute,
                # which a lazy __getattr__ would never be asked for.
                values.update(where.read(children[0], cls.__name__))
            return obj

        jax.tree_util.register_pytree_with_keys(
            cls, flatten_with_keys, unflatten, flatten
        )

    def init_state(self, params):
        return self.parts().init(params)

    def update_state(self, updates, state, params=None, **extra_args):
        return self.parts().update(updates, state, params, **extra_args)


# ----------------------------------------------------------------------------
# Transformations from other libraries (optax) inside gradax.


class LearningRateAlias(Alias):
    """An optimizer whose first argument is the learning rate.

    Its direction's options are declared once, on an abstract options base
    that the direction and the optimizer both inherit. The optimizer names
    that base first, `class amsgrad(_AmsgradOptions, LearningRateAlias)`: a
    dataclass collects its bases' fields from the last base to the first, so
    the signature reads `learning_rate`, the direction's options, then the
    optimizer's own fields (keyword-only ones last, in the same order).
    """

    _abstract = True

    learning_rate: Any = hyper(valid=LEARNING_RATE)


def is_foreign_transformation(value: Any) -> bool:
    """Whether `value` is a transformation from another library (optax).

    A user's optax-style subclass (:class:`NamedTupleTransformation`) counts:
    its functions carry none of gradax's guarantees.
    """
    return (
        (not isinstance(value, Module) or isinstance(value, NamedTupleTransformation))
        and callable(getattr(value, "init", None))
        and callable(getattr(value, "update", None))
    )


class Foreign(GradientTransformation):
    """Wraps a transformation from another library (e.g. optax) for gradax.

    The wrapped object is static: its hyperparameters are closed over, as in
    the library it came from. Extra keyword arguments are dropped when its
    update does not accept them.

    Args:
      tx: an object with `init` and `update`.
    """

    tx: Any = static_field()

    def init_state(self, params):
        return self.tx.init(params)

    def update_state(self, updates, state, params=None, **extra_args):
        return call_update_fn(self.tx.update, updates, state, params, extra_args)


class TransformationLike(Protocol):
    """What a combinator accepts as a transformation: gradax's or optax's.

    Any object with optax's `init` and `update`; a combinator's field
    declared with :func:`transformation_field` holds it as a gradax
    transformation (an optax one wrapped).
    """

    @property
    def init(self) -> Callable[..., Any]:
        """`init(params) -> state`."""
        ...

    @property
    def update(self) -> Callable[..., Any]:
        """`update(updates, state, params=None, **extra_args)`."""
        ...


def as_transformation(value: Any, name: str = "transformation") -> Any:
    """`value` as a gradax transformation; optax ones are wrapped."""
    if isinstance(value, GradientTransformation) and not value._tuple_kind:
        return value
    if is_foreign_transformation(value):
        return Foreign(value)
    raise TypeError(
        f"{name} must be a gradient transformation (an object with init and "
        f"update), got {type(value).__name__}: {value!r}"
    )


# ``GradientTransformation(init, update)`` builds a FunctionTransformation
# (optax's idiom): report that signature for the base class too.
GradientTransformation._call_signature_from = FunctionTransformation.__init__  # type: ignore[attr-defined]
register_transformation_converter(as_transformation)


def with_extra_args_support(tx: Any) -> GradientTransformation:
    """Make `tx` accept (and ignore) extra keyword arguments in `update`.

    Args:
      tx: a gradax or optax transformation.

    Returns:
      A gradax transformation (every gradax `update` takes extra keyword
      arguments, so a gradax one is returned unchanged).
    """
    return as_transformation(tx, "tx")
