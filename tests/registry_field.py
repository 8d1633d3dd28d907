"""Conformance registry entries for what the field trains with (see registry.py).

PSGD Kron, Scion, the warmup-stable-decay schedule (through Scion's
learning rate) and skip_loss_spikes. None has an optax twin.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from registry_base import Entry

import gradax

ENTRIES: list[Entry] = []


def _stacked(params):
    """The 3-D leaf of the conformance params is a stack of (3, 2) layers."""
    return jax.tree.map(lambda x: x.ndim == 3, params)


# Kron. The default probability is a schedule; the schedule check needs a
# number, so the entries that schedule another argument give one.
ENTRIES += [
    Entry(
        "kron",
        dict(learning_rate=0.05),
        optimizer=True,
        schedule_arg="learning_rate",
        optax_name="",
    ),
    Entry(
        "kron",
        dict(
            learning_rate=0.05,
            memory_save_mode="one_diag",
            scanned_layers=_stacked,
            preconditioner_update_probability=0.5,
        ),
        optimizer=True,
        schedule_arg="preconditioner_update_probability",
        optax_name="",
    ),
    Entry(
        "scale_by_kron",
        dict(b1=0.8, min_ndim_triangular=1, precond_dtype=jnp.float32),
        schedule_arg="b1",
        optax_name="",
    ),
]


def _sign_on_matrices(params):
    return jax.tree.map(lambda x: "sign" if x.ndim == 2 else "rms", params)


def _column_and_row(params):
    """Column norm on the matrix, row norm on the stacked (2, 3, 2) leaf."""
    names = {2: "column", 3: "row"}
    return jax.tree.map(lambda x: names.get(x.ndim, "rms"), params)


# Scion. Its steps have a fixed size per leaf (an oracle's direction), so it
# converges with a decaying learning rate: here warmup-stable-decay with the
# 1-sqrt decay over the last half. The constrained form converges to a point
# of the ball, not to the parabola's minimum, so it gets no convergence check.
_WSD = gradax.warmup_stable_decay_schedule(
    0.0,
    0.05,
    warmup_steps=10,
    total_steps=500,
    decay_fraction=0.5,
    decay_type="1-sqrt",
)
ENTRIES += [
    Entry(
        "scion",
        dict(learning_rate=0.05, unconstrained=True),
        optimizer=True,
        schedule_arg="learning_rate",
        optax_name="",
        converge_kwargs=dict(learning_rate=_WSD, unconstrained=True),
    ),
    Entry(
        "scion",
        dict(learning_rate=0.05, radius=3.0, lmo=_sign_on_matrices),
        schedule_arg="radius",
        optax_name="",
    ),
    Entry(
        "scale_by_scion",
        dict(beta=0.5, lmo=_column_and_row, weight_dimension_numbers="auto"),
        schedule_arg="beta",
        optax_name="",
    ),
]


class _LossFromGradients(gradax.GradientTransformation):
    """Test helper: passes ``value=`` to ``inner`` when the caller gives none.

    The conformance checks call ``update`` without the loss; this stands in
    ``0.5 * sum(|g|^2)`` (the parabola's loss, up to its minimum) so that
    skip_loss_spikes, which needs ``value=``, runs every check.
    """

    inner: Any

    def init_state(self, params):
        return self.inner.init(params)

    def update_state(self, updates, state, params=None, **extra_args):
        if extra_args.get("value") is None:
            squares = [jnp.sum(jnp.abs(g) ** 2) for g in jax.tree.leaves(updates)]
            extra_args["value"] = 0.5 * sum(squares).astype(jnp.float32)
        return self.inner.update(updates, state, params, **extra_args)


def _skip_spikes(learning_rate, **kwargs):
    inner = gradax.sgd(learning_rate, momentum=0.5)
    return _LossFromGradients(gradax.skip_loss_spikes(inner, **kwargs))


ENTRIES += [
    Entry(
        "skip_loss_spikes",
        dict(learning_rate=0.05, warmup_steps=2, threshold=3.0),
        optimizer=True,
        optax_name="",
        injectable=False,
        build_fn=_skip_spikes,
    ),
]
