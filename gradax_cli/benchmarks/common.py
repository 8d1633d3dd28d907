"""Shared pieces of the benchmarks: trees, a timer, optional references, rows.

Reference libraries (optax, torch, scipy) are imported only inside the
functions that use them, so the benchmarks import with JAX and NumPy alone
and leave out what is not installed.
"""

from __future__ import annotations

import os
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
    return normal_tree(gpt_like_shapes(d_model, layers, vocab), seed)


def gpt_like_shapes(
    d_model: int, layers: int, vocab: int
) -> dict[str, tuple[int, ...]]:
    """The shapes of :func:`gpt_like_params`' tree, by leaf name."""
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
    return shapes


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


def _optional(name: str) -> Any:
    try:
        return __import__(name)
    except ModuleNotFoundError as error:
        if error.name != name:
            raise
        return None


def optional_optax() -> Any:
    """optax if it is installed, else None (benchmarks then leave it out)."""
    return _optional("optax")


def optional_torch() -> Any:
    """torch if it is installed, else None; its threads set to JAX's.

    XLA's CPU client runs on one thread per core this process may use; torch
    defaults to the physical cores. Both get the same count here, so their
    times compare like with like.
    """
    torch = _optional("torch")
    if torch is not None:
        torch.set_num_threads(cpu_threads())
    return torch


def cpu_threads() -> int:
    """The cores this process may run on (what XLA's CPU thread pool uses)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def to_torch(torch: Any, tree: dict[str, Any]) -> dict[str, Any]:
    """float32 torch tensors with the values of a dict of JAX arrays."""
    return {name: torch.from_numpy(np.array(x, copy=True)) for name, x in tree.items()}


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
    Pass ``warmup=False`` when every function has already run once. A
    function may return JAX arrays (waited for) or anything else (torch
    runs synchronously on the CPU).
    """
    if inner < 1:
        raise ValueError(f"inner must be at least 1, got {inner}")
    for fn in fns.values() if warmup else ():  # compile and warm up
        _wait(fn())
    names = list(fns)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(repeats):
        for name in names if round_ % 2 == 0 else reversed(names):
            fn = fns[name]
            start = time.perf_counter()
            out = fn()
            for _ in range(inner - 1):
                out = fn()
            _wait(out)
            samples[name].append((time.perf_counter() - start) / inner)
            del out  # free the outputs before the next candidate runs
    return {name: statistics.median(s) for name, s in samples.items()}


def _wait(out: Any) -> None:
    for leaf in jax.tree.leaves(out):
        if isinstance(leaf, jax.Array):
            leaf.block_until_ready()


def comparison(
    label: str,
    gradax_seconds: float,
    reference: str | None = None,
    reference_seconds: float | None = None,
    floor: str | None = None,
    floor_seconds: float | None = None,
    floor_note: str | None = None,
) -> dict[str, Any]:
    """One row of ``gradax bench``'s table, as a JSON-ready dict.

    ``ratio`` is gradax's time over the reference's (below 1: gradax is
    faster); ``fraction_of_floor`` is the floor's time over gradax's (1: gradax
    runs at the machine's floor; above 1 where gradax needs less work than
    the floor's count, e.g. Gram Newton-Schulz against plain Newton-Schulz).
    ``floor_note`` says why that can happen in this row (shown when it does).
    """
    return {
        "label": label,
        "gradax_seconds": gradax_seconds,
        "reference": reference,
        "reference_seconds": reference_seconds,
        "ratio": (gradax_seconds / reference_seconds if reference_seconds else None),
        "floor": floor,
        "floor_seconds": floor_seconds,
        "fraction_of_floor": (
            floor_seconds / gradax_seconds if floor_seconds is not None else None
        ),
        "floor_note": floor_note,
    }


def comparisons_against(
    label: str,
    times: dict[str, float],
    references: list[str],
    floor: str | None = None,
    floor_seconds: float | None = None,
    gradax: str = "gradax",
    floor_note: str | None = None,
) -> list[dict[str, Any]]:
    """Rows of ``times[gradax]`` against each reference that was timed.

    With no reference timed (none installed), one row of gradax alone.
    """
    timed = [name for name in references if name in times]
    floors = (floor, floor_seconds, floor_note)
    if not timed:
        return [comparison(label, times[gradax], None, None, *floors)]
    return [
        comparison(label, times[gradax], name, times[name], *floors) for name in timed
    ]
