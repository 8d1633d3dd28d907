"""Conformance registry entries for gradax/precision (see tests/registry.py).

The suite's parameters are float32 in most checks, where these wrappers pass
the inner transformation through; its control-flow check runs them on
bfloat16 and float16 parameters too. It also asserts that updates have the
gradients' dtype, which ``stochastic_rounding`` and ``master_weights``
deliberately do not give for 16-bit parameters (their float32 updates carry
the step exactly; see their docstrings). The ``stochastic_rounding`` entry
is therefore wrapped in ``cast_updates(to="grads")``, which casts them back:
the suite checks its state (the key in it), not the exactness of its step,
which tests/precision/test_stochastic_rounding.py checks. ``master_weights``
has no entry: it also refuses float16 parameters, which the control-flow
check gives it; tests/precision/test_master_weights.py covers what the suite
would (control flow, sharding, faults) and test_precision_resume.py the
resume.
"""

from __future__ import annotations

from registry_base import Entry

import gradax


def _cast_adamw(to):
    def build(**kwargs):
        return gradax.cast_updates(gradax.adamw(**kwargs), to=to)

    return build


def _rounded_adamw(**kwargs):
    inner = gradax.stochastic_rounding(gradax.adamw(**kwargs), seed=0)
    return gradax.cast_updates(inner, to="grads")


ENTRIES: list[Entry] = [
    Entry(
        "cast_updates",
        dict(learning_rate=0.05, weight_decay=1e-3),
        optimizer=True,
        optax_name="",
        build_fn=_cast_adamw("params"),
        injectable=False,
    ),
    Entry(
        "cast_updates",
        dict(learning_rate=0.05, b1=0.8),
        optax_name="",
        build_fn=_cast_adamw("promote"),
        injectable=False,
    ),
    Entry(
        "stochastic_rounding",
        dict(learning_rate=0.05, weight_decay=1e-3),
        optimizer=True,
        optax_name="",
        build_fn=_rounded_adamw,
        injectable=False,
    ),
]
