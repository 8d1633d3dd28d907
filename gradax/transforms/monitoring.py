"""Recording measurements of the updates in the state: snapshot and monitor.

A measurement is any function of the updates (their norm, a flag); placed in
a chain it sees the updates as transformed so far, and passes them on
unchanged. `gradax.tree.get(state, name)` reads a measurement back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._core.declarations import UNIT, hyper
from .._core.protocol import Alias, GradientTransformation, as_transformation
from .._core.pytree import field, static_field
from ..combinators.chain import chain
from .momentum import ema


class SnapshotState(NamedTuple):
    """State of :class:`snapshot`."""

    measurement: dict[str, Any]  # {measure_name: the last measurement}


class snapshot(GradientTransformation):
    """Stores `measure(updates)` in the state under `measure_name`.

    The updates pass through unchanged. `init` stores `measure(params)`.

    Args:
      measure_name: the key of the measurement (`gradax.tree.get(state,
        measure_name)` returns it).
      measure: a function of the updates returning an array or a tree.

    Returns:
      A transformation whose state is a :class:`SnapshotState`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.chain(
      ...     gradax.snapshot("norm", gradax.tree.norm), gradax.clip_by_global_norm(1.0)
      ... )
      >>> state = tx.init(jnp.zeros(2))
      >>> _, state = tx.update(jnp.array([3.0, 4.0]), state)
      >>> gradax.tree.get(state, "norm")
      Array(5., dtype=float32)
    """

    measure_name: str = static_field()
    measure: Callable[[Any], Any] = static_field()

    def init_state(self, params):
        return SnapshotState({self.measure_name: self.measure(params)})

    def update_state(self, updates, state, params=None, **extra_args):
        del state, params
        return updates, SnapshotState({self.measure_name: self.measure(updates)})


class _measure(GradientTransformation):
    """A stateless transformation whose output is `fn(updates)`."""

    fn: Callable[[Any], Any] = static_field()
    floating: bool = static_field(default=False)

    def update_state(self, updates, state, params=None, **extra_args):
        value = self.fn(updates)
        if self.floating:
            value = jax.tree.map(_as_floating, value)
        return value, state


def _floating_dtype(dtype: Any) -> Any:
    """`dtype` if inexact, else JAX's default float (a flag's average is one)."""
    if jnp.issubdtype(dtype, jnp.inexact):
        return dtype
    return jnp.result_type(float)


def _as_floating(x: Any) -> jax.Array:
    x = jnp.asarray(x)
    return x.astype(_floating_dtype(x.dtype))


class MonitorState(NamedTuple):
    """State of :class:`monitor`."""

    measurements: dict[str, Any]  # {name: the last measurement}
    measure_states: tuple[Any, ...]  # the measures' own states, in given order


def _as_measures(value: Any, name: str) -> dict[str, GradientTransformation]:
    """Converter of `measures`: name -> transformation that measures."""
    if not isinstance(value, dict):
        raise TypeError(
            f"{name} must be a dict of name to measure, got {type(value).__name__}"
        )
    return {k: _as_measure(k, m) for k, m in value.items()}


def _as_measure(name: str, measure: Any) -> GradientTransformation:
    if isinstance(measure, GradientTransformation):
        return measure
    if callable(getattr(measure, "init", None)):
        return as_transformation(measure, f"measures[{name!r}]")
    if callable(measure):
        return _measure(measure)
    raise TypeError(
        f"measures[{name!r}] must be a function of the updates or a "
        f"transformation, got {type(measure).__name__}"
    )


class monitor(GradientTransformation):
    """Records several measurements of the updates, some with state.

    Each measure is either a function of the updates (recorded as it is, like
    :class:`snapshot`) or a transformation, whose output updates are the
    measurement and whose state is kept (e.g. :class:`measure_with_ema`).
    Extra keyword arguments of `update` are passed on to the measures.

    Differences from optax: after `init` the measurements hold zeros of
    their final shapes and dtypes (optax: an empty dict), so the state has
    the same structure before and after an update, as `lax.cond` and
    `scan` need.

    Args:
      measures: a dict from measurement name to a function of the updates or
        a transformation (gradax or optax).

    Returns:
      A transformation whose state is a :class:`MonitorState`; the updates
      pass through unchanged.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.monitor({
      ...     "norm": gradax.tree.norm,
      ...     "norm_ema": gradax.measure_with_ema(gradax.tree.norm, decay=0.9),
      ... })
      >>> state = tx.init(jnp.zeros(2))
      >>> _, state = tx.update(jnp.array([3.0, 4.0]), state)
      >>> gradax.tree.get(state, "norm_ema")
      Array(5., dtype=float32)
    """

    measures: dict[str, Any] = field(converter=_as_measures)
    # The user's order of the measures (a dict's leaves come back sorted
    # from JAX's unflatten); set from ``measures`` in ``__init__``.
    names: tuple[str, ...] = static_field(init=False, repr=False)

    def __init__(self, measures: dict[str, Any]):
        object.__setattr__(self, "measures", measures)
        object.__setattr__(self, "names", tuple(measures))

    def replace(self, **changes: Any) -> monitor:
        """A copy with new `measures` (their order is the new dict's)."""
        if "names" in changes:
            raise TypeError("monitor.replace: names follow measures; give measures")
        return monitor(changes.pop("measures", self.measures), **changes)

    def init_state(self, params):
        states = tuple(self.measures[name].init(params) for name in self.names)
        measurements = {}
        for name, inner in zip(self.names, states, strict=True):
            tx = self.measures[name]
            shapes = jax.eval_shape(
                lambda p, s, tx=tx: tx.update(p, s, p)[0], params, inner
            )
            measurements[name] = jax.tree.map(
                lambda a: jnp.zeros(a.shape, a.dtype), shapes
            )
        return MonitorState(measurements, states)

    def update_state(self, updates, state, params=None, **extra_args):
        measurements, states = {}, []
        for name, inner in zip(self.names, state.measure_states, strict=True):
            value, inner = self.measures[name].update(
                updates, inner, params, **extra_args
            )
            measurements[name] = value
            states.append(inner)
        return updates, MonitorState(measurements, tuple(states))


class _measured_ema(GradientTransformation):
    """An :class:`ema` whose state is shaped like a measurement of the params."""

    inner: Any  # the ema
    measure: Callable[[Any], Any] = static_field(kw_only=True)

    def init_state(self, params):
        return self.inner.init(jax.tree.map(_as_floating, self.measure(params)))

    def update_state(self, updates, state, params=None, **extra_args):
        return self.inner.update(updates, state, None, **extra_args)


class measure_with_ema(Alias):
    r"""Records an exponential moving average of `measure(updates)`.

    With measurement :math:`x_t = \text{measure}(u_t)`, its average is
    :math:`m_t = \beta m_{t-1} + (1 - \beta) x_t`, divided by
    :math:`1 - \beta^t` when `debias`. The output "updates" are
    :math:`m_t`: use it as a measure of :class:`monitor`, which keeps the
    real updates. Integer and boolean measurements are averaged as floats.

    Args:
      measure: a function of the updates returning an array or a tree.
      decay: :math:`\beta`, in [0, 1]; a number, an array or a schedule.
      debias: divide by :math:`1 - \beta^t`.
      accumulator_dtype: dtype of the stored average (default: the
        measurement's, or the default float for integers and booleans).

    Returns:
      A transformation, `chain(measure, ema)`; its state is
      `(EmptyState(), EmaState)`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.monitor({
      ...     "clipped": gradax.measure_with_ema(
      ...         lambda u: gradax.tree.norm(u) > 1.0, decay=0.5, debias=False
      ...     )
      ... })
      >>> state = tx.init(jnp.zeros(2))
      >>> _, state = tx.update(jnp.array([3.0, 4.0]), state)
      >>> gradax.tree.get(state, "clipped")
      Array(0.5, dtype=float32)
    """

    measure: Callable[[Any], Any] = static_field()
    decay: Any = hyper(valid=UNIT)
    debias: bool = static_field(default=True)
    accumulator_dtype: Any = static_field(default=None)

    def build(self):
        return chain(
            _measure(self.measure, floating=True),
            _measured_ema(
                ema(self.decay, self.debias, self.accumulator_dtype),
                measure=self.measure,
            ),
        )

    def update_state(self, updates, state, params=None, **extra_args):
        # The ema stage sees measurements, not updates shaped like params.
        del params
        return self.parts().update(updates, state, None, **extra_args)
