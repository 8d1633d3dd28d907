r"""Softmax cross-entropy for large vocabularies, in chunks of tokens.

Language-model training spends most of its memory at the very end: the
`(tokens, vocab)` logits, their float32 upcast and the float32
log-probabilities of the plain formulation. Two functions avoid them.

- :func:`chunked_softmax_cross_entropy_with_integer_labels` takes the logits
  but reads them a chunk of rows at a time: the float32 copy, the
  log-normalizer's exponentials and (in the backward) the softmax exist for
  one chunk only.
- :func:`fused_linear_softmax_cross_entropy` takes the last hidden states and
  the output projection instead, so the logits themselves exist only one
  chunk at a time.

Both loop over chunks of `rows` tokens with :func:`jax.lax.fori_loop`. A
token count that is not a multiple of `rows` needs no padding (a padded
copy would be as large as the logits): the last chunk is pulled back to end
at the last token, and the rows it shares with the chunk before it are
counted once. Vocabulary chunks of the fused loss work the same way along
the columns.

For one row :math:`z` of logits and its label :math:`y`, with the
log-normalizer :math:`\ell = \log\sum_j e^{z_j}` and the softmax
:math:`p = e^{z - \ell}`,

.. math::
  L = \ell - z_y, \qquad
  \frac{\partial L}{\partial z} = p - e_y .

The backward pass keeps :math:`\ell` (one float32 per token) and recomputes
:math:`p` chunk by chunk.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.custom_derivatives import SymbolicZero

# Default chunk sizes, in float32 elements of one (rows, vocab) temporary:
# 16 MiB for the chunked loss, whose loop does only elementwise work, and
# 128 MiB for the fused one, whose gradient accumulates into a (dim, vocab)
# buffer once per chunk and so wants many rows per chunk.
CHUNKED_DEFAULT_ELEMENTS = 1 << 22
FUSED_DEFAULT_ELEMENTS = 1 << 25


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _accumulation_dtype(*dtypes: Any) -> Any:
    """float32, or float64 where an input is float64."""
    return jnp.promote_types(jnp.result_type(*dtypes), jnp.float32)


def _default_rows(budget: int, vocab: int) -> int:
    return max(1, budget // max(vocab, 1))


def _check_chunk(name: str, value: int | None) -> None:
    if value is not None and (not isinstance(value, (int, np.integer)) or value < 1):
        raise ValueError(f"{name} must be a positive integer or None, got {value!r}")


def _chunk_start(i: jax.Array, size: int, total: int) -> jax.Array:
    """Start of chunk `i`: `i * size`, pulled back to end inside `total`."""
    return jnp.minimum(i * size, total - size)


def _fresh(start: jax.Array, i: jax.Array, size: int, axis: int) -> jax.Array:
    """Which entries of chunk `i` no earlier chunk covered (a 2-d mask)."""
    shape = (size, 1) if axis == 0 else (1, size)
    return start + lax.broadcasted_iota(jnp.int32, shape, axis) >= i * size


def _is_half(x: jax.Array) -> bool:
    return x.dtype.itemsize == 2 and jnp.issubdtype(x.dtype, jnp.floating)


# XLA's CPU backend has no 16-bit float dynamic slices: it converts the whole
# operand to float32 around each one. In a loop that means a float32 copy of
# all the logits (hoisted out of the loop) for a slice, and a conversion of
# the whole gradient in every iteration for an update. On CPU the 16-bit
# arrays are therefore sliced and updated as uint16 bits (a slice then costs
# one copy of the bits, in their own width); elsewhere they are sliced as
# they are.


def _slice(x: jax.Array, start: Any, size: int, axis: int = 0) -> jax.Array:
    """`x[start:start + size]` along `axis` (see the note above)."""

    def plain(x, start):
        return lax.dynamic_slice_in_dim(x, start, size, axis)

    if not _is_half(x):
        return plain(x, start)

    def bits(x, start):
        piece = plain(lax.bitcast_convert_type(x, jnp.uint16), start)
        return lax.bitcast_convert_type(piece, x.dtype)

    return lax.platform_dependent(x, start, cpu=bits, default=plain)


def _update(x: jax.Array, piece: jax.Array, start: Any) -> jax.Array:
    """`x` with rows `start:start + len(piece)` replaced (see above)."""

    def plain(x, piece, start):
        return lax.dynamic_update_slice_in_dim(x, piece, start, 0)

    if not _is_half(x):
        return plain(x, piece, start)

    def bits(x, piece, start):
        as_bits = functools.partial(lax.bitcast_convert_type, new_dtype=jnp.uint16)
        out = plain(as_bits(x), as_bits(piece), start)
        return lax.bitcast_convert_type(out, x.dtype)

    return lax.platform_dependent(x, piece, start, cpu=bits, default=plain)


def _logsumexp_rows(z: jax.Array, mask: jax.Array | None) -> jax.Array:
    """`log(sum(exp(z), 1))` over the entries `mask` keeps (-inf if none)."""
    if mask is not None:
        z = jnp.where(mask, z, -jnp.inf)
    top = jnp.max(z, axis=1)
    top = jnp.where(jnp.isfinite(top), top, 0.0)
    return jnp.log(jnp.sum(jnp.exp(z - top[:, None]), axis=1)) + top


# --------------------------------------------------------------------------
# The chunked loss: logits in, a chunk of rows at a time.


def _chunk_rows(logits, labels, mask, i, rows):
    """Rows `start:start + rows` of each operand, the logits upcast."""
    n = logits.shape[0]
    start = _chunk_start(i, rows, n)
    compute = _accumulation_dtype(logits.dtype)
    z = _slice(logits, start, rows).astype(compute)
    label = lax.dynamic_slice_in_dim(labels, start, rows)[:, None]
    m = None if mask is None else lax.dynamic_slice_in_dim(mask, start, rows)
    is_label = lax.broadcasted_iota(jnp.int32, z.shape, 1) == label
    return start, z, is_label, m


def _chunked_forward(rows: int, logits, labels, mask):
    """Per-row loss and log-normalizer, one chunk of rows per iteration."""
    n = logits.shape[0]
    compute = _accumulation_dtype(logits.dtype)

    def body(i, carry):
        loss, lse = carry
        start, z, is_label, m = _chunk_rows(logits, labels, mask, i, rows)
        lse_c = _logsumexp_rows(z, m)
        picked = jnp.sum(jnp.where(is_label, z, 0.0), axis=1)
        loss_c = lse_c - picked
        if m is not None:
            loss_c = jnp.where(jnp.any(m, axis=1), loss_c, 0.0)
        return (
            lax.dynamic_update_slice_in_dim(loss, loss_c, start, 0),
            lax.dynamic_update_slice_in_dim(lse, lse_c, start, 0),
        )

    init = (jnp.zeros(n, compute), jnp.zeros(n, compute))
    return lax.fori_loop(0, _cdiv(n, rows), body, init)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _chunked(rows: int, logits, labels, mask):
    return _chunked_forward(rows, logits, labels, mask)[0]


def _chunked_fwd(rows, logits, labels, mask):
    loss, lse = _chunked_forward(rows, logits, labels, mask)
    return loss, (logits, labels, mask, lse)


def _chunked_bwd(rows, residuals, g):
    logits, labels, mask, lse = residuals
    n = logits.shape[0]

    def body(i, grad):
        start, z, is_label, m = _chunk_rows(logits, labels, mask, i, rows)
        lse_c = lax.dynamic_slice_in_dim(lse, start, rows)[:, None]
        g_c = lax.dynamic_slice_in_dim(g, start, rows)[:, None].astype(z.dtype)
        p = jnp.exp(z - lse_c)
        if m is not None:
            p = jnp.where(m, p, 0.0)
        grad_c = (p - is_label.astype(z.dtype)) * g_c
        if m is not None:  # rows without any class kept have zero loss
            grad_c = jnp.where(jnp.any(m, axis=1, keepdims=True), grad_c, 0.0)
        return _update(grad, grad_c.astype(grad.dtype), start)

    grad = lax.fori_loop(0, _cdiv(n, rows), body, jnp.zeros_like(logits))
    return grad, None, None


_chunked.defvjp(_chunked_fwd, _chunked_bwd)


def _classes_last(x: jax.Array, axis: int | tuple[int, ...]) -> tuple[Any, int]:
    """`x` with the class axes moved last and flattened into one."""
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    if not axes:
        raise ValueError("axis must name at least one axis")
    axes = tuple(a % x.ndim for a in axes)
    batch = tuple(a for a in range(x.ndim) if a not in axes)
    if batch + axes != tuple(range(x.ndim)):
        x = jnp.transpose(x, batch + axes)
    classes = int(np.prod([x.shape[a] for a in range(len(batch), x.ndim)]))
    return x.reshape(*x.shape[: len(batch)], classes), len(batch)


def chunked_softmax_cross_entropy_with_integer_labels(
    logits: Any,
    labels: Any,
    axis: int | tuple[int, ...] = -1,
    where: Any = None,
    *,
    chunk_size: int | None = None,
) -> jax.Array:
    r"""`softmax_cross_entropy_with_integer_labels`, a chunk of tokens at a time.

    The same loss as optax's, for each row :math:`z` of the logits and its
    integer label :math:`y`:

    .. math::
      L = \log \sum_j e^{z_j} - z_y, \qquad
      \frac{\partial L}{\partial z_j} = \mathrm{softmax}(z)_j - [j = y],

    computed `chunk_size` rows at a time in a loop, with a custom VJP whose
    backward pass recomputes the softmax of each chunk from the logits and
    the saved log-normalizers (one float per row). Only the logits, their
    gradient (both in the logits' dtype) and one chunk's float32 temporaries
    are ever in memory: bfloat16 logits are upcast chunk by chunk, never as a
    whole, and no full-size float32 log-probabilities exist in the forward
    or backward pass. (On CPU, XLA also copies 16-bit logits once, in their
    own width, since it cannot slice them in place.) The row count need not
    be a multiple of `chunk_size`.

    The loss is returned in float32 (float64 for float64 logits) whatever the
    logits' dtype: it is one number per row, and a bfloat16 loss would throw
    away the precision of the float32 accumulation.

    Args:
      logits: unnormalized log-probabilities, floating point, of shape
        `batch_shape + (num_classes,)` (the class axis or axes given by
        `axis`).
      labels: integer labels in `[0, num_classes)`, of shape
        `batch_shape`. A label outside that range must be masked out with
        `where` (`where=labels != ignore_index`).
      axis: the class axis, or a tuple of class axes that are flattened into
        one (a label is then a flat index into them), as in optax.
      where: optional boolean mask, of shape `batch_shape` (rows that are
        left out: their loss and gradient are zero) or of the logits' shape
        (classes left out of the normalizer, as in optax; a row with no class
        kept has zero loss).
      chunk_size: rows per chunk; None picks `max(1, 2**22 // num_classes)`
        (16 MiB per float32 temporary). Larger chunks run fewer loop steps
        and need more memory.

    Returns:
      The cross-entropy of each row, of shape `batch_shape`, float32 (or
      float64).

    Raises:
      ValueError: for a non-floating `logits`, non-integer `labels`,
        mismatched shapes or a `chunk_size` below 1.

    Example:
      >>> import jax.numpy as jnp
      >>> from gradax.losses import (
      ...     chunked_softmax_cross_entropy_with_integer_labels as xent)
      >>> logits = jnp.array([[1.2, -0.8, -0.5], [0.9, -1.2, 1.1],
      ...                     [0.0, 0.0, 0.0]], dtype=jnp.bfloat16)
      >>> xent(logits, jnp.array([0, 1, 2]), chunk_size=2)
      Array([0.27..., 2.95..., 1.09...], dtype=float32)
    """
    logits = jnp.asarray(logits)
    labels = jnp.asarray(labels)
    if not jnp.issubdtype(logits.dtype, jnp.floating):
        raise ValueError(f"logits must be floating point, got {logits.dtype}")
    if not jnp.issubdtype(labels.dtype, jnp.integer):
        raise ValueError(f"labels must be integers, got {labels.dtype}")
    _check_chunk("chunk_size", chunk_size)
    flat, batch_ndim = _classes_last(logits, axis)
    batch_shape = flat.shape[:batch_ndim]
    if labels.shape != batch_shape:
        raise ValueError(
            f"labels of shape {labels.shape} do not match the logits' batch "
            f"shape {batch_shape} (logits {logits.shape}, axis={axis})"
        )
    classes = flat.shape[-1]
    flat = flat.reshape(-1, classes)
    n = flat.shape[0]
    mask = None
    if where is not None:
        where = jnp.asarray(where, dtype=bool)
        if where.ndim == logits.ndim:
            mask = _classes_last(jnp.broadcast_to(where, logits.shape), axis)[0]
            mask = mask.reshape(n, classes)
        else:
            mask = jnp.broadcast_to(where, batch_shape).reshape(n, 1)
    compute = _accumulation_dtype(logits.dtype)
    if n == 0 or classes == 0:
        return jnp.zeros(batch_shape, compute)
    rows = chunk_size or _default_rows(CHUNKED_DEFAULT_ELEMENTS, classes)
    loss = _chunked(min(int(rows), n), flat, labels.reshape(n), mask)
    return loss.reshape(batch_shape)


# --------------------------------------------------------------------------
# The fused loss: hidden states and output weights in, logits never whole.


class _Plan(NamedTuple):
    """Static layout of the fused loss: chunk sizes and matmul precision."""

    rows: int  # tokens per chunk
    cols: int  # vocabulary entries per chunk (the whole vocabulary: one)
    precision: Any


class _Block(NamedTuple):
    """One (rows, cols) block of logits and where it sits in the vocabulary."""

    z: jax.Array  # (rows, cols) logits, float32
    is_label: jax.Array  # (rows, cols) bool
    fresh: jax.Array | None  # (1, cols): columns no earlier block covered
    w: jax.Array  # (dim, cols) weights of these columns
    start: jax.Array | int  # first column


def _dot(a, b, contract, precision, dtype):
    """`a` times `b` contracting axis `contract[0]` of a with `[1]` of b."""
    dims = (((contract[0],), (contract[1],)), ((), ()))
    return lax.dot_general(
        a, b, dims, precision=precision, preferred_element_type=dtype
    )


def _logits_block(plan: _Plan, h_c, label_c, w, b, j) -> _Block:
    """Logits of a token chunk against vocabulary chunk `j` (all of it: 0)."""
    vocab = w.shape[1]
    acc = _accumulation_dtype(h_c.dtype, w.dtype)
    if plan.cols == vocab:
        start, fresh, w_j, b_j = 0, None, w, b
    else:
        start = _chunk_start(j, plan.cols, vocab)
        fresh = _fresh(start, j, plan.cols, axis=1)
        w_j = _slice(w, start, plan.cols, axis=1)
        b_j = None if b is None else _slice(b, start, plan.cols)
    z = _dot(h_c, w_j, (1, 0), plan.precision, acc)
    if b_j is not None:
        z = z + b_j.astype(acc)
    column = start + lax.broadcasted_iota(jnp.int32, z.shape, 1)
    return _Block(z, column == label_c[:, None], fresh, w_j, start)


def _row_stats(plan: _Plan, h_c, label_c, w, b):
    """Log-normalizer and label logit of each row of a token chunk.

    With one vocabulary chunk the logits block is returned too (for the
    gradient to reuse); with several, the log-normalizer is accumulated
    online (running maximum and rescaled sum) and no block is returned.
    """
    vocab = w.shape[1]
    if plan.cols == vocab:
        block = _logits_block(plan, h_c, label_c, w, b, 0)
        picked = jnp.sum(jnp.where(block.is_label, block.z, 0.0), axis=1)
        return _logsumexp_rows(block.z, None), picked, block

    def body(j, carry):
        top, total, picked = carry
        block = _logits_block(plan, h_c, label_c, w, b, j)
        fresh = block.fresh
        # Set for every block when the vocabulary spans several chunks.
        assert fresh is not None
        z = jnp.where(fresh, block.z, -jnp.inf)
        label_here = block.is_label & fresh
        picked = picked + jnp.sum(jnp.where(label_here, block.z, 0.0), axis=1)
        new_top = jnp.maximum(top, jnp.max(z, axis=1))
        total = total * jnp.exp(top - new_top) + jnp.sum(
            jnp.exp(z - new_top[:, None]), axis=1
        )
        return new_top, total, picked

    acc = _accumulation_dtype(h_c.dtype, w.dtype)
    rows = h_c.shape[0]
    init = (
        jnp.full(rows, -jnp.inf, acc),
        jnp.zeros(rows, acc),
        jnp.zeros(rows, acc),
    )
    top, total, picked = lax.fori_loop(0, _cdiv(vocab, plan.cols), body, init)
    return jnp.log(total) + top, picked, None


def _add_block(acc, value, start, axis):
    """`acc` with `value` added at `start` along `axis`."""
    if value.shape == acc.shape:
        return acc + value
    current = lax.dynamic_slice_in_dim(acc, start, value.shape[axis], axis)
    return lax.dynamic_update_slice_in_dim(acc, current + value, start, axis)


def _chunk_grads(plan, h_c, label_c, w, b, lse_c, weight_c, fresh_rows, carry, block):
    """Add one token chunk's share of the gradients to `carry`.

    `carry` is `(dh_c, dw, db)`, any of them None when not wanted:
    `dh_c += G w^T` for this chunk's rows, `dw += h_c^T G` and
    `db += sum(G)` over the rows no earlier chunk covered, with
    `G = weight_c * (softmax - onehot)`. `block` is the chunk's logits
    when `_row_stats` kept them; else they are recomputed per vocabulary
    chunk.
    """
    vocab = w.shape[1]
    acc = _accumulation_dtype(h_c.dtype, w.dtype)
    operand = jnp.result_type(h_c.dtype, w.dtype)
    h_fresh = jnp.where(fresh_rows, h_c, jnp.zeros((), h_c.dtype))

    def add(j, carry, block=None):
        dh_c, dw, db = carry
        if block is None:
            block = _logits_block(plan, h_c, label_c, w, b, j)
        softmax = jnp.exp(block.z - lse_c[:, None])
        grad = (softmax - block.is_label.astype(acc)) * weight_c[:, None]
        if block.fresh is not None:
            grad = jnp.where(block.fresh, grad, 0.0)
        # Matmul operands in the inputs' dtype, products summed in float32.
        grad_op = grad.astype(operand)
        if dh_c is not None:
            dh_c = dh_c + _dot(grad_op, block.w, (1, 1), plan.precision, acc)
        if dw is not None:
            piece = _dot(h_fresh, grad_op, (0, 0), plan.precision, acc)
            dw = _add_block(dw, piece, block.start, axis=1)
        if db is not None:
            piece = jnp.sum(jnp.where(fresh_rows, grad, 0.0), axis=0)
            db = _add_block(db, piece, block.start, axis=0)
        return dh_c, dw, db

    if plan.cols == vocab:
        return add(0, carry, block)
    return lax.fori_loop(0, _cdiv(vocab, plan.cols), add, carry)


def _token_chunk(plan, h, labels, mask, i):
    n = h.shape[0]
    start = _chunk_start(i, plan.rows, n)
    h_c = _slice(h, start, plan.rows)
    label_c = lax.dynamic_slice_in_dim(labels, start, plan.rows)
    keep = None if mask is None else lax.dynamic_slice_in_dim(mask, start, plan.rows)
    return start, h_c, label_c, keep


def _fused_forward(plan, h, w, b, labels, mask, want):
    """Loss, log-normalizers and the gradients for a cotangent of ones.

    `want` is `(dh, dw, db)` as booleans; with none of them this is the
    plain forward pass. The gradients are those of `sum(loss)`: `dh` row
    by row (exact for any cotangent after scaling each row), `dw` and
    `db` summed over the tokens.
    """
    n, dim = h.shape
    vocab = w.shape[1]
    acc = _accumulation_dtype(h.dtype, w.dtype)

    def body(i, carry):
        loss, lse, dh, dw, db = carry
        start, h_c, label_c, keep = _token_chunk(plan, h, labels, mask, i)
        lse_c, picked, block = _row_stats(plan, h_c, label_c, w, b)
        loss_c = lse_c - picked
        if keep is not None:
            loss_c = jnp.where(keep, loss_c, 0.0)
        loss = lax.dynamic_update_slice_in_dim(loss, loss_c, start, 0)
        lse = lax.dynamic_update_slice_in_dim(lse, lse_c, start, 0)
        if any(want):
            weight = jnp.ones(plan.rows, acc) if keep is None else keep.astype(acc)
            fresh_rows = _fresh(start, i, plan.rows, axis=0)
            dh_c = jnp.zeros((plan.rows, dim), acc) if want[0] else None
            dh_c, dw, db = _chunk_grads(
                plan, h_c, label_c, w, b, lse_c, weight, fresh_rows,
                (dh_c, dw, db), block,
            )  # fmt: skip
            if dh is not None:
                dh = lax.dynamic_update_slice_in_dim(dh, dh_c, start, 0)
        return loss, lse, dh, dw, db

    init = (
        jnp.zeros(n, acc),
        jnp.zeros(n, acc),
        jnp.zeros((n, dim), acc) if want[0] else None,
        jnp.zeros((dim, vocab), acc) if want[1] else None,
        jnp.zeros(vocab, acc) if want[2] else None,
    )
    return lax.fori_loop(0, _cdiv(n, plan.rows), body, init)


def _weight_grads(plan, h, w, b, labels, mask, lse, g, want):
    """`dw` and `db` for the per-token cotangent `g`, logits recomputed."""
    n, dim = h.shape
    vocab = w.shape[1]
    acc = _accumulation_dtype(h.dtype, w.dtype)

    def body(i, carry):
        start, h_c, label_c, keep = _token_chunk(plan, h, labels, mask, i)
        lse_c = lax.dynamic_slice_in_dim(lse, start, plan.rows)
        weight = lax.dynamic_slice_in_dim(g, start, plan.rows)
        if keep is not None:
            weight = jnp.where(keep, weight, 0.0)
        fresh_rows = _fresh(start, i, plan.rows, axis=0)
        _, dw, db = _chunk_grads(
            plan, h_c, label_c, w, b, lse_c, weight, fresh_rows, (None, *carry), None
        )
        return dw, db

    init = (
        jnp.zeros((dim, vocab), acc) if want[1] else None,
        jnp.zeros(vocab, acc) if want[2] else None,
    )
    return lax.fori_loop(0, _cdiv(n, plan.rows), body, init)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _fused(plan, h, w, b, labels, mask):
    return _fused_forward(plan, h, w, b, labels, mask, (False, False, False))[0]


def _fused_fwd(plan, h, w, b, labels, mask):
    # With symbolic zeros each array arrives with a flag saying whether it is
    # differentiated; gradients nobody asked for are never computed.
    want = (h.perturbed, w.perturbed, b is not None and b.perturbed)
    h, w, labels = h.value, w.value, labels.value
    b = None if b is None else b.value
    mask = None if mask is None else mask.value
    loss, lse, dh, dw, db = _fused_forward(plan, h, w, b, labels, mask, want)
    return loss, (h, w, b, labels, mask, lse, dh, dw, db)


def _fused_bwd(plan, residuals, g):
    h, w, b, labels, mask, lse, dh, dw, db = residuals
    if isinstance(g, SymbolicZero):
        return None, None, None, None, None
    acc = lse.dtype
    g = g.astype(acc)
    dh = None if dh is None else (dh * g[:, None]).astype(h.dtype)
    if dw is None and db is None:
        return dh, None, None, None, None
    # dw and db were summed over tokens with unit weights. A cotangent that
    # is the same on every kept token (a mean or a sum of the loss, masked
    # or not) only scales them; any other is applied by recomputing them.
    kept = jnp.ones(g.shape, bool) if mask is None else mask
    high = jnp.max(jnp.where(kept, g, -jnp.inf), initial=-jnp.inf)
    low = jnp.min(jnp.where(kept, g, jnp.inf), initial=jnp.inf)
    scale = jnp.where(high >= low, high, 0.0)  # 0 when no token is kept
    uniform = (high == low) | (high < low)
    want = (False, dw is not None, db is not None)

    def scaled():
        return tuple(None if x is None else x * scale for x in (dw, db))

    def recomputed():
        return _weight_grads(plan, h, w, b, labels, mask, lse, g, want)

    dw, db = lax.cond(uniform, scaled, recomputed)
    dw = None if dw is None else dw.astype(w.dtype)
    db = None if db is None else db.astype(b.dtype)
    return dh, dw, db, None, None


_fused.defvjp(_fused_fwd, _fused_bwd, symbolic_zeros=True)


def fused_linear_softmax_cross_entropy(
    hidden: Any,
    weights: Any,
    labels: Any,
    *,
    bias: Any = None,
    where: Any = None,
    token_chunk: int | None = None,
    vocab_chunk: int | None = None,
    precision: Any = None,
) -> jax.Array:
    r"""Cross-entropy of `hidden @ weights + bias` without the full logits.

    The loss of :func:`chunked_softmax_cross_entropy_with_integer_labels`
    applied to the logits :math:`Z = HW + b` of hidden states :math:`H`
    (tokens by `dim`) and an output projection :math:`W` (`dim` by
    vocabulary), with the gradients

    .. math::
      G = \mathrm{diag}(g)\,(\mathrm{softmax}(Z) - Y), \qquad
      \frac{\partial}{\partial H} = G W^\top, \quad
      \frac{\partial}{\partial W} = H^\top G, \quad
      \frac{\partial}{\partial b} = \mathbf{1}^\top G,

    for the per-token cotangent :math:`g` and one-hot labels :math:`Y`.
    :math:`Z` is formed `token_chunk` rows at a time, so memory holds one
    `(token_chunk, vocab)` float32 block instead of `(tokens, vocab)`.

    The forward pass (under differentiation) computes, chunk by chunk, the
    loss together with :math:`(\mathrm{softmax}(Z) - Y) W^\top` and
    :math:`H^\top(\mathrm{softmax}(Z) - Y)`: three matmuls in all, as many
    as the plain formulation. The backward pass scales them by :math:`g`,
    which is exact for the input gradient and, for the weights, whenever
    :math:`g` is the same on every kept token (any mean or sum of the loss,
    masked or not). For any other :math:`g` it recomputes the logits chunk
    by chunk (two more matmuls). Gradients of arguments that are not
    differentiated are not computed. The saved state is one float32
    `(tokens, dim)` and one `(dim, vocab)` array.

    With `vocab_chunk` the vocabulary is also split: a running maximum
    and rescaled sum (an online log-sum-exp) give the log-normalizer, and
    only a `(token_chunk, vocab_chunk)` block exists at a time, at the
    cost of computing each logit twice (four matmuls instead of three).

    Matmuls take their operands in the inputs' dtype (bfloat16 stays
    bfloat16) and accumulate in float32; the log-sum-exp, the softmax and
    the summed gradients are float32 (float64 for float64 inputs).

    Args:
      hidden: hidden states of shape `batch_shape + (dim,)`.
      weights: output projection of shape `(dim, vocab)` (for tied
        embeddings of shape `(vocab, dim)`, pass `embedding.T`).
      labels: integer labels in `[0, vocab)` of shape `batch_shape`. A
        label outside that range must be masked out with `where`.
      bias: optional output bias of shape `(vocab,)`.
      where: optional boolean mask of shape `batch_shape`: tokens left out
        (padding, an ignore index) get zero loss and zero gradient.
      token_chunk: tokens per chunk; None picks
        `max(1, 2**25 // vocab)` (128 MiB per float32 block). The
        gradient of `weights` is accumulated once per chunk, so small
        chunks cost memory traffic.
      vocab_chunk: vocabulary entries per chunk, or None for the whole
        vocabulary at once (fastest).
      precision: matmul precision, as for :func:`jax.lax.dot_general`.

    Returns:
      The cross-entropy of each token, of shape `batch_shape`, float32
      (float64 for float64 inputs).

    Raises:
      ValueError: for mismatched shapes, non-integer labels or a chunk size
        below 1.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from gradax.losses import fused_linear_softmax_cross_entropy
      >>> h = jnp.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
      >>> w = jnp.array([[1.0, -1.0, 0.0], [0.0, 2.0, 1.0]])
      >>> labels = jnp.array([0, 1, -100])
      >>> def loss(h, w):
      ...     per_token = fused_linear_softmax_cross_entropy(
      ...         h, w, labels, where=labels >= 0, token_chunk=2)
      ...     return per_token.sum() / 2
      >>> value, (dh, dw) = jax.value_and_grad(loss, argnums=(0, 1))(h, w)
      >>> value
      Array(0.4..., dtype=float32)
      >>> dh.shape, dw.shape
      ((3, 2), (2, 3))
    """
    hidden = jnp.asarray(hidden)
    weights = jnp.asarray(weights)
    labels = jnp.asarray(labels)
    _check_chunk("token_chunk", token_chunk)
    _check_chunk("vocab_chunk", vocab_chunk)
    if weights.ndim != 2 or hidden.ndim < 1 or hidden.shape[-1] != weights.shape[0]:
        raise ValueError(
            f"hidden of shape {hidden.shape} and weights of shape "
            f"{weights.shape} do not multiply: want (..., dim) and (dim, vocab)"
        )
    if not jnp.issubdtype(labels.dtype, jnp.integer):
        raise ValueError(f"labels must be integers, got {labels.dtype}")
    batch_shape = hidden.shape[:-1]
    if labels.shape != batch_shape:
        raise ValueError(
            f"labels of shape {labels.shape} do not match hidden's batch shape "
            f"{batch_shape}"
        )
    dim, vocab = weights.shape
    if bias is not None:
        bias = jnp.asarray(bias)
        if bias.shape != (vocab,):
            raise ValueError(f"bias must have shape ({vocab},), got {bias.shape}")
    h = hidden.reshape(-1, dim)
    n = h.shape[0]
    mask = None
    if where is not None:
        mask = jnp.broadcast_to(jnp.asarray(where, dtype=bool), batch_shape)
        mask = mask.reshape(n)
    acc = _accumulation_dtype(hidden.dtype, weights.dtype)
    if n == 0 or vocab == 0:
        return jnp.zeros(batch_shape, acc)
    rows = token_chunk or _default_rows(FUSED_DEFAULT_ELEMENTS, vocab)
    plan = _Plan(min(int(rows), n), min(int(vocab_chunk or vocab), vocab), precision)
    loss = _fused(plan, h, weights, bias, labels.reshape(n), mask)
    return loss.reshape(batch_shape)
