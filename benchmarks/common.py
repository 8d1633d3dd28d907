"""Shared pieces of the benchmarks: a GPT-like parameter tree and a timer."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def gpt_like_params(
    d_model: int = 256, layers: int = 6, vocab: int = 512, seed: int = 0
) -> dict[str, Any]:
    """A transformer-shaped tree: embedding, per-layer qkv/proj/up/down, norms.

    With the defaults it has about 4.9M parameters (about 0.9M with
    ``layers=1``). The numbers come from NumPy: drawing them with
    ``jax.random`` compiles one program per distinct shape, seconds of a quick
    run spent on no measurement.
    """
    shapes: dict[str, tuple[int, ...]] = {"embed": (vocab, d_model)}
    for i in range(layers):
        shapes |= {
            f"layer{i}/qkv": (d_model, 3 * d_model),
            f"layer{i}/proj": (d_model, d_model),
            f"layer{i}/up": (d_model, 4 * d_model),
            f"layer{i}/down": (4 * d_model, d_model),
            f"layer{i}/norm1": (d_model,),
            f"layer{i}/norm2": (d_model,),
            f"layer{i}/up_bias": (4 * d_model,),
        }
    shapes["final_norm"] = (d_model,)
    return normal_tree(shapes, seed)


def normal_tree(shapes: dict[str, tuple[int, ...]], seed: int = 0) -> dict[str, Any]:
    """``{name: 0.02 * N(0, 1) of that shape}``, float32, drawn with NumPy."""
    rng = np.random.default_rng(seed)
    return {
        name: jnp.asarray(0.02 * rng.standard_normal(shape, dtype=np.float32))
        for name, shape in shapes.items()
    }


@jax.jit
def fake_grads(params: Any) -> Any:
    """Gradient-like values for timing: ``0.1 * params + 1e-3`` (one program)."""
    return jax.tree.map(lambda p: 0.1 * p + 1e-3, params)


def optional_optax() -> Any:
    """optax if it is installed, else None (benchmarks then leave it out)."""
    try:
        import optax
    except ModuleNotFoundError as error:
        if error.name != "optax":
            raise
        return None
    return optax


def count_params(tree: Any) -> int:
    return sum(x.size for x in jax.tree.leaves(tree))


def time_interleaved(
    fns: dict[str, Callable[[], Any]],
    repeats: int = 30,
    inner: int = 5,
    *,
    warmup: bool = True,
) -> dict[str, float]:
    """Median seconds per call of each function, measured in alternation.

    Alternating the candidates in each round spreads machine noise over all
    of them, so their ratio is meaningful on a shared machine. Every other
    round runs them in reverse order, so that no candidate always follows
    the same neighbour (whose freed buffers and cache contents it inherits).
    Pass ``warmup=False`` when every function has already run once.
    """
    for fn in fns.values() if warmup else ():  # compile and warm up
        jax.block_until_ready(fn())
    names = list(fns)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(repeats):
        for name in names if round_ % 2 == 0 else reversed(names):
            fn = fns[name]
            start = time.perf_counter()
            for _ in range(inner):
                out = fn()
            jax.block_until_ready(out)
            samples[name].append((time.perf_counter() - start) / inner)
            del out  # free the outputs before the next candidate runs
    return {name: statistics.median(s) for name, s in samples.items()}
