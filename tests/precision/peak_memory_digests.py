"""Digests of a few training steps of each memory feature (issue 46).

Not a test: a script that prints, for each configuration, a SHA-256 of
the bytes of the parameters, the state and the updates after each of four
jitted steps (`update` then `apply_updates`, parameters and state donated,
as `benchmarks/bench_peak_memory.py` compiles them). Run it on two versions
of gradax on one machine and compare the lines: equal digests mean equal
numbers, bit for bit. Issue 46's changes (the 8-bit leaves stored from
recomputed passes, the master's halves written by one loop) were checked
this way against the code before them; `test_peak_memory_numbers.py`
checks the same on every run against the one-pass formulation.

Run: python tests/precision/peak_memory_digests.py
"""

from __future__ import annotations

import hashlib

import jax
import jax.numpy as jnp
import numpy as np

import gradax

SHAPES = {"rows": (8, 512), "short_block": (6, 300), "flat": (4, 100), "small": (10,)}


def configurations() -> dict:
    q8 = gradax.int8_blockwise()
    f8 = gradax.int8_blockwise(code="float")
    master, rounding = gradax.master_weights, gradax.stochastic_rounding
    f32, bf16 = jnp.float32, jnp.bfloat16
    dims = {
        k: (gradax.MuonDimensionNumbers() if len(s) == 2 else None)
        for k, s in SHAPES.items()
    }

    def adamw(spec=None):
        kwargs = {} if spec is None else {"mu_dtype": spec, "nu_dtype": spec}
        return gradax.adamw(1e-2, weight_decay=0.1, **kwargs)

    return {
        "adamw int8": (adamw(q8), f32),
        "adamw int8 float code": (adamw(f8), f32),
        "sgd momentum int8": (gradax.sgd(0.1, momentum=0.9, accumulator_dtype=q8), f32),
        "muon int8": (
            gradax.muon(0.02, mu_dtype=q8, muon_weight_dimension_numbers=dims),
            f32,
        ),
        "bf16 adamw int8": (adamw(q8), bf16),
        "bf16 master adamw": (master(adamw()), bf16),
        "bf16 master adamw int8": (master(adamw(q8)), bf16),
        "bf16 master adamw int8 float code": (master(adamw(f8)), bf16),
        "bf16 rounding adamw": (rounding(adamw(), seed=3), bf16),
        "bf16 rounding adamw int8": (rounding(adamw(q8), seed=3), bf16),
    }


def inputs(dtype, steps: int = 4):
    """Parameters and one gradient a step: normal values, scales across leaves."""
    rng = np.random.default_rng(0)
    params = {
        k: jnp.asarray(rng.standard_normal(s, dtype=np.float32), dtype)
        for k, s in SHAPES.items()
    }
    grads = [
        {
            k: jnp.asarray(
                rng.standard_normal(s, dtype=np.float32) * 10.0 ** -(i % 3), dtype
            )
            for k, s in SHAPES.items()
        }
        for i in range(steps)
    ]
    return params, grads


def run(tx, dtype, compiler_options: dict | None = None) -> list:
    """The leaves of (params, state, updates) after each step, as NumPy arrays.

    `compiler_options` are XLA options for this step's compilation, over
    those of the process (`XLA_FLAGS`)."""
    params, grads = inputs(dtype)
    state = tx.init(params)

    def step(params, state, grads):
        updates, state = tx.update(grads, state, params)
        return gradax.apply_updates(params, updates), state, updates

    compiled = jax.jit(step, donate_argnums=(0, 1), compiler_options=compiler_options)
    out = []
    for g in grads:
        params, state, updates = compiled(params, state, g)
        leaves = jax.tree.leaves((params, state, updates))
        out.append([_raw(x) for x in leaves])
    return out


def _raw(x) -> np.ndarray:
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    return np.asarray(x)


def digest(steps: list) -> str:
    h = hashlib.sha256()
    for leaves in steps:
        for x in leaves:
            h.update(str((x.shape, x.dtype)).encode())
            h.update(np.ascontiguousarray(x).view(np.uint8).tobytes())
    return h.hexdigest()[:16]


def main() -> None:
    # Every leaf from recomputed passes (these are smaller than the default
    # threshold); before issue 46 the setting did not exist.
    if hasattr(gradax.int8_blockwise, "recompute_min_size"):
        gradax.int8_blockwise.recompute_min_size = 0
    for name, (tx, dtype) in configurations().items():
        print(f"{name:36s} {digest(run(tx, dtype))}")


if __name__ == "__main__":
    main()
