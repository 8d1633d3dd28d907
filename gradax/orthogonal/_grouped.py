"""Same-shape matrices orthogonalized together, one batched call per group.

A transformer has hundreds of matrices of a handful of shapes. Tracing one
Newton–Schulz iteration per leaf makes the step's program, and its trace and
compile times, grow with the leaf count (290 iterations for 48 layers);
stacking the matrices of one shape makes it grow with the number of shapes.
The numbers are the same: each matrix of a stack is orthogonalized on its
own (the iteration is batched over leading axes).

A stack costs its size again while it is built, and the iteration's
intermediates are held for the whole stack at once, so groups are capped at
``GROUP_BYTES``: large matrices (a 4096x4096 float32 is 64 MiB) keep one
iteration each, as before.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp

GROUP_BYTES = 32 * 2**20


def orthogonalize_grouped(
    matrices: Sequence[jax.Array],
    orthogonalize: Callable[[jax.Array], jax.Array],
    group_bytes: int = GROUP_BYTES,
) -> list[jax.Array]:
    """`[orthogonalize(m) for m in matrices]`, same-shape ones in one call.

    Args:
      matrices: arrays of shape `(..., m, n)`.
      orthogonalize: maps a stack `(k, m, n)` to its orthogonalization.
      group_bytes: the most bytes of input stacked into one call.

    Returns:
      The orthogonalized matrices, each with its input's shape.
    """
    flat = [x.reshape(math.prod(x.shape[:-2]), *x.shape[-2:]) for x in matrices]
    groups: dict[tuple, list[list[int]]] = {}
    for i, x in enumerate(flat):
        chunks = groups.setdefault((x.shape[-2:], x.dtype), [[]])
        size = sum(flat[j].nbytes for j in chunks[-1])
        if chunks[-1] and size + x.nbytes > group_bytes:
            chunks.append([])
        chunks[-1].append(i)
    out: list[jax.Array] = list(flat)
    for chunks in groups.values():
        for chunk in chunks:
            if len(chunk) == 1:
                # Alone in its group: the very call it had without grouping
                # (a batch of one is another program on some jax releases).
                i = chunk[0]
                out[i] = orthogonalize(matrices[i]).reshape(flat[i].shape)
                continue
            stack = orthogonalize(jnp.concatenate([flat[i] for i in chunk]))
            counts = [flat[i].shape[0] for i in chunk]
            starts = [sum(counts[:k]) for k in range(len(counts))]
            for i, start, count in zip(chunk, starts, counts, strict=True):
                out[i] = jax.lax.slice_in_dim(stack, start, start + count)
    return [y.reshape(x.shape) for y, x in zip(out, matrices, strict=True)]
