"""Hyperparameters kept in the optimizer state: inject_hyperparams."""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._core.foreign_keywords import unknown_keyword_error
from .._core.hyper import Schedule, StatefulSchedule, as_hyperparameter
from .._core.numerics import real_dtype, safe_increment
from .._core.protocol import GradientTransformation, as_transformation, zero_count
from .._core.pytree import Module, caller_stacklevel, static_field
from .._core.state_guard import is_weakly_typed
from .wrapped import WrappedSchedule, WrappedScheduleState


class InjectStatefulHyperparamsState(NamedTuple):
    """State of an injected optimizer.

    `hyperparams` holds the values used by the last update (or init), so
    `gradax.tree.get(state, "learning_rate")` reads the current rate, and
    writing a non-scheduled entry changes what the next update uses.
    """

    count: jax.Array  # int32 scalar
    hyperparams: dict[str, Any]
    hyperparams_states: dict[str, Any]
    inner_state: Any


# optax 0.2.8 keeps an older class of this name that its inject_hyperparams no
# longer returns, so ``isinstance(state, optax.InjectHyperparamsState)`` is
# False there. Code written for the older optax (learning-rate loggers and
# setters in public trainers) tests exactly that; here it holds, as its
# authors meant (docs/differences-from-optax.md).
InjectHyperparamsState = InjectStatefulHyperparamsState


def _convert_floats(value: Any, dtype: Any) -> Any:
    """Floats (and weakly typed arrays) take the hyperparameter dtype."""
    if isinstance(value, jax.Array) and not is_weakly_typed(value):
        return value
    current = getattr(value, "dtype", None) or np.result_type(type(value))
    if jnp.issubdtype(current, jnp.floating):
        return jnp.asarray(value, dtype=dtype)
    return jnp.asarray(value)


def default_hyperparam_dtype(params: Any) -> Any:
    """The dtype injected hyperparameters are stored in, unless one is given.

    The widest real floating dtype of the params, and at least float32.
    Differences from optax (which takes the params' highest dtype as is):
    hyperparameters of a bfloat16 or float16 group (a masked group of a
    partition sees only its own leaves) stay in float32, where Adam's
    `b2 = 0.999` does not round to 1 (which made `1 - b2**t` zero and the
    group's updates silently zero or NaN); complex params store real numbers.
    """
    result = jnp.dtype(jnp.float32)
    for leaf in jax.tree.leaves(params):
        dtype = getattr(leaf, "dtype", None)
        if dtype is not None and jnp.issubdtype(dtype, jnp.inexact):
            result = jnp.promote_types(result, real_dtype(dtype))
    return result


def _promoted_schedule_state(schedule: Any, state: Any, dtype: Any) -> Any:
    """A stateful schedule's state, with its numbers stored in at least `dtype`.

    optax lets such a state change dtype in `update` (an int32 total plus a
    float extra argument becomes float32). A gradax state keeps the dtypes
    `init` gave it, so the total must start as a float, or a 0.3 added to
    it would be cast back to 0. Integer and lower-precision float leaves are
    therefore promoted with `dtype` (at least float32); booleans stay. A
    :class:`WrappedSchedule` keeps its int32 step count, as in optax.
    """
    if isinstance(schedule, WrappedSchedule):
        return state
    dtype = jnp.promote_types(dtype, jnp.float32)

    def promote(leaf: Any) -> Any:
        leaf = jnp.asarray(leaf)
        if jnp.issubdtype(leaf.dtype, jnp.integer) or jnp.issubdtype(
            leaf.dtype, jnp.inexact
        ):
            return leaf.astype(jnp.promote_types(leaf.dtype, dtype))
        return leaf

    return jax.tree.map(promote, state)


def _static_names(factory: Callable) -> set[str]:
    """Arguments a gradax class declares static (masks, dtypes, flags)."""
    if isinstance(factory, type) and issubclass(factory, Module):
        return set(factory._static_fields)
    return set()


