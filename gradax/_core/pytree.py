"""Immutable dataclass pytrees: the base every gradax object is built on.

A subclass of :class:`Module` is turned into a frozen dataclass and registered
with JAX. Fields marked `static_field()` go into the tree definition (flags,
dtypes, masks, callables); every other field is a child of the pytree, so its
numbers become leaves that `jit` traces and `grad` differentiates.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import inspect
import sys
import warnings
from collections.abc import Iterator
from typing import (
    TYPE_CHECKING,
    Any,
    ClassVar,
    TypeVar,
)

import jax
import numpy as np

from .._compat import Self, dataclass_transform
from .declarations import (
    HyperparameterWarning,
    converter_of,
    field,
    hyper,
    is_static,
    spec_of,
    static_field,
    transformation_field,
    unusual,
    validate,
)
from .foreign_keywords import unknown_keyword_error

_T = TypeVar("_T")

__all__ = ["Module", "ModuleMeta", "field", "static_field"]


def _fields_of(obj: Any) -> tuple[dataclasses.Field, ...]:
    """The dataclass fields of a Module or its class (made in `__init_subclass__`)."""
    return dataclasses.fields(obj)


def is_tree_function(x: Any) -> bool:
    """Whether `x`, where a tree or a function of the params goes, is a function.

    Masks, labels and routings may be given either way. A callable that is a
    pytree node (an equinox module, whose class defines `__call__`) is a
    tree; `jax.tree_util.Partial` stays a function.
    """
    if not callable(x):
        return False
    if isinstance(x, jax.tree_util.Partial):
        return True
    return jax.tree_util.treedef_is_leaf(jax.tree_util.tree_structure(x))


def safe_equal(a: Any, b: Any) -> bool:
    """Equality that never raises and treats arrays by value."""
    if a is b:
        return True
    if type(a) is not type(b):
        # A Python float and a NumPy scalar of the same value are still equal.
        if not (_is_number_like(a) and _is_number_like(b)):
            return False
    if isinstance(a, jax.core.Tracer) or isinstance(b, jax.core.Tracer):
        return False
    leaves_a, def_a = jax.tree_util.tree_flatten(a)
    leaves_b, def_b = jax.tree_util.tree_flatten(b)
    if def_a != def_b or len(leaves_a) != len(leaves_b):
        return False
    if def_a.num_nodes == 1 and def_a.num_leaves == 1 and leaves_a[0] is a:
        return _leaf_equal(a, b)
    return all(safe_equal(x, y) for x, y in zip(leaves_a, leaves_b, strict=True))


def _is_number_like(x: Any) -> bool:
    return isinstance(x, (int, float, complex, np.number, np.ndarray, jax.Array))


def _leaf_equal(a: Any, b: Any) -> bool:
    if _is_number_like(a) and _is_number_like(b):
        try:
            a_arr, b_arr = np.asarray(a), np.asarray(b)
        except Exception:  # noqa: BLE001 - e.g. a deleted buffer
            return False
        return a_arr.shape == b_arr.shape and bool(np.array_equal(a_arr, b_arr))
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - objects whose == is not a bool
        return False


def _safe_hash(x: Any) -> int:
    try:
        return hash(x)
    except TypeError:
        leaves, treedef = jax.tree_util.tree_flatten(x)
        if treedef.num_leaves == 1 and leaves and leaves[0] is x:
            return hash((type(x), getattr(x, "shape", None)))
        return hash((treedef, tuple(_safe_hash(leaf) for leaf in leaves)))


class StaticValue:
    """Wraps a static value so the tree definition can hash and compare it.

    Masks and label trees are dicts (unhashable); wrapping them lets a
    transformation that holds one still be a `jit` argument.
    """

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StaticValue) and safe_equal(self.value, other.value)

    def __hash__(self) -> int:
        return _safe_hash(self.value)

    def __repr__(self) -> str:
        return repr(self.value)


def _keep_declarations_of_redefined_fields(cls: type) -> None:
    """A subclass that only changes a field's default keeps its declaration.

    `class nadam(adam): nesterov: bool = True` must stay static and
    keyword-only, and `b1: float = 0.95` keep adam's valid range.
    """
    for name in cls.__dict__.get("__annotations__", {}):
        parent = next(
            (
                base.__dict__["__dataclass_fields__"][name]
                for base in cls.__mro__[1:]
                if name in base.__dict__.get("__dataclass_fields__", {})
            ),
            None,
        )
        value = cls.__dict__.get(name, dataclasses.MISSING)
        if parent is None or isinstance(value, dataclasses.Field):
            continue
        if value is dataclasses.MISSING:
            continue
        redefined = dataclasses.field(
            default=value, metadata=parent.metadata, kw_only=parent.kw_only
        )
        setattr(cls, name, redefined)


def _annotate_declared_fields(cls: type, fields: tuple) -> None:
    """Annotate each declared hyperparameter with the type its declaration allows.

    The annotation comes from the declaration, not the source (whose text is a
    string under `from __future__ import annotations`): a learning rate that
    accepts schedules reads as optax's `ScalarOrSchedule`.
    """
    init_annotations = getattr(cls.__init__, "__annotations__", {})
    for f in fields:
        spec = spec_of(f)
        if spec is None:
            continue
        f.type = spec.annotation()
        if f.name in init_annotations:
            init_annotations[f.name] = f.type


def _is_gradax_code(frame: Any) -> bool:
    """Whether a frame runs gradax's code.

    A generated dataclass `__init__` counts too: a user's subclass has one
    whose globals are the user's module, and the warning belongs one further up.
    """
    module = frame.f_globals.get("__name__", "")
    code = frame.f_code
    generated = code.co_filename == "<string>" and code.co_name == "__init__"
    return generated or module == "gradax" or module.startswith("gradax.")


# True while an alias builds the parts it holds (see `Alias` in _protocol):
# the user was warned about the values when the alias itself was checked.
_building_parts: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "gradax_building_parts", default=False
)


@contextlib.contextmanager
def building_parts() -> Iterator[None]:
    """Silence construction warnings while an alias builds its parts."""
    token = _building_parts.set(True)
    try:
        yield
    finally:
        _building_parts.reset(token)


def is_building_parts() -> bool:
    """Whether an alias is building its parts (see :func:`building_parts`)."""
    return _building_parts.get()


def user_stacklevel() -> int | None:
    """The `stacklevel` of the first caller outside gradax, for a warning.

    None while an alias builds its parts, and while a gradax object's
    `init` or `update` runs (`muon` builds its groups for the tree it is
    given, `inject_hyperparams` its optimizer at every step): the user was
    already warned about those values when building the object.
    """
    if _building_parts.get():
        return None
    frame, level = sys._getframe(1), 1
    while frame is not None and _is_gradax_code(frame):
        running = frame.f_code.co_name in ("init", "update")
        if running and isinstance(frame.f_locals.get("self"), Module):
            return None
        frame, level = frame.f_back, level + 1
    return level


# Libraries that call a transformation's `init` for the user: JAX's tracing
# (`jit`, `eval_shape`), the frameworks' optimizer wrappers
# (`flax.nnx.Optimizer`, `TrainState.create`), optax's combinators.
_CALLING_LIBRARIES = frozenset(
    ("jax", "jaxlib", "flax", "optax", "equinox", "chex", "orbax")
)


def _is_library_code(frame: Any) -> bool:
    """Whether a frame runs gradax's, a calling library's or Python's code."""
    top = frame.f_globals.get("__name__", "").split(".")[0]
    return (
        _is_gradax_code(frame)
        or top in _CALLING_LIBRARIES
        or top in sys.stdlib_module_names
    )


