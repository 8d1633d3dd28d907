"""Declared hyperparameters: each field states its valid values once.

A field written `b1: float = hyper(default=0.9, valid=DECAY)` is a numeric
hyperparameter whose values must lie in `[0, 1)`. :class:`gradax.Module`
validates every declared field when a user builds the object, so an error
names the user's argument (the field has the argument's name) and the valid
range, and no class writes these checks by hand.

What a declaration says:

- `valid`: a :class:`Range` (bounds, open or closed, integer or real) or a
  :class:`OneOf` (a set of allowed values, e.g. preset names);
- `schedule`: whether a schedule (a callable of the step count) is accepted;
- `array`: whether an array (NumPy or JAX, any shape) is accepted;
- `static`: whether the value is part of the tree definition (step counts,
  names) instead of a leaf.

Plain numbers must be finite (NaN and inf are refused unless the range says
`allow_inf`). Strings, lists, booleans and other non-numbers are refused.
Tracers are not checked (their values are unknown). A schedule is checked
through its `bounds()` when it has one: gradax's own schedules know the
smallest and largest value they take from their arguments, without calling a
device; a plain function is not called at construction.

A range may also name values that are valid but usually a mistake
(`warn_below`: a negative learning rate makes an optimizer ascend). Those
are accepted, as optax accepts them, and the object's construction gives one
:class:`HyperparameterWarning` naming the argument.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, NoReturn, Union

import jax
import numpy as np

_SPEC = "gradax_hyper"
_STATIC = "gradax_static"
_CONVERTER = "gradax_converter"

Converter = Callable[[Any, str], Any]
"""A field's converter: ``converter(value, name) -> value`` (name: the
argument's, for error messages). It runs when a user builds the object and in
``replace``, before the declared range is checked; never on unflatten."""


class HyperparameterError(ValueError, TypeError):
    """A hyperparameter given at construction is invalid (names the argument).

    It is a ValueError (a bad value) and a TypeError (a non-number), so code
    catching either sees it.
    """

    __module__ = "gradax"


class HyperparameterWarning(UserWarning):
    """A hyperparameter is valid but usually a mistake (names the argument).

    Issued once when a user builds the object, e.g. for a negative learning
    rate, which optax accepts and which makes the optimizer ascend. Silence it
    where it is meant with `warnings.filterwarnings("ignore",
    category=gradax.declare.HyperparameterWarning)`.
    """

    __module__ = "gradax.declare"


@dataclasses.dataclass(frozen=True)
class Range:
    """Valid values: an interval of reals or integers.

    Args:
      low: the lower bound (`-inf` for none).
      high: the upper bound (`inf` for none).
      low_open: exclude `low` itself.
      high_open: exclude `high` itself.
      integer: only integers.
      allow_inf: accept `inf` (e.g. "no clipping"); NaN is never valid.
      hint: a sentence added to the error message.
      warn_below: values below it are valid but usually a mistake: they are
        accepted, and building the object warns (`-inf`: never).
      warning: what such a value does, for the warning's message.
    """

    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False
    integer: bool = False
    allow_inf: bool = False
    hint: str = ""
    warn_below: float = -math.inf
    warning: str = ""

    def describe(self) -> str:
        """The range as text, e.g. `in [0, 1)` or `an integer >= 1`."""
        if self.integer:
            if math.isinf(self.low) and math.isinf(self.high):
                return "an integer"
            if math.isinf(self.high):
                op = ">" if self.low_open else ">="
                return f"an integer {op} {self.low:g}"
            return f"an integer in {self._interval()}"
        if math.isinf(self.low) and math.isinf(self.high):
            return "a real number" if self.allow_inf else "a finite real number"
        return f"in {self._interval()}"

    def _interval(self) -> str:
        # inf is a member only where the range allows it ("no clipping").
        left = "(" if self.low_open or math.isinf(self.low) else "["
        high_closed = not self.high_open and (
            not math.isinf(self.high) or self.allow_inf
        )
        right = "]" if high_closed else ")"
        return f"{left}{self.low:g}, {self.high:g}{right}"

    def contains(self, numbers: np.ndarray) -> bool:
        """Whether every number lies in the range (NaN never does)."""
        if np.any(np.isnan(numbers)):
            return False
        if not self.allow_inf and not np.all(np.isfinite(numbers)):
            return False
        too_low = numbers <= self.low if self.low_open else numbers < self.low
        too_high = numbers >= self.high if self.high_open else numbers > self.high
        return not (np.any(too_low) or np.any(too_high))


@dataclasses.dataclass(frozen=True)
class OneOf:
    """Valid values: one of a fixed set (e.g. the names of presets).

    Args:
      values: the allowed values.
      also: a predicate accepting further values (e.g. tuples of numbers),
        described by `also_text`.
      also_text: what `also` accepts, for the error message.
    """

    values: tuple[Any, ...]
    also: Callable[[Any], bool] | None = None
    also_text: str = ""

    def describe(self) -> str:
        """The allowed values as text."""
        if not self.values:
            return self.also_text
        text = "one of " + ", ".join(repr(v) for v in self.values)
        return f"{text}, or {self.also_text}" if self.also_text else text


# optax's public type aliases, as the same objects optax builds (code that
# inspects annotations, optax's own tests among it, compares them by value).
Schedule = Callable[[jax.typing.ArrayLike], jax.typing.ArrayLike]
ScalarOrSchedule = Union[float, jax.Array, Schedule]  # noqa: UP007 - runtime alias
Scalar = Union[float, jax.Array]  # noqa: UP007 - runtime alias


# Ranges that many optimizers share.
ANY = Range()
"""Any finite real number."""
NONNEGATIVE = Range(0.0)
"""``[0, inf)``: an epsilon, a weight decay."""
POSITIVE = Range(0.0, low_open=True)
"""``(0, inf)``: a norm bound, a temperature."""
DECAY = Range(0.0, 1.0, high_open=True)
"""``[0, 1)``: Adam's ``b1``, a momentum (1 would never forget)."""
UNIT = Range(0.0, 1.0)
"""``[0, 1]``: a fraction, a probability, an interpolation weight."""
POSITIVE_INT = Range(1, integer=True)
"""An integer ``>= 1``: a step count, a block size."""
NONNEGATIVE_INT = Range(0, integer=True)
"""An integer ``>= 0``."""
PERIOD = Range(
    integer=True,
    warn_below=1,
    warning=(
        "a period below 1 never applies an update (every update is zeros), as in optax"
    ),
)
"""An integer, usually ``>= 1``: how many steps an update is accumulated
over. optax also takes 0 or less (no update ever): accepted, with a warning."""
LEARNING_RATE = Range(
    warn_below=0.0,
    warning=(
        "a negative learning rate makes the optimizer ascend (increase the "
        "objective), as in optax"
    ),
)
"""Any finite real number; a negative one is accepted, as optax accepts it
(its getting-started notebook ascends with one), with a warning."""


