"""Small helpers shared by the contrib optimizers."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .. import tree as gtree
from .._core.declarations import DECAY, OneOf
from .._core.optax_wrapper import dropped_by_optax


def _is_decay(value: Any) -> bool:
    """A real number in [0, 1), or a tracer (whose value is not known yet)."""
    if isinstance(value, jax.core.Tracer):
        return True
    if isinstance(value, (bool, np.bool_)) or not isinstance(
        value, (int, float, np.number, np.ndarray, jax.Array)
    ):
        return False
    numbers = np.asarray(value)
    return numbers.dtype.kind in "iuf" and DECAY.contains(numbers.astype(float))


def _is_decay_pair(value: Any) -> bool:
    return (
        isinstance(value, (tuple, list))
        and len(value) == 2
        and all(_is_decay(b) for b in value)
    )


# Adam's (beta1, beta2) as one argument, as torch and optax's contrib take it.
DECAY_PAIR = OneOf(
    (), also=_is_decay_pair, also_text="a pair (beta1, beta2), each in [0, 1)"
)


def require_value(value: Any, name: str) -> None:
    """Raise a ValueError saying that `name` needs `value=` in update."""
    if value is None:
        raise ValueError(
            f"{name}.update needs the objective's value: pass value=loss "
            "(a scalar) as a keyword argument." + dropped_by_optax()
        )


def moments_at_a_positive_rate(
    learning_rate: Any, new: tuple[Any, ...], old: tuple[Any, ...]
) -> tuple[tuple[Any, ...], jax.Array]:
    """The D-Adaptation family's moments, as their authors' code keeps them:
    updated only at a positive learning rate ("if group_lr > 0.0" in
    konstmish/prodigy and facebookresearch/dadaptation), so that a warmup
    from 0 leaves them alone. Returns them and whether the rate is positive.

    With no progress yet (the weighted gradient sum is 0) those codes also
    return before the estimate and the step ("if d_denom == 0" / "if sk_l1
    == 0: return loss"); the callers gate the step on that. Dividing instead
    made the estimate 0/0 = NaN for good, as optax's does.
    """
    active = jnp.asarray(learning_rate) > 0
    kept = tuple(gtree.where(active, n, o) for n, o in zip(new, old, strict=True))
    return kept, active
