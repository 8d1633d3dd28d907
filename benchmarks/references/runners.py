"""gradax's side of a comparison: an optimizer run on a Problem in float64."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import gradax

from ._harness import Problem


def run_gradax(
    tx: Any,
    prob: Problem,
    steps: int,
    *,
    layout: Callable[[np.ndarray], np.ndarray] = lambda x: x,
    back: Callable[[np.ndarray], np.ndarray] | None = None,
    edit_state: Callable[[Any], Any] = lambda s: s,
    key: str = "w",
) -> list[np.ndarray]:
    """The params after each of `steps` updates, in the reference's layout.

    `layout` maps the reference's layout to gradax's and back (an involution,
    e.g. a transpose for torch's (out, in) weights), unless `back` maps
    gradax's layout back (a conv kernel's axes); `edit_state` sets what
    the reference draws itself (Dion's Q0).
    """
    if back is None:
        back = layout
    with jax.enable_x64(True):
        params = {key: jnp.asarray(layout(prob.x0), jnp.float64)}
        state = edit_state(tx.init(params))
        update = jax.jit(tx.update)
        history = []
        for t in range(steps):
            x = back(np.asarray(params[key]))
            grads = {key: jnp.asarray(layout(prob.grad(x, t)), jnp.float64)}
            updates, state = update(grads, state, params)
            params = gradax.apply_updates(params, updates)
            history.append(back(np.asarray(params[key], np.float64)))
    return history