@dataclasses.dataclass(frozen=True)
class Spec:
    """What a field declares: valid values, and the forms accepted."""

    valid: Range | OneOf
    schedule: bool
    array: bool
    allow_none: bool
    static: bool = False  # in the tree definition: known when the program is built

    def annotation(self) -> Any:
        """The type a field with this declaration is annotated with."""
        if isinstance(self.valid, OneOf):
            return Any
        if self.schedule:
            base = ScalarOrSchedule
        elif self.array:
            base = Scalar
        else:
            base = int if self.valid.integer else float
        return base | None if self.allow_none else base


def hyper(
    *,
    default: Any = dataclasses.MISSING,
    valid: Range | OneOf = ANY,
    schedule: bool | None = None,
    array: bool | None = None,
    static: bool = False,
    allow_none: bool | None = None,
    kw_only: bool = False,
    converter: Converter | None = None,
) -> Any:
    """Declare a hyperparameter field and its valid values.

    Every argument is a keyword, so static tools (`dataclass_transform`)
    read `default` as the field's default.

    Args:
      default: the default value (omit for a required argument).
      valid: a :class:`Range` or :class:`OneOf`.
      schedule: accept a schedule (default: True for a numeric leaf, False
        for a static field).
      array: accept an array (default: like `schedule`).
      static: keep the value in the tree definition (it shapes the program).
      allow_none: accept None (default: when the default is None).
      kw_only: a keyword-only argument.
      converter: brings the user's value to canonical form before the range
        is checked (see :data:`Converter`).

    Returns:
      A dataclass field carrying the declaration.
    """
    numeric_leaf = not static and isinstance(valid, Range)
    if static:
        converter = _with_python_number(converter)
    spec = Spec(
        valid=valid,
        schedule=numeric_leaf if schedule is None else schedule,
        array=numeric_leaf if array is None else array,
        allow_none=(default is None) if allow_none is None else allow_none,
        static=static,
    )
    metadata = {_SPEC: spec, _STATIC: static, _CONVERTER: converter}
    return dataclasses.field(default=default, metadata=metadata, kw_only=kw_only)


