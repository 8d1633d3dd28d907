"""Registry entries for gradax/transforms (see tests/registry.py).

The monitoring transformations pass the updates through. optax's monitor
cannot run in lax.scan (its state starts as an empty dict and gains
entries), so tests/conformance/test_dropin.py compares the measurements with
optax's in a Python loop.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from registry_base import LR, Entry

import gradax


def _descending(name, module):
    """``name`` followed by a small negative step, in gradax or optax.

    Alone, a parameter-scaled transformation ascends the suite's quadratic
    and its parameters overflow within 5 of its 20 steps; the comparisons
    then compared inf with inf and checked nothing.
    """

    def build(min_scale=0.01):
        return module.chain(
            getattr(module, name)(min_scale=min_scale), module.scale(-0.02)
        )

    build.__name__ = f"descending_{name}"
    return build


def _norm(updates):
    return jnp.sqrt(sum(jnp.sum(jnp.abs(u) ** 2) for u in jax.tree.leaves(updates)))


ENTRIES: list[Entry] = [
    Entry("trace", dict(decay=0.9), schedule_arg="decay"),
    Entry("ema", dict(decay=0.9), schedule_arg="decay"),
    Entry("ema", dict(decay=0.8, debias=False)),
    Entry(
        "add_noise",
        dict(eta=0.01, gamma=0.55, seed=0),
        schedule_arg="eta",
        complex_ok=False,
    ),
    Entry("centralize"),
    Entry("zero_nans"),
    Entry("keep_params_nonnegative", complex_ok=False),
    Entry("clip", dict(max_delta=0.5), schedule_arg="max_delta", complex_ok=False),
    Entry("clip_by_global_norm", dict(max_norm=1.0), schedule_arg="max_norm"),
    Entry("clip_by_block_rms", dict(threshold=0.5), schedule_arg="threshold"),
    Entry(
        "adaptive_grad_clip",
        dict(clipping=0.1),
        schedule_arg="clipping",
        complex_ok=False,
    ),
    Entry("scale", dict(step_size=-0.1), schedule_arg="step_size"),
    Entry("scale_by_learning_rate", LR, schedule_arg="learning_rate"),
    Entry(
        "scale_by_schedule",
        dict(step_size_fn=lambda c: 0.1 / (1 + c)),
        injectable=False,
    ),
    Entry("add_decayed_weights", dict(weight_decay=0.1), schedule_arg="weight_decay"),
    Entry(
        "add_cautious_decayed_weights",
        dict(weight_decay=0.1),
        schedule_arg="weight_decay",
        optax_name="",
    ),
    Entry("scale_by_rms", dict(decay=0.8), schedule_arg="decay"),
    Entry(
        "scale_by_rms",
        dict(decay=0.8, eps_in_sqrt=False, bias_correction=True, initial_scale=0.1),
        schedule_arg="eps",
    ),
    Entry("scale_by_rss", dict(initial_accumulator_value=0.2), schedule_arg="eps"),
    Entry("scale_by_stddev", dict(decay=0.8), schedule_arg="decay"),
    Entry(
        "scale_by_stddev",
        # Without initial_scale the first bias-corrected variance is
        # g**2 - g**2: 0 or a rounding error, so 1/eps or NaN.
        dict(decay=0.8, eps_in_sqrt=False, bias_correction=True, initial_scale=0.1),
        schedule_arg="eps",
    ),
    Entry(
        "scale_by_trust_ratio",
        dict(min_norm=0.1, trust_coefficient=0.5, eps=1e-3),
        schedule_arg="trust_coefficient",
    ),
    Entry(
        "scale_by_param_block_norm",
        dict(min_scale=0.01),
        schedule_arg="min_scale",
        build_fn=_descending("scale_by_param_block_norm", gradax),
        optax_build_fn=_descending("scale_by_param_block_norm", optax),
    ),
    Entry(
        "scale_by_param_block_rms",
        dict(min_scale=0.01),
        schedule_arg="min_scale",
        build_fn=_descending("scale_by_param_block_rms", gradax),
        optax_build_fn=_descending("scale_by_param_block_rms", optax),
    ),
    Entry("scale_by_sign"),
    Entry(
        "normalize_by_update_norm",
        dict(scale_factor=0.5),
        schedule_arg="scale_factor",
    ),
    # Monitoring: these pass the updates through.
    Entry("snapshot", dict(measure_name="norm", measure=_norm)),
    Entry(
        "monitor",
        build_fn=lambda: gradax.monitor(
            {"norm": _norm, "ema": gradax.measure_with_ema(_norm, 0.9)}
        ),
        optax_name="",
        injectable=False,
    ),
    Entry(
        "measure_with_ema",
        dict(decay=0.8),
        schedule_arg="decay",
        injectable=False,
        build_fn=lambda **kw: gradax.monitor(
            {"ema": gradax.measure_with_ema(_norm, debias=False, **kw)}
        ),
        optax_name="",
    ),
]