class InjectHyperparams(GradientTransformation):
    """An optimizer rebuilt at each step from hyperparameters in its state.

    Made by :func:`inject_hyperparams`; see there.
    """

    _checks_update_shapes = False  # the inner transformation checks
    _opaque = True  # the inner transformation is built at each step

    factory: Callable[..., Any] = static_field()
    numeric: dict[str, Any]
    schedules: dict[str, Any]
    others: dict[str, Any] = static_field()
    hyperparam_dtype: Any = static_field(default=None)

    def __repr__(self) -> str:
        name = getattr(self.factory, "__name__", repr(self.factory))
        args = {**self.numeric, **self.schedules, **self.others}
        shown = ", ".join(f"{k}={v!r}" for k, v in args.items())
        return f"inject_hyperparams({name})({shown})"

    def _dtype(self, params: Any) -> Any:
        if self.hyperparam_dtype is not None:
            return self.hyperparam_dtype
        return default_hyperparam_dtype(params)

    def _scheduled_values(self, count, states, dtype, **extra_args):
        values = {}
        for name, schedule in self.schedules.items():
            if isinstance(schedule, StatefulSchedule):
                value = schedule(states[name], **extra_args)
            else:
                # A plain schedule counts in its own WrappedScheduleState, the
                # state optax keeps for it; equal to ``count`` unless edited.
                value = schedule(states[name].count)
            values[name] = _convert_floats(value, dtype)
        return values

    def _inner(self, hyperparams: dict[str, Any]) -> GradientTransformation:
        return as_transformation(self.factory(**self.others, **hyperparams))

    def init_state(self, params):
        dtype = self._dtype(params)
        count = zero_count()
        states = {
            name: (
                _promoted_schedule_state(s, s.init(), dtype)
                if isinstance(s, StatefulSchedule)
                else WrappedScheduleState(count=count)
            )
            for name, s in self.schedules.items()
        }
        hyperparams = {k: _convert_floats(v, dtype) for k, v in self.numeric.items()}
        hyperparams.update(self._scheduled_values(count, states, dtype))
        return InjectStatefulHyperparamsState(
            count=count,
            hyperparams=hyperparams,
            hyperparams_states=states,
            inner_state=self._inner(hyperparams).init(params),
        )

    def update_state(self, updates, state, params=None, **extra_args):
        dtype = self._dtype(params if params is not None else updates)
        hyperparams = {
            k: _convert_floats(v, dtype) for k, v in state.hyperparams.items()
        }
        hyperparams.update(
            self._scheduled_values(
                state.count, state.hyperparams_states, dtype, **extra_args
            )
        )
        states = {
            name: (
                self.schedules[name].update(s, **extra_args)
                if isinstance(self.schedules[name], StatefulSchedule)
                else WrappedScheduleState(count=safe_increment(s.count))
            )
            for name, s in state.hyperparams_states.items()
        }
        updates, inner_state = self._inner(hyperparams).update(
            updates, state.inner_state, params, **extra_args
        )
        return updates, InjectStatefulHyperparamsState(
            count=safe_increment(state.count),
            hyperparams=hyperparams,
            hyperparams_states=states,
            inner_state=inner_state,
        )


# A factory that branches on a hyperparameter's value (``if b1 > 0``) cannot
# be built with an abstract one; optax never tries, so neither does the check.
_NEEDS_A_VALUE = (
    jax.errors.ConcretizationTypeError,
    jax.errors.TracerArrayConversionError,
    jax.errors.TracerIntegerConversionError,
)