def caller_stacklevel() -> int:
    """The `stacklevel` of the first caller outside the libraries.

    For a warning given while a transformation runs (`init` under `jit`
    included): it points at the user's line that called it, past gradax's
    own frames, JAX's tracing machinery, the framework or optax code that
    called `init` (`flax.nnx.Optimizer`, `optax.chain`) and the standard
    library's (`functools`, `contextlib`).
    """
    frame, level = sys._getframe(1), 1
    while frame is not None and _is_library_code(frame):
        frame, level = frame.f_back, level + 1
    return level


def _warn_at_construction(notes: list[tuple[str, str]]) -> None:
    """One :class:`HyperparameterWarning` for an object a user builds.

    The warning points at the user's line. The stack is walked only when
    there is something to say, so valid values cost nothing.
    """
    if not notes:
        return
    level = user_stacklevel()
    if level is None:
        return
    # Arguments with the same reason share it: "learning_rate=-0.1,
    # adam_learning_rate=-0.2: a negative learning rate makes ...".
    reasons: dict[str, list[str]] = {}
    for what, why in notes:
        reasons.setdefault(why, []).append(what)
    message = "; ".join(f"{', '.join(whats)}: {why}" for why, whats in reasons.items())
    warnings.warn(message, HyperparameterWarning, stacklevel=level)


