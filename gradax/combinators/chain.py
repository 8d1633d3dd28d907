"""Composition: chain and named_chain."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from .._core.protocol import (
    GradientTransformation,
    TransformationLike,
    as_transformation,
)
from .._core.pytree import field, static_field


def _transformations(value: Any, name: str) -> tuple:
    """Converter of a sequence of transformations: optax ones are wrapped."""
    return tuple(as_transformation(tx, f"{name}[{i}]") for i, tx in enumerate(value))


class chain(GradientTransformation):
    """Applies transformations one after the other.

    Args:
      *transforms: gradax or optax transformations, applied in order.

    Returns:
      A transformation whose state is the tuple of the inner states.

    Example:
      >>> import gradax
      >>> tx = gradax.chain(gradax.clip_by_global_norm(1.0), gradax.adam(1e-3))
    """

    transforms: tuple[TransformationLike, ...] = field(converter=_transformations)
    _checks_update_shapes = False  # each part checks what it receives
    _state_is_parts = True  # a tuple of the parts' states, each kept stable

    def __init__(self, *transforms: TransformationLike):
        # The field's converter wraps optax transformations (here and in replace).
        object.__setattr__(self, "transforms", transforms)

    def __repr__(self) -> str:
        return f"chain({', '.join(repr(tx) for tx in self.transforms)})"

    def init_state(self, params):
        return tuple(tx.init(params) for tx in self.transforms)

    def update_state(self, updates, state, params=None, **extra_args):
        new_state = []
        for tx, inner in zip(self.transforms, state, strict=True):
            updates, inner = tx.update(updates, inner, params, **extra_args)
            new_state.append(inner)
        return updates, tuple(new_state)


class named_chain(GradientTransformation):
    """Like :func:`chain`, but each transformation has a name.

    The state is an `OrderedDict` from name to inner state, in the order
    of the pairs (optax's container, so checkpoints match), and
    `gradax.tree.get(state, name)` finds a part.

    Args:
      *transforms: `(name, transformation)` pairs (tuples or lists),
        applied in order.
    """

    names: tuple[str, ...] = static_field(converter=lambda v, name: tuple(v))
    transforms: tuple[TransformationLike, ...] = field(
        default=(), converter=_transformations
    )
    _checks_update_shapes = False  # each part checks what it receives

    def __init__(self, *transforms: tuple[str, TransformationLike]):
        for i, pair in enumerate(transforms):
            if not (
                isinstance(pair, Sequence)
                and not isinstance(pair, str)
                and len(pair) == 2
            ):
                raise TypeError(
                    f"named_chain argument {i} must be a (name, transformation) "
                    f"pair, got {pair!r}"
                )
        object.__setattr__(self, "names", tuple(name for name, _ in transforms))
        object.__setattr__(self, "transforms", tuple(tx for _, tx in transforms))

    def __check_init__(self) -> None:
        if len(self.names) != len(self.transforms):
            raise ValueError(
                f"named_chain: {len(self.names)} names for "
                f"{len(self.transforms)} transformations"
            )
        for i, name in enumerate(self.names):
            if name in self.names[:i]:
                raise ValueError(f"named_chain: the name {name!r} is used twice")

    def __repr__(self) -> str:
        parts = (
            f"({n!r}, {tx!r})"
            for n, tx in zip(self.names, self.transforms, strict=True)
        )
        return f"named_chain({', '.join(parts)})"

    def init_state(self, params):
        return OrderedDict(
            (n, tx.init(params))
            for n, tx in zip(self.names, self.transforms, strict=True)
        )

    def update_state(self, updates, state, params=None, **extra_args):
        new_state = OrderedDict()
        for name, tx in zip(self.names, self.transforms, strict=True):
            updates, new_state[name] = tx.update(
                updates, state[name], params, **extra_args
            )
        return updates, new_state
