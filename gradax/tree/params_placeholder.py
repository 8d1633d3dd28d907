"""The stand-in for the parameters that `gradax.tree.map_params` gives `init`.

Shared by `gradax.tree` (which makes it) and the combinators that must let
it through unchanged (`masked`), so it lives with the package's internals.
"""

from __future__ import annotations

from typing import Any

import jax


class ParamsPlaceholder:
    """Marks where the parameters go in a state built by `init`."""


jax.tree_util.register_pytree_node(
    ParamsPlaceholder, lambda _: ((), None), lambda _, __: ParamsPlaceholder()
)


def is_params_placeholder(params: Any) -> bool:
    """Whether `params` is the stand-in `map_params` gives to `init`.

    A transformation whose `init` reshapes the parameters to fit an argument
    of its own (`masked`'s mask) passes the stand-in through unchanged, so
    `map_params` still finds where the parameters go.
    """
    return isinstance(params, ParamsPlaceholder)
