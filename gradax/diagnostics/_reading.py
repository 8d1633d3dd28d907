"""The state :func:`gradax.with_metrics` keeps, and reading it: `metrics`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import jax
import numpy as np

from .._core.protocol import read_through_to_inner


class MetricsState(NamedTuple):
    """State of :class:`gradax.with_metrics`: the inner state, and the metrics.

    `inner_state` is exactly what the wrapped transformation keeps (its
    tree, leaves and numbers), so `state.inner_state` restores into the
    unwrapped optimizer; `metrics` maps each metric's name to its value
    at the last step (float32; zeros after `init`). Read them with
    :func:`gradax.metrics`. Reading an attribute it lacks reads the inner
    state's (`state.mu`).
    """

    inner_state: Any
    metrics: dict[str, Any]

    # The inner transformation loads its own (8-bit) state.
    _loads_itself = True

    __getattr__ = read_through_to_inner


def _is_metrics_node(node: Any) -> bool:
    """A :class:`MetricsState`, or one that orbax restored as a dict."""
    if isinstance(node, MetricsState):
        return True
    return isinstance(node, Mapping) and set(node) == {"inner_state", "metrics"}


def _field(node: Any, name: str) -> Any:
    return node[name] if isinstance(node, Mapping) else getattr(node, name)


def _found(state: Any) -> list[Mapping[str, Any]]:
    """The metrics of every :class:`MetricsState` in `state`, outermost first."""
    out: list[Mapping[str, Any]] = []
    nodes = jax.tree_util.tree_leaves(state, is_leaf=_is_metrics_node)
    for node in nodes:
        if _is_metrics_node(node):
            out.append(_field(node, "metrics"))
            out.extend(_found(_field(node, "inner_state")))
    return out


def _expand(name: str, value: Any, out: dict[str, Any]) -> None:
    """A scalar as it is; an array as one scalar per entry, `name/i/j`."""
    shape = np.shape(value)
    if shape == ():
        out[name] = value
        return
    for index in np.ndindex(*shape):
        out[name + "".join(f"/{i}" for i in index)] = value[index]


def metrics(state: Any) -> dict[str, Any]:
    """The metrics :class:`gradax.with_metrics` recorded, as a flat dict.

    Finds every :class:`MetricsState` in `state` (the optimizer's state,
    or any tree holding it: a train state, a `MultiSteps` or another
    wrapper's state, a state restored by orbax without a target, or one
    taken off the device with `jax.device_get`) and returns its metrics
    by name. Works inside `jit` (the values are then traced scalars) and
    on a sharded state (the metrics are replicated scalars). A metric
    stored as an array (the per-head attention logits) becomes one entry
    per element, named `name/i`. The names are documented in
    docs/metrics.md.

    Args:
      state: a tree holding one or more `MetricsState`.

    Returns:
      `{name: scalar}`, in sorted order of the names: 0-d arrays (jax
      arrays, tracers, or NumPy values after `device_get`) that
      `float(...)` turns into numbers for a logger.

    Raises:
      ValueError: no `MetricsState` in `state`, or two of them record the
        same name (give them different `prefix=`).

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.with_metrics(gradax.sgd(0.1))
      >>> params = {"w": jnp.array([3.0, 4.0])}
      >>> state = tx.init(params)
      >>> _, state = tx.update(params, state, params)
      >>> m = gradax.metrics(state)
      >>> float(m["grad_norm"]), float(m["update_norm"]), float(m["lr"])
      (5.0, 0.5, 0.10000000149011612)
    """
    found = _found(state)
    if not found:
        raise ValueError(
            "gradax.metrics: the state holds no MetricsState; wrap the "
            "optimizer in gradax.with_metrics(tx) and pass its state"
        )
    out: dict[str, Any] = {}
    for recorded in found:
        for name in sorted(recorded):
            expanded: dict[str, Any] = {}
            _expand(name, recorded[name], expanded)
            for key, value in expanded.items():
                if key in out:
                    raise ValueError(
                        f"gradax.metrics: two with_metrics wrappers record {key!r}; "
                        "give them different prefix= to tell them apart"
                    )
                out[key] = value
    return dict(sorted(out.items()))