class ModuleMeta(type):
    """Finishes every construction in one place, whatever `__init__` ran.

    Calling a class runs its `__init__` (the dataclass one, or a class's
    own, as `chain(*transforms)` has), then :meth:`Module._finish_init`:
    field converters, declared ranges, every `__check_init__`, warnings.
    JAX's unflatten bypasses the call, so tracers coming out of `jit` are
    never converted or checked.
    """

    if not TYPE_CHECKING:
        # Hidden from static tools, which would otherwise read this signature
        # instead of each class's ``__init__``.

        def __call__(cls, *args, **kwargs):
            try:
                obj = super().__call__(*args, **kwargs)
            except TypeError as error:
                # Raised before any __init__ ran (no frame below this one):
                # Python's binding of the arguments, e.g. torch's `lr=`.
                if kwargs and error.__traceback__.tb_next is None:
                    clearer = unknown_keyword_error(cls, kwargs, error)
                    if clearer is not None:
                        raise clearer from None
                raise
            if isinstance(obj, Module):
                obj._finish_init()
            return obj

    @property
    def __signature__(cls) -> inspect.Signature:
        # What calling the class takes: its __init__'s arguments (without
        # this, ``inspect.signature`` would report ``__call__``'s above).
        # A property of the metaclass, so instances (callable schedules)
        # keep their own signature.
        init = cls.__dict__.get("_call_signature_from", cls.__init__)
        if init is object.__init__:
            return inspect.Signature()
        signature = inspect.signature(init)
        return signature.replace(parameters=tuple(signature.parameters.values())[1:])


