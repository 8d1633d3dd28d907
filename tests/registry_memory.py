"""Conformance registry entries for memory-lean state (see registry.py).

8-bit blockwise moments use blocks of 4 elements here, so that the suite's
small parameters (up to 2x6x8) are really quantized; leaves with fewer than
4 elements stay float32, which the suite's scalar leaf covers.
"""

from __future__ import annotations

from registry_base import Entry

import gradax

Q = gradax.int8_blockwise(block_size=4)
LR = dict(learning_rate=0.05)


def _offloaded_8bit_adamw(**kwargs):
    return gradax.offload_state(gradax.adamw(mu_dtype=Q, nu_dtype=Q, **kwargs))


ENTRIES: list[Entry] = [
    # 8-bit moments through the dtype arguments.
    Entry(
        "adam",
        dict(learning_rate=0.05, mu_dtype=Q, nu_dtype=Q),
        optimizer=True,
        schedule_arg="learning_rate",
        optax_name="",
    ),
    Entry(
        "adamw",
        dict(learning_rate=0.05, weight_decay=1e-3, nu_dtype=Q),
        optimizer=True,
        schedule_arg="weight_decay",
        optax_name="",
    ),
    Entry("lion", dict(learning_rate=0.01, mu_dtype=Q), optax_name=""),
    Entry(
        "sgd",
        dict(learning_rate=0.05, momentum=0.9, accumulator_dtype=Q),
        optimizer=True,
        schedule_arg="momentum",
        optax_name="",
        converge_kwargs=dict(learning_rate=1e-3, momentum=0.9, accumulator_dtype=Q),
    ),
    Entry(
        "muon",
        dict(learning_rate=0.02, mu_dtype=Q),
        schedule_arg="learning_rate",
        optax_name="",
    ),
    # Adam-mini: the default partition, and heads / full blocks with 8-bit mu.
    Entry(
        "adam_mini",
        LR,
        optimizer=True,
        schedule_arg="learning_rate",
        optax_name="",
        rosenbrock_steps=3000,
    ),
    Entry(
        "adam_mini",
        dict(
            learning_rate=0.05,
            weight_decay=1e-3,
            mu_dtype=Q,
            partition={"s": "full", "v": "full", "m": 3, "t": "tensor"},
        ),
        optimizer=True,
        schedule_arg="weight_decay",
        optax_name="",
    ),
    # b2 = 0.99: with 0.999 a Python float's 1 - b2 is folded in float64 and
    # a schedule's or an injected one's in float32, 4.7e-5 apart relatively,
    # which the first step's bias correction shows in full on this direction
    # of size ~1 (no learning rate); the checks compare at 1e-6 and 2e-5.
    # For 0.99 the two differ by 9.5e-7.
    Entry(
        "scale_by_adam_mini", dict(b1=0.8, b2=0.99), schedule_arg="b2", optax_name=""
    ),
    # State in host memory. (With float32 state the sharded check fails only
    # because it compares memory kinds too: pinned_host is not device. That
    # case is checked in tests/combinators/test_host_offload.py.)
    Entry(
        "offload_state",
        dict(learning_rate=0.05, weight_decay=1e-3),
        optimizer=True,
        optax_name="",
        build_fn=_offloaded_8bit_adamw,
        injectable=False,
    ),
]
