"""Shared pieces of the benchmarks: a GPT-like parameter tree and a timer."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp


def gpt_like_params(
    d_model: int = 256, layers: int = 6, vocab: int = 512, seed: int = 0
) -> dict[str, Any]:
    """A transformer-shaped tree: embedding, per-layer qkv/proj/up/down, norms.

    With the defaults it has about 4.9M parameters.
    """
    key = jax.random.key(seed)
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
    keys = jax.random.split(key, len(shapes))
    return {
        name: 0.02 * jax.random.normal(k, shape, jnp.float32)
        for k, (name, shape) in zip(keys, shapes.items(), strict=True)
    }


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
    fns: dict[str, Callable[[], Any]], repeats: int = 30, inner: int = 5
) -> dict[str, float]:
    """Median seconds per call of each function, measured in alternation.

    Alternating the candidates in each round spreads machine noise over all
    of them, so their ratio is meaningful on a shared machine.
    """
    for fn in fns.values():  # compile and warm up
        jax.block_until_ready(fn())
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(inner):
                out = fn()
            jax.block_until_ready(out)
            samples[name].append((time.perf_counter() - start) / inner)
    return {name: statistics.median(s) for name, s in samples.items()}