def _python_number(value: Any) -> Any:
    """A concrete 0-d array (`np.float32(0.5)`, `jnp.asarray(4)`) as the
    Python number it holds; anything else as it is. A static value is read
    before tracing and hashed in the tree definition: an array would be
    neither (under `jit` it would come back as a tracer)."""
    concrete = isinstance(value, (np.generic, np.ndarray)) or (
        isinstance(value, jax.Array)
        and not isinstance(value, jax.core.Tracer)
        and getattr(value, "is_fully_addressable", True)
    )
    return value.item() if concrete and np.ndim(value) == 0 else value


def _with_python_number(converter: Converter | None) -> Converter:
    if converter is None:
        return lambda value, name: _python_number(value)
    return lambda value, name: converter(_python_number(value), name)


def field(
    *,
    default: Any = dataclasses.MISSING,
    static: bool = False,
    converter: Converter | None = None,
    **kwargs: Any,
) -> Any:
    """A field that is not a declared hyperparameter (a wrapped transformation,
    a mask), with an optional converter.

    Args:
      default: the default value (omit for a required argument).
      static: keep the value in the tree definition instead of the leaves.
      converter: see :data:`Converter`.
      **kwargs: passed to :func:`dataclasses.field` (`kw_only`,
        `default_factory`, `repr`).

    Returns:
      A dataclass field.
    """
    metadata: dict[str, Any] = {**kwargs.pop("metadata", {}), _STATIC: static}
    metadata[_CONVERTER] = converter
    return dataclasses.field(default=default, metadata=metadata, **kwargs)


def static_field(
    *,
    default: Any = dataclasses.MISSING,
    converter: Converter | None = None,
    **kwargs: Any,
) -> Any:
    """A dataclass field stored in the tree definition instead of the leaves.

    For structure that is not a number: flags, dtypes, masks, callables.

    Args:
      default: the field's default value (none: the argument is required).
      converter: a callable applied to the value at construction.
      **kwargs: other arguments of `dataclasses.field` (`kw_only`, ...).
    """
    return field(default=default, static=True, converter=converter, **kwargs)


class Shared:
    """Field declarations that several classes hold, each taken by its name.

    A direction and the optimizers that build it keep the same options:
    `ADAM = Shared(b1=hyper(default=0.9, valid=DECAY), ...)` declares each
    once, and each class body writes `b1: Any = ADAM.field()`, in its own
    signature's order, for a fresh copy of the declaration of its own name
    (a dataclass field belongs to one class). Keyword-only options follow
    `_: KW_ONLY` in the class body, which static tools read as the runtime
    does; the declarations' own `kw_only` is not copied. A class may change a
    default it documents (`ADAM.field(default=1e-6)`), never the valid values.
    """

    def __init__(self, **declarations: Any) -> None:  # dataclass fields
        if any(
            d.default_factory is not dataclasses.MISSING for d in declarations.values()
        ):
            raise TypeError("Shared copies a declaration's default, not a factory")
        self._declarations = declarations

    def field(self, *, default: Any = dataclasses.MISSING) -> Any:
        """The declaration of the attribute this is assigned to.

        Args:
          default: this class's default instead of the declared one; it must
            be one of the declared valid values (checked as the class is made).
        """
        return _SharedField(self._declarations, default)

    def declared(self, name: str) -> dataclasses.Field:
        """The declaration of `name` itself (for checks of a class's fields)."""
        return self._declarations[name]


