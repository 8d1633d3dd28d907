"""QK-Clip (MuonClip): cap attention logits by rescaling query/key weights."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._core.declarations import Range, Spec, validate

# tau caps the logits: a cap of 0 would zero every clipped head's weights.
# inf (never clip) is allowed; a traced tau is not checked.
_TAU = Spec(
    valid=Range(0.0, low_open=True, allow_inf=True, hint="inf never clips"),
    schedule=False,
    array=False,
    allow_none=False,
)


def _head_layout(shape: tuple[int, ...], head_axis: int, heads: int, split: bool):
    """Where a leaf's heads are: `(axis, block, split_layout)`.

    A head axis of size `heads * block` holds each head's `block`
    entries contiguously (the fused layout of `(d, H * dh)` kernels). A head
    axis of size `heads` (`(d, H, dh)` kernels) has the per-head entries on
    the next axis when `split` (MLA) needs them, else the block is 1.
    """
    if not shape:
        raise ValueError("qk_clip needs arrays with a head axis, got a scalar")
    axis = head_axis % len(shape)
    size = shape[axis]
    if size == heads and split:
        if axis + 1 >= len(shape):
            raise ValueError(
                f"MLA mode needs each head's entries: for shape {shape} with "
                f"{heads} heads on axis {axis}, put them on the next axis or "
                "fuse them into the head axis"
            )
        return axis, shape[axis + 1], True
    if size % heads:
        raise ValueError(
            f"axis {axis} of shape {shape} has {size} entries, not a multiple of "
            f"the {heads} heads in max_logits"
        )
    return axis, size // heads, False


def _place(w: Any, layout: tuple, factors: jax.Array, touched: jax.Array):
    """Multiply `w` by per-head `factors` (H, block) where `touched`."""
    w = jnp.asarray(w)
    axis, block, split = layout
    heads = factors.shape[0]
    shape = [1] * w.ndim
    if split:
        shape[axis], shape[axis + 1] = heads, block
    else:
        shape[axis] = heads * block
    factors, touched = factors.reshape(shape), touched.reshape(shape)
    work = jnp.promote_types(w.dtype, jnp.float32)
    scaled = (w.astype(work) * factors.astype(work)).astype(w.dtype)
    # Heads left alone keep their exact bits (a where, not a multiply by 1).
    return jnp.where(touched, scaled, w)


def _head_axis_sizes(tree: Any, head_axis: int) -> set[int]:
    return {np.shape(x)[head_axis % np.ndim(x)] for x in jax.tree.leaves(tree)}


def qk_clip(
    w_q: Any,
    w_k: Any,
    max_logits: Any,
    tau: float = 100.0,
    *,
    head_axis: int = -1,
    rope_dim: int | None = None,
    k_nope_dim: int | None = None,
) -> tuple[Any, Any]:
    r"""QK-Clip: rescale the query and key weights of heads whose logits grew.

    For each head :math:`h` with recorded maximum logit :math:`S_h = \max
    q_i^\top k_j / \sqrt{d}` (over the batch and positions of the last forward
    pass) above :math:`\tau`, with :math:`\gamma_h = \tau / S_h`:

    .. math::
      W_q^h \leftarrow \sqrt{\gamma_h}\, W_q^h,\qquad
      W_k^h \leftarrow \sqrt{\gamma_h}\, W_k^h,

    so that head's logits shrink by :math:`\gamma_h` and its maximum becomes
    :math:`\tau`. Heads with :math:`S_h \le \tau` keep their weights bit for
    bit. Call it after the optimizer step (MuonClip = Muon + QK-Clip).

    MLA mode (`rope_dim` given), as in Kimi K2: each query head's block is
    `[non-rotary | rotary]` with `rope_dim` rotary entries last; the
    non-rotary query and the (per-head) key parts get :math:`\sqrt{\gamma_h}`,
    the rotary query part :math:`\gamma_h`. The rotary key is shared between
    heads: do not pass it, it stays as it is. Pass the key up-projection as
    `w_k`; with `k_nope_dim` only the first `k_nope_dim` entries of each
    head's block are keys (DeepSeek's fused `[k_nope | v]` layout).

    Args:
      w_q: the query weights: an array or a pytree of arrays (kernel, bias),
        each with the heads along `head_axis`, either `H` contiguous
        blocks (`(d, H * dh)`) or one entry per head (`(d, H, dh)`, then
        MLA reads the per-head entries on the next axis).
      w_k: the key weights, laid out the same way, one key head per query
        head (for grouped-query attention, repeat the key heads first).
      max_logits: `S_h`, shape `(H,)`. For stacked layers `(L, ...)`,
        use `jax.vmap(qk_clip, in_axes=(0, 0, 0, None))`.
      tau: the logit cap :math:`\tau` > 0 (Kimi K2: 100).
      head_axis: the axis of every leaf that indexes heads.
      rope_dim: MLA mode: rotary entries at the end of each query head.
      k_nope_dim: MLA mode: key entries at the start of each `w_k` head
        block (default: the whole block).

    Returns:
      `(w_q, w_k)` with the offending heads rescaled.

    Raises:
      ValueError: `tau` is not > 0, or the shapes do not match.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> w_q, w_k = jnp.ones((4, 2 * 3)), jnp.ones((4, 2 * 3))
      >>> q, k = gradax.qk_clip(w_q, w_k, jnp.array([400.0, 50.0]), 100.0)
      >>> q[0]  # head 0 scaled by sqrt(100 / 400), head 1 untouched
      Array([0.5, 0.5, 0.5, 1. , 1. , 1. ], dtype=float32)

    References:
      Kimi Team, Kimi K2: Open Agentic Intelligence, 2025 (arXiv:2507.20534),
      Algorithm 1; Moonshot publishes no QK-Clip code.
    """
    validate("tau", tau, _TAU)
    max_logits = jnp.asarray(max_logits)
    if max_logits.ndim != 1:
        raise ValueError(
            "max_logits must have shape (num_heads,), got "
            f"{max_logits.shape}; vmap qk_clip over stacked layers"
        )
    heads = max_logits.shape[0]
    s = max_logits.astype(jnp.promote_types(max_logits.dtype, jnp.float32))
    clip = s > tau
    gamma = jnp.where(clip, tau / jnp.where(clip, s, 1), 1)
    root = jnp.sqrt(gamma)

    if rope_dim is None and k_nope_dim is None:
        sizes = _head_axis_sizes(w_q, head_axis) | _head_axis_sizes(w_k, head_axis)
        if len(sizes) > 1:
            raise ValueError(
                f"w_q and w_k have head axes of sizes {sorted(sizes)}; qk_clip "
                "needs one key head per query head (repeat grouped keys first)"
            )

    mla = rope_dim is not None or k_nope_dim is not None

    def rescale_q(w):
        layout = _head_layout(jnp.shape(w), head_axis, heads, split=mla)
        block = layout[1]
        rotary = (
            jnp.zeros(block, bool)
            if rope_dim is None
            else jnp.arange(block) >= block - rope_dim
        )
        factors = jnp.where(rotary[None, :], gamma[:, None], root[:, None])
        touched = jnp.broadcast_to(clip[:, None], factors.shape)
        return _place(w, layout, factors, touched)

    def rescale_k(w):
        layout = _head_layout(jnp.shape(w), head_axis, heads, split=mla)
        block = layout[1]
        keys = jnp.arange(block) < (block if k_nope_dim is None else k_nope_dim)
        factors = jnp.broadcast_to(root[:, None], (heads, block))
        touched = clip[:, None] & keys[None, :]
        return _place(w, layout, factors, touched)

    return jax.tree.map(rescale_q, w_q), jax.tree.map(rescale_k, w_k)