@dataclass_transform(
    frozen_default=True,
    field_specifiers=(
        dataclasses.field,
        field,
        hyper,
        static_field,
        transformation_field,
    ),
)
class Module(metaclass=ModuleMeta):
    """Base of all gradax objects: a frozen dataclass registered as a pytree.

    Subclasses declare fields with annotations (static tools see the
    constructor: the class is a `dataclass_transform`). Three paths build
    an object, each doing only what applies to it:

    - calling the class: its `__init__`, then each field's converter (a
      field declares one with `field(converter=...)` or `hyper(...,
      converter=...)`), the declared ranges, and `__check_init__` of every
      class in the hierarchy that defines one (base first; a subclass never
      calls `super()`);
    - :meth:`replace`: a copy with the changed fields, then the same
      conversion and checks;
    - JAX's unflatten: the leaves set as they are, nothing converted or
      checked (they may be tracers).
    """

    # True in the body of an abstract base class, one that holds shared
    # behaviour and is never built itself (not inherited: every class says it
    # for itself; tests/core/test_package_structure.py reads it).
    _abstract: ClassVar[bool] = False
    # A message for a class kept only for compatibility: building one gives
    # a DeprecationWarning pointing at the user's line.
    _deprecation: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        if "__post_init__" in cls.__dict__ or "_check" in cls.__dict__:
            raise TypeError(
                f"{cls.__name__}: gradax modules convert fields with "
                "field(converter=...) and check them in __check_init__, not "
                "in __post_init__ or _check"
            )
        _keep_declarations_of_redefined_fields(cls)
        dataclasses.dataclass(frozen=True, eq=False, repr=False)(cls)
        fields = _fields_of(cls)
        _annotate_declared_fields(cls, fields)
        data = tuple(f.name for f in fields if not is_static(f))
        static = tuple(f.name for f in fields if is_static(f))
        cls._data_fields = data
        cls._static_fields = static
        cls._field_plan = tuple((f.name, converter_of(f), f) for f in fields)
        cls._declared = tuple(
            (f.name, spec) for f in fields if (spec := spec_of(f)) is not None
        )
        cls._check_inits = tuple(
            klass.__dict__["__check_init__"]
            for klass in reversed(cls.__mro__)
            if "__check_init__" in klass.__dict__
        )
        cls._register_pytree(data, static)

    @classmethod
    def _register_pytree(cls, data: tuple[str, ...], static: tuple[str, ...]) -> None:
        """Register the class with JAX: `data` fields are children, `static` aux.

        An alias overrides this: its children are the parts it holds.
        """
        keys = tuple(jax.tree_util.GetAttrKey(name) for name in data)

        def flatten_with_keys(obj):
            children = [(k, getattr(obj, n)) for k, n in zip(keys, data, strict=True)]
            aux = tuple(StaticValue(getattr(obj, n)) for n in static)
            return children, aux

        def flatten(obj):
            children = [getattr(obj, n) for n in data]
            aux = tuple(StaticValue(getattr(obj, n)) for n in static)
            return children, aux

        def unflatten(aux, children):
            obj = object.__new__(cls)
            for name, value in zip(data, children, strict=True):
                object.__setattr__(obj, name, value)
            for name, wrapped in zip(static, aux, strict=True):
                object.__setattr__(obj, name, wrapped.value)
            return obj

        jax.tree_util.register_pytree_with_keys(
            cls, flatten_with_keys, unflatten, flatten
        )

    def _finish_init(self) -> None:
        """Convert, validate and check the fields of a newly built object.

        Runs at every construction, also of the parts an alias builds inside
        each traced update, so the per-field work is planned once per class
        (`_field_plan`, `_declared`) instead of read from the dataclass.
        """
        values = self.__dict__
        converts = type(self)._convert_field is not Module._convert_field
        for name, converter, f in self._field_plan:
            if converter is not None:
                values[name] = converter(values[name], name)
            elif converts:
                values[name] = self._convert_field(f, values[name])
        for name, spec in self._declared:
            validate(name, values[name], spec)
        for check in self._check_inits:
            check(self)
        if self._deprecation:
            level = user_stacklevel()
            if level is not None:
                warnings.warn(self._deprecation, DeprecationWarning, stacklevel=level)
        _warn_at_construction(self._unusual_values())

    def _convert_field(self, field: dataclasses.Field, value: Any) -> Any:
        """The conversion of a field that declares no converter of its own.

        The identity here; a base class sets a policy for all its fields
        (transformations wrap optax objects found in their data fields).
        """
        del field
        return value

    def _unusual_values(self) -> list[tuple[str, str]]:
        """Valid values that are usually a mistake: `(what, why)` pairs.

        Read from the declarations (`Range.warn_below`: a negative learning
        rate). A subclass overrides this where another field decides whether
        a value is unusual (`scale_by_learning_rate(flip_sign=False)` is a
        plain multiplier, for which a negative rate is the normal use).
        """
        notes = []
        for name, spec in self._declared:
            note = unusual(name, getattr(self, name), spec)
            if note is not None:
                notes.append(note)
        return notes

    def replace(self, **changes: Any) -> Self:
        """A copy with some fields changed, validated like a new object.

        Works for every module, including those whose `__init__` takes
        other arguments than their fields (`chain(*transforms)`).
        """
        fields = _fields_of(self)
        names = {f.name for f in fields if f.init}
        derived = sorted(set(changes) & {f.name for f in fields if not f.init})
        if derived:
            # Built at construction from the other fields (a Muon member's
            # `newton_schulz` from its options): setting one alone would
            # leave it disagreeing with them, or be silently rebuilt.
            raise TypeError(
                f"{self._public_name()}.replace cannot set {derived}: made at "
                "construction from the other fields; replace those instead "
                f"(its fields are {sorted(names)})"
            )
        unknown = sorted(set(changes) - names)
        if unknown:
            raise TypeError(
                f"{self._public_name()}.replace got unknown field(s) {unknown}; "
                f"its fields are {sorted(names)}"
            )
        obj = self._with_fields(**changes)
        obj._finish_init()
        return obj

    def part(self, cls: type[_T], **values: Any) -> _T:
        """`cls` built from this module's fields of the same names, and `values`.

        An alias keeps its direction's options as fields of the same names
        (`adam.b1` is `scale_by_adam.b1`), and a Muon direction its Newton–
        Schulz options (`NewtonSchulz`): this passes them on, so no class
        copies them one by one.
        """
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            if f.init and f.name not in values and f.name in self.__dict__:
                values[f.name] = self.__dict__[f.name]
        return cls(**values)

    def _with_fields(self, **values: Any) -> Self:
        """A copy with fields set directly, skipping validation (for tracers)."""
        obj = object.__new__(type(self))
        obj.__dict__.update(self.__dict__)
        obj.__dict__.update(values)
        # Facts remembered from the old fields (protocol._remembered).
        obj.__dict__.pop("_remembered_facts", None)
        return obj

    def _public_name(self) -> str:
        return type(self).__name__

    def __repr__(self) -> str:
        parts = []
        for f in _fields_of(self):
            if not f.repr:
                continue
            parts.append(f"{f.name}={getattr(self, f.name)!r}")
        return f"{self._public_name()}({', '.join(parts)})"

    def __eq__(self, other: object) -> bool:
        if type(self) is not type(other):
            return NotImplemented
        return all(
            safe_equal(getattr(self, f.name), getattr(other, f.name))
            for f in _fields_of(self)
        )

    def __hash__(self) -> int:
        values = (getattr(self, f.name) for f in _fields_of(self))
        return hash((type(self), tuple(_safe_hash(v) for v in values)))