class _SharedField:
    """Stands in a class body for a shared declaration until its name is known."""

    def __init__(
        self, declarations: dict[str, dataclasses.Field], default: Any
    ) -> None:
        self._declarations = declarations
        self._default = default

    def __set_name__(self, owner: type, name: str) -> None:
        # Runs as the class is made, before it becomes a dataclass.
        if name not in self._declarations:
            raise TypeError(
                f"{owner.__name__}.{name}: no shared declaration of {name!r}; "
                f"there are {sorted(self._declarations)}"
            )
        declared = self._declarations[name]
        default = declared.default
        if self._default is not dataclasses.MISSING:
            default = self._default
            spec = spec_of(declared)
            if spec is not None:  # a wrong default is the class's error, now
                validate(f"{owner.__name__}.{name}'s default", default, spec)
        copy = dataclasses.field(default=default, metadata=declared.metadata)
        setattr(owner, name, copy)


def is_static(field: dataclasses.Field) -> bool:
    """Whether a field belongs to the tree definition."""
    return bool(field.metadata.get(_STATIC, False))


def transformation_field(*, default: Any = dataclasses.MISSING, **kwargs: Any) -> Any:
    """A field holding a transformation: an optax one is wrapped on the way in.

    The conversion runs when the object is built and in `replace`, so
    `chain(...).replace(transforms=(optax.scale(1.0),))` holds the same as
    `chain(optax.scale(1.0))`.
    """
    return field(default=default, converter=_as_transformation, **kwargs)


# Set by gradax._core.protocol, which builds on this module: the conversion of a
# value given for a transformation field (optax ones are wrapped).
_transformation_converter: list[Converter] = []


def register_transformation_converter(converter: Converter) -> None:
    """Install what :func:`transformation_field` converts with (the protocol's)."""
    _transformation_converter[:] = [converter]


def _as_transformation(value: Any, name: str) -> Any:
    return _transformation_converter[0](value, name)


def converter_of(field: dataclasses.Field) -> Converter | None:
    """The converter a field declares, or None."""
    return field.metadata.get(_CONVERTER)


def spec_of(field: dataclasses.Field) -> Spec | None:
    """The declaration of a field, or None for an undeclared one."""
    return field.metadata.get(_SPEC)


# ----------------------------------------------------------------------------
# Validation.


def _fail(name: str, spec: Spec, value: Any, reason: str = "") -> NoReturn:
    forms = []
    if spec.array:
        forms.append("an array")
    if spec.schedule:
        forms.append("a schedule")
    accepted = f" (a number{''.join(', ' + f for f in forms)})" if forms else ""
    if isinstance(spec.valid, OneOf):
        accepted = ""
    message = f"{name} must be {spec.valid.describe()}{accepted}, got {value!r}"
    if reason:
        message += f" ({reason})"
    hint = getattr(spec.valid, "hint", "")
    if hint:
        message += f". {hint}"
    raise HyperparameterError(message)


def _is_schedule_like(value: Any) -> bool:
    return callable(value) and not isinstance(value, type)


def _concrete_numbers(value: Any) -> np.ndarray | None:
    """The numbers of `value` when they can be read without a trace."""
    numbers = None
    if isinstance(value, (int, float, complex, np.number, np.ndarray)):
        numbers = np.asarray(value)
    elif isinstance(value, jax.Array) and not isinstance(value, jax.core.Tracer):
        # A user's concrete array: reading it back syncs once, at construction.
        # Arrays spread over processes cannot be read here and are not checked.
        if getattr(value, "is_fully_addressable", True):
            numbers = np.asarray(value)
    if numbers is not None and numbers.dtype.kind == "V":
        # bfloat16 and the float8 types are NumPy "void" kinds to NumPy.
        if jax.numpy.issubdtype(numbers.dtype, jax.numpy.floating):
            numbers = numbers.astype(np.float32)
    return numbers