def _check_factory(
    factory: Callable[..., Any],
    numeric: dict[str, Any],
    schedules: dict[str, Any],
    others: dict[str, Any],
) -> None:
    """Build the inner transformation once, abstractly, so bad arguments fail now.

    optax calls the factory only inside `init` and `update`, with each
    hyperparameter's value (an array), so a factory may compute with it
    (`scale(-learning_rate)`, `learning_rate / peak`). The check does the
    same with each schedule's value as an abstract float32 scalar, under
    `jax.eval_shape` (no device is touched), and the numbers as given: a
    bad static argument or an out-of-range number is reported at
    construction. The warnings of that build are passed on at the user's line.
    """

    def build(values: dict[str, Any]) -> int:
        as_transformation(factory(**others, **numeric, **values), "inner_factory()")
        return 0

    abstract = {name: jax.ShapeDtypeStruct((), jnp.float32) for name in schedules}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            jax.eval_shape(build, abstract)
        except _NEEDS_A_VALUE:
            pass
    for warning in caught:
        # At the user's line: past this function, the builder and JAX.
        warnings.warn(warning.message, warning.category, stacklevel=caller_stacklevel())


def inject_stateful_hyperparams(
    inner_factory: Callable[..., Any],
    static_args: str | Iterable[str] = (),
    hyperparam_dtype: Any = None,
) -> Callable[..., InjectHyperparams]:
    """Wrap an optimizer factory so its hyperparameters live in the state.

    Numeric arguments are stored in `state.hyperparams` (readable with
    `gradax.tree.get` and writable between steps). Schedules, and
    :class:`StatefulSchedule` objects with their own state, are evaluated at
    every update and their values stored there too. Booleans, the names in
    `static_args` and, for gradax factories, every argument the factory
    declares static (masks, dtypes, flags) are passed through unchanged.

    As in optax, `inner_factory` is called inside `init` and `update`
    with each hyperparameter's current value (an array), so it may compute
    with them (`scale(-learning_rate)`, `learning_rate / peak`). At
    construction it is built once abstractly (under `jax.eval_shape`) so
    bad arguments fail at the user's line.

    Differences from optax: optax treats every callable argument as a schedule
    (so a callable `mask` breaks); gradax only does so for arguments that
    are hyperparameters of the factory. The state of a stateful schedule
    keeps its dtypes, so its integer and lower-precision float leaves start in
    the hyperparameter dtype, at least float32 (optax promotes them at the
    first update that adds a float); :class:`WrappedSchedule` keeps its int32
    count.

    Args:
      inner_factory: a function or class returning a transformation.
      static_args: names of arguments never to treat as hyperparameters.
      hyperparam_dtype: dtype of the stored values (default: the widest real
        float dtype of the params, at least float32; see
        :func:`default_hyperparam_dtype`).

    Returns:
      A function with the signature of `inner_factory`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.inject_hyperparams(gradax.adam)(learning_rate=0.1)
      >>> state = tx.init(jnp.zeros(2))
      >>> float(gradax.tree.get(state, "learning_rate"))
      0.1...
    """
    static = {static_args} if isinstance(static_args, str) else set(static_args)
    signature = inspect.signature(inner_factory)
    unknown = static - set(signature.parameters)
    if unknown:
        raise ValueError(
            f"static_args {sorted(unknown)} are not arguments of the factory; "
            f"its arguments are {list(signature.parameters)}"
        )
    static |= _static_names(inner_factory)

    @functools.wraps(inner_factory)
    def build(*args: Any, **kwargs: Any) -> InjectHyperparams:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as error:
            clearer = unknown_keyword_error(inner_factory, kwargs, error, signature)
            if clearer is not None:
                raise clearer from None
            raise
        bound.apply_defaults()
        numeric, schedules, others = {}, {}, {}
        for name, value in bound.arguments.items():
            if name in static or isinstance(value, bool) or value is None:
                others[name] = value
            elif isinstance(value, (StatefulSchedule, Schedule)) or callable(value):
                schedules[name] = as_hyperparameter(value)
            elif isinstance(value, (int, float, np.number, np.ndarray, jax.Array)):
                numeric[name] = value
            else:
                others[name] = value
        _check_factory(inner_factory, numeric, schedules, others)
        return InjectHyperparams(
            inner_factory, numeric, schedules, others, hyperparam_dtype
        )

    return build


inject_hyperparams = inject_stateful_hyperparams
