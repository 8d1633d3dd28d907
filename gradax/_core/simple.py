"""Small transformations: identity, set_to_zero, stateless."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from .declarations import static_field
from .protocol import GradientTransformation, Params, Updates


class identity(GradientTransformation):
    """Leaves updates unchanged."""

    def update_state(self, updates, state, params=None, **extra_args):
        return updates, state


class set_to_zero(GradientTransformation):
    """Replaces every update with zeros (used to freeze parameters)."""

    def update_state(self, updates, state, params=None, **extra_args):
        return jax.tree.map(jnp.zeros_like, updates), state


class stateless(GradientTransformation):
    """A transformation from a function `f(updates, params) -> updates`.

    Args:
      f: called with the whole updates tree and the params (or None).
    """

    f: Callable[[Updates, Params | None], Updates] = static_field()

    def update_state(self, updates, state, params=None, **extra_args):
        return self.f(updates, params), state


class stateless_with_tree_map(GradientTransformation):
    """A transformation applying `f(g, p) -> u` to each leaf.

    Args:
      f: called per leaf with the gradient and the parameter (or None).
    """

    f: Callable[[jax.Array, jax.Array | None], jax.Array] = static_field()

    def update_state(self, updates, state, params=None, **extra_args):
        if params is None:
            return jax.tree.map(lambda g: self.f(g, None), updates), state
        return jax.tree.map(self.f, updates, params), state
