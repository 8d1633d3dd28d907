"""Registry entries for gradax/combinators (see tests/registry.py)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax
from registry_base import LABELS, MASK, Q8, Entry

import gradax


def _EVEN(count):  # noqa: N802 - a constant-like predicate
    return count % 2 == 0


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
            # Starting from an array: a tree with no leaves has the loss 0.
            total = sum(squares, jnp.zeros((), jnp.float32))
            extra_args["value"] = 0.5 * total.astype(jnp.float32)
        return self.inner.update(updates, state, params, **extra_args)


def _skip_spikes(learning_rate, **kwargs):
    inner = gradax.sgd(learning_rate, momentum=0.5)
    return _LossFromGradients(gradax.skip_loss_spikes(inner, **kwargs))


def _offloaded_8bit_adamw(**kwargs):
    return gradax.offload_state(gradax.adamw(mu_dtype=Q8, nu_dtype=Q8, **kwargs))


ENTRIES: list[Entry] = [
    Entry(
        "chain",
        injectable=False,
        build_fn=lambda: gradax.chain(gradax.scale(0.5), gradax.adam(0.05)),
        optax_build_fn=lambda: optax.chain(optax.scale(0.5), optax.adam(0.05)),
        optimizer=True,
    ),
    Entry(
        "named_chain",
        injectable=False,
        build_fn=lambda: gradax.named_chain(("a", gradax.adam(0.05))),
        optax_build_fn=lambda: optax.named_chain(("a", optax.adam(0.05))),
        optimizer=True,
    ),
    Entry(
        "masked",
        injectable=False,
        build_fn=lambda: gradax.masked(gradax.adam(0.05), MASK),
        optax_build_fn=lambda: optax.masked(optax.adam(0.05), MASK),
    ),
    Entry(
        "partition",
        injectable=False,
        optimizer=True,
        build_fn=lambda: gradax.partition(
            {"a": gradax.adam(0.05), "b": gradax.adamw(0.02)}, LABELS
        ),
        optax_build_fn=lambda: optax.partition(
            {"a": optax.adam(0.05), "b": optax.adamw(0.02)}, LABELS
        ),
    ),
    Entry(
        "multi_transform",
        injectable=False,
        optimizer=True,
        build_fn=lambda: gradax.multi_transform(
            {"a": gradax.adam(0.05), "b": gradax.sgd(0.02)}, LABELS
        ),
        optax_build_fn=lambda: optax.multi_transform(
            {"a": optax.adam(0.05), "b": optax.sgd(0.02)}, LABELS
        ),
    ),
    Entry(
        "MultiSteps",
        injectable=False,
        build_fn=lambda: gradax.MultiSteps(gradax.adam(0.05), 2),
        optax_build_fn=lambda: optax.MultiSteps(optax.adam(0.05), 2),
    ),
    Entry(
        "apply_if_finite",
        injectable=False,
        build_fn=lambda: gradax.apply_if_finite(gradax.adam(0.05), 2),
        optax_build_fn=lambda: optax.apply_if_finite(optax.adam(0.05), 2),
    ),
    Entry(
        "conditionally_mask",
        injectable=False,
        build_fn=lambda: gradax.conditionally_mask(gradax.adam(0.05), _EVEN),
        optax_build_fn=lambda: optax.conditionally_mask(optax.adam(0.05), _EVEN),
    ),
    Entry(
        "conditionally_transform",
        injectable=False,
        build_fn=lambda: gradax.conditionally_transform(gradax.adam(0.05), _EVEN),
        optax_build_fn=lambda: optax.conditionally_transform(optax.adam(0.05), _EVEN),
    ),
    Entry(
        "flatten",
        injectable=False,
        build_fn=lambda: gradax.flatten(gradax.adam(0.05)),
        optax_build_fn=lambda: optax.flatten(optax.adam(0.05)),
    ),
    Entry(
        "freeze",
        injectable=False,
        build_fn=lambda: gradax.freeze(MASK),
        optax_build_fn=lambda: optax.freeze(MASK),
    ),
    Entry(
        "selective_transform",
        injectable=False,
        build_fn=lambda: gradax.selective_transform(
            gradax.adam(0.05), freeze_mask=MASK
        ),
        optax_build_fn=lambda: optax.selective_transform(
            optax.adam(0.05), freeze_mask=MASK
        ),
    ),
    Entry("apply_every", dict(k=2)),
    Entry(
        "skip_loss_spikes",
        dict(learning_rate=0.05, warmup_steps=2, threshold=3.0),
        optimizer=True,
        optax_name="",
        injectable=False,
        build_fn=_skip_spikes,
    ),
    # 8-bit AdamW state in host memory. (With float32 state the sharded check fails only
    # because it compares memory kinds too: pinned_host is not device. That
    # case is checked in tests/combinators/test_host_offload.py.)
    Entry(
        "offload_state",
        dict(learning_rate=0.05, weight_decay=1e-3),
        optimizer=True,
        optax_name="",
        build_fn=_offloaded_8bit_adamw,
        injectable=False,
        requires=((0, 10, 2), "gradax.offload_state on the CPU backend"),
    ),
]