def validate(name: str, value: Any, spec: Spec) -> None:
    """Raise :class:`HyperparameterError` unless `value` fits `spec`."""
    if value is None:
        if not spec.allow_none:
            _fail(name, spec, value)
        return
    if isinstance(value, jax.core.Tracer):
        if spec.static:
            # A loop's length, a shape, a branch: fixed before tracing starts.
            _fail(
                name,
                spec,
                value,
                "a traced value, but it is static: it shapes the compiled "
                "program, so it must be a Python number",
            )
        return
    if isinstance(spec.valid, OneOf):
        _validate_choice(name, value, spec)
        return
    if _is_schedule_like(value) and not hasattr(value, "dtype"):
        if not spec.schedule:
            _fail(name, spec, value, "a schedule is not accepted here")
        bounds = getattr(value, "bounds", None)
        known = bounds() if callable(bounds) else None
        if known is not None and not spec.valid.contains(np.asarray(known, float)):
            _fail(name, spec, value, f"the schedule takes values in {list(known)}")
        return
    if isinstance(value, (bool, np.bool_)):
        _fail(name, spec, value, "a boolean is not a number")
    is_array = isinstance(value, (np.ndarray, jax.Array))
    if is_array and not spec.array and np.ndim(value) > 0:
        _fail(name, spec, value, "an array is not accepted here")
    numbers = _concrete_numbers(value)
    if numbers is None:
        if is_array:
            return  # not readable here (spread over processes)
        _fail(name, spec, value, f"a {type(value).__name__} is not a number")
    kind = np.dtype(numbers.dtype).kind
    if kind not in "biuf":
        _fail(name, spec, value, "not a real number")
    if kind == "b":
        _fail(name, spec, value, "a boolean is not a number")
    if spec.valid.integer and kind not in "iu":
        _fail(name, spec, value, "not an integer")
    if not spec.valid.contains(numbers.astype(float)):
        _fail(name, spec, value)
    # Updates run in float32 at least: a value that float32 rounds onto an
    # open bound or past a finite one (b1=1e-50 to 0, b2=0.99999999 to 1,
    # where Adam's bias correction divides by zero) is out of range there.
    single = numbers.astype(np.float32).astype(float)
    if not spec.valid.integer and not spec.valid.contains(single):
        shown = single if single.ndim else float(single)
        _fail(
            name,
            spec,
            value,
            f"float32, the precision updates use, rounds it to {shown}",
        )


def unusual(name: str, value: Any, spec: Spec) -> tuple[str, str] | None:
    """`(what, why)` when a valid `value` lies below its `warn_below`.

    `what` names the argument and its value, `why` is the range's
    `warning`. Only values known without touching a device are read:
    numbers, arrays (read back as :func:`validate` does), and schedules with
    `bounds()`. A plain function is not called (it may compute on a
    device), so it gets no note; neither do tracers.
    """
    valid = spec.valid
    if not isinstance(valid, Range) or valid.warn_below == -math.inf:
        return None
    if value is None or isinstance(value, jax.core.Tracer):
        return None
    if _is_schedule_like(value) and not hasattr(value, "dtype"):
        bounds = getattr(value, "bounds", None)
        known = bounds() if callable(bounds) else None
        if known is None or known[0] >= valid.warn_below:
            return None
        return f"{name} (a schedule going down to {known[0]:g})", valid.warning
    numbers = _concrete_numbers(value)
    if numbers is None or not np.any(numbers.astype(float) < valid.warn_below):
        return None
    return f"{name}={value!r}", valid.warning


def _validate_choice(name: str, value: Any, spec: Spec) -> None:
    choice = spec.valid
    assert isinstance(choice, OneOf)  # the caller dispatches on the kind
    try:
        known = any(value == v and type(value) is type(v) for v in choice.values)
    except Exception:  # noqa: BLE001 - arrays compare elementwise
        known = False
    if known:
        return
    if choice.also is not None and choice.also(value):
        return
    _fail(name, spec, value)
