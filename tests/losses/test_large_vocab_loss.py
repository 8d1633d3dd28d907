"""Chunked and fused cross-entropy for large vocabularies, against optax.

The reference everywhere is the plain formulation,
``optax.softmax_cross_entropy_with_integer_labels(hidden @ w + b, labels)``,
evaluated in float32 on the same input values (bfloat16 inputs are upcast
exactly first).

Tolerances come from the dtype. In float32 the chunked functions sum the
same terms as the reference in another order (row chunks, vocabulary chunks,
blocked matmuls), so they agree to a small multiple of float32's epsilon,
scaled by the result's magnitude: ``F32_TOL``. With bfloat16 inputs the
values still agree to that (the products of bfloat16 numbers are exact in
float32 and everything is summed in float32); gradients are returned in
bfloat16 (one rounding: half an ulp, ``eps / 2`` relative) and the fused
loss also rounds its softmax block to bfloat16 before the matmuls (another
``eps / 2`` per term), so they agree to ``2 * eps(bfloat16)`` of the
largest entry.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from gradax.losses import (
    chunked_softmax_cross_entropy_with_integer_labels,
    fused_linear_softmax_cross_entropy,
)

# Reordered float32 sums: a few dozen roundings of epsilon each.
F32_TOL = 64 * float(np.finfo(np.float32).eps)
# Two bfloat16 roundings (output and matmul operand), relative to the scale.
BF16_TOL = 2 * float(jnp.finfo(jnp.bfloat16).eps)


def assert_close(actual, expected, tol):
    """``|actual - expected| <= tol * max(1, max |expected|)`` entrywise."""
    actual = np.asarray(jnp.asarray(actual, jnp.float32))
    expected = np.asarray(jnp.asarray(expected, jnp.float32))
    assert actual.shape == expected.shape
    scale = max(1.0, float(np.max(np.abs(expected), initial=0.0)))
    np.testing.assert_allclose(actual, expected, rtol=0, atol=tol * scale)


def reference(logits, labels, where=None, axis=-1):
    logits = jnp.asarray(logits, jnp.float32)
    return optax.softmax_cross_entropy_with_integer_labels(
        logits, labels, axis=axis, where=where
    )


def problem(tokens=37, dim=16, vocab=50, seed=0, dtype=jnp.float32):
    rng = np.random.default_rng(seed)
    hidden = jnp.asarray(rng.standard_normal((tokens, dim)), dtype)
    weights = jnp.asarray(0.5 * rng.standard_normal((dim, vocab)), dtype)
    bias = jnp.asarray(rng.standard_normal(vocab), dtype)
    labels = jnp.asarray(rng.integers(0, vocab, tokens), jnp.int32)
    keep = jnp.asarray(rng.random(tokens) > 0.3)
    cotangent = jnp.asarray(rng.random(tokens), jnp.float32)
    return hidden, weights, bias, labels, keep, cotangent


def compare(ours, ref, args, argnums, cotangents, tol, grad_tol=None):
    """Values and VJPs of ``ours`` and ``ref`` agree, all in one program.

    Each cotangent is applied to the per-token loss (``loss @ cotangent``);
    the gradients of ``ours`` keep the inputs' dtypes.
    """

    def both(*args):
        out = []
        for fn in (ours, ref):
            grads = [
                jax.grad(lambda *a, c=c, fn=fn: fn(*a) @ c, argnums=argnums)(*args)
                for c in cotangents
            ]
            out.append((fn(*args), grads))
        return out

    (value, grads), (ref_value, ref_grads) = jax.jit(both)(*args)
    assert value.dtype == jnp.float32
    assert_close(value, ref_value, tol)
    for got_tuple, want_tuple in zip(grads, ref_grads, strict=True):
        for got, want, arg in zip(got_tuple, want_tuple, argnums, strict=True):
            assert got.dtype == args[arg].dtype
            assert_close(got, want, grad_tol or tol)


# ---------------------------------------------------------------- chunked


@pytest.mark.parametrize("chunk_size", [1, 8, None])
def test_chunked_matches_optax_values_and_grads(chunk_size):
    hidden, weights, _, labels, _, cotangent = problem()
    logits = hidden @ weights  # 37 rows: 8 does not divide them

    def ours(z):
        return chunked_softmax_cross_entropy_with_integer_labels(
            z, labels, chunk_size=chunk_size
        )

    compare(ours, lambda z: reference(z, labels), (logits,), (0,), [cotangent], F32_TOL)


@pytest.mark.parametrize("mask_kind", ["rows", "classes"])
def test_chunked_where_matches_optax(mask_kind):
    hidden, weights, _, labels, keep, cotangent = problem()
    logits = hidden @ weights
    if mask_kind == "rows":
        where = keep
        labels = jnp.where(keep, labels, -100)  # an ignore index, masked out
    else:
        rng = np.random.default_rng(1)
        where = jnp.asarray(rng.random(logits.shape) > 0.5)
        where = where.at[jnp.arange(37), labels].set(True)  # labels kept
        where = where.at[3].set(False)  # row 3: no class kept, zero loss

    def ours(z):
        return chunked_softmax_cross_entropy_with_integer_labels(
            z, labels, where=where, chunk_size=6
        )

    def ref(z):
        return reference(z, jnp.where(labels < 0, 0, labels), where=where)

    compare(ours, ref, (logits,), (0,), [cotangent], F32_TOL)
    if mask_kind == "rows":
        grad = jax.grad(lambda z: ours(z) @ cotangent)(logits)
        assert np.all(np.asarray(grad)[~np.asarray(keep)] == 0)


def test_chunked_batch_shape_and_axes():
    rng = np.random.default_rng(2)
    logits = jnp.asarray(rng.standard_normal((3, 7, 11)), jnp.float32)
    labels = jnp.asarray(rng.integers(0, 11, (3, 7)))
    # A label of the last case indexes the flattened (7, 11) slice of its row.
    flat_labels = jnp.asarray(rng.integers(0, 77, (3,)))
    moved = jnp.moveaxis(logits, -1, 0)

    @jax.jit
    def losses(logits, moved):
        ours = functools.partial(
            chunked_softmax_cross_entropy_with_integer_labels, chunk_size=4
        )
        return (
            (ours(logits, labels), reference(logits, labels)),
            (ours(moved, labels, axis=0), reference(moved, labels, axis=0)),
            (
                ours(logits, flat_labels, axis=(1, 2)),
                reference(logits, flat_labels, axis=(1, 2)),
            ),
        )

    pairs = losses(logits, moved)
    assert pairs[0][0].shape == (3, 7)
    for got, want in pairs:
        assert_close(got, want, F32_TOL)


def test_chunked_bfloat16_logits_upcast_per_chunk():
    hidden, weights, _, labels, _, cotangent = problem()
    logits = (hidden @ weights).astype(jnp.bfloat16)

    def ours(z):
        return chunked_softmax_cross_entropy_with_integer_labels(
            z, labels, chunk_size=8
        )

    # The upcast is exact, so the values agree as in float32; the gradient
    # is rounded once to bfloat16.
    compare(
        ours,
        lambda z: reference(z, labels),
        (logits,),
        (0,),
        [cotangent],
        F32_TOL,
        BF16_TOL,
    )


# ------------------------------------------------------------------ fused


def fused_and_reference(labels, keep, **chunks):
    def ours(h, w, b):
        return fused_linear_softmax_cross_entropy(
            h, w, labels, bias=b, where=keep, **chunks
        )

    def ref(h, w, b):
        logits = h.astype(jnp.float32) @ w.astype(jnp.float32) + b
        return reference(logits, jnp.where(keep, labels, 0), where=keep)

    return ours, ref


@pytest.mark.parametrize(
    "chunks",
    [
        {"token_chunk": 8},  # 37 tokens: the last chunk overlaps
        {"token_chunk": 8, "vocab_chunk": 16},  # 50 classes: so does the last
        {"token_chunk": 64, "vocab_chunk": 7},  # one chunk of all 37 tokens
    ],
)
def test_fused_matches_optax_values_and_grads(chunks):
    hidden, weights, bias, labels, keep, cotangent = problem()
    labels = jnp.where(keep, labels, -100)
    ours, ref = fused_and_reference(labels, keep, **chunks)
    # A masked mean (the saved gradients are scaled) and per-token weights
    # (the weights' gradient is recomputed).
    mean = jnp.full(labels.shape, 1 / keep.sum(), jnp.float32)
    compare(ours, ref, (hidden, weights, bias), (0, 1, 2), [mean, cotangent], F32_TOL)


def test_fused_default_chunks_batch_shape_and_no_bias():
    hidden, weights, _, labels, _, cotangent = problem(tokens=30)
    hidden, labels = hidden.reshape(5, 6, 16), labels.reshape(5, 6)
    cotangent = cotangent[:30].reshape(5, 6)

    def ours(h, w):
        return jnp.sum(fused_linear_softmax_cross_entropy(h, w, labels) * cotangent)

    def ref(h, w):
        return jnp.sum(reference(h @ w, labels) * cotangent)

    (value, grads), (ref_value, ref_grads) = jax.jit(
        lambda *a: [jax.value_and_grad(f, argnums=(0, 1))(*a) for f in (ours, ref)]
    )(hidden, weights)
    assert_close(value, ref_value, F32_TOL)
    assert grads[0].shape == (5, 6, 16)
    for got, want in zip(grads, ref_grads, strict=True):
        assert_close(got, want, F32_TOL)


def test_fused_differentiates_only_what_is_asked():
    hidden, weights, bias, labels, keep, cotangent = problem()
    ours, ref = fused_and_reference(labels, keep, token_chunk=8)

    @jax.jit
    def grads(*args):
        return [
            [
                jax.grad(lambda *a, f=f: f(*a) @ cotangent, argnums=i)(*args)
                for i in range(3)
            ]
            for f in (ours, ref)
        ]

    got, want = grads(hidden, weights, bias)
    for g, w in zip(got, want, strict=True):
        assert_close(g, w, F32_TOL)


def test_fused_under_vmap():
    hidden, weights, _, labels, _, _ = problem(tokens=24)
    hidden, labels = hidden.reshape(3, 8, 16), labels.reshape(3, 8)

    def loss(h, y):
        per_token = fused_linear_softmax_cross_entropy(h, weights, y, token_chunk=3)
        return per_token.mean()

    def ref(h, y):
        return reference(h @ weights, y).mean()

    got, want = jax.jit(
        lambda h, y: [jax.vmap(jax.grad(f))(h, y) for f in (loss, ref)]
    )(hidden, labels)
    assert_close(got, want, F32_TOL)


def test_fused_bfloat16_inputs_accumulate_in_float32():
    hidden, weights, bias, labels, keep, cotangent = problem(dtype=jnp.bfloat16)
    ours, ref = fused_and_reference(labels, keep, token_chunk=8, vocab_chunk=16)
    mean = jnp.full(labels.shape, 1 / keep.sum(), jnp.float32)

    def upcast_ref(*args):
        return ref(*(x.astype(jnp.float32) for x in args))

    compare(
        ours,
        upcast_ref,
        (hidden, weights, bias),
        (0, 1, 2),
        [mean, cotangent],
        F32_TOL,
        BF16_TOL,
    )


# ----------------------------------------------------------------- memory

TOKENS, DIM, VOCAB = 1024, 32, 4096
LOGITS_F32_BYTES = TOKENS * VOCAB * 4  # 16 MiB


def temp_bytes(fn, *args):
    compiled = jax.jit(fn).lower(*args).compile()
    return compiled.memory_analysis().temp_size_in_bytes


def test_fused_program_never_holds_the_logits():
    h = jax.ShapeDtypeStruct((TOKENS, DIM), jnp.float32)
    w = jax.ShapeDtypeStruct((DIM, VOCAB), jnp.float32)
    y = jax.ShapeDtypeStruct((TOKENS,), jnp.int32)

    def ours(h, w, y):
        return fused_linear_softmax_cross_entropy(h, w, y, token_chunk=64).mean()

    def plain(h, w, y):
        return optax.softmax_cross_entropy_with_integer_labels(h @ w, y).mean()

    grad = jax.value_and_grad
    ours_bytes = temp_bytes(grad(ours, argnums=(0, 1)), h, w, y)
    plain_bytes = temp_bytes(grad(plain, argnums=(0, 1)), h, w, y)
    assert plain_bytes >= LOGITS_F32_BYTES  # the reference does hold them
    # Live at once: a token chunk's float32 logits, their softmax, its
    # gradient and, where older XLA (jaxlib 0.5) does not fuse the label
    # comparison, the int32 class index: 4 chunk-sized buffers (jaxlib 0.10
    # keeps 2). Plus, where XLA copies the scan's carry, the weight and hidden
    # gradients being accumulated (DIM x VOCAB and TOKENS x DIM). That is 29%
    # of the logits; one float32 copy of them would not fit.
    chunk_bytes = 64 * VOCAB * 4
    carry_bytes = (DIM * VOCAB + TOKENS * DIM) * 4
    assert ours_bytes <= 4 * chunk_bytes + carry_bytes, ours_bytes


def test_chunked_program_holds_no_float32_copy_of_the_logits():
    z = jax.ShapeDtypeStruct((TOKENS, VOCAB), jnp.bfloat16)
    y = jax.ShapeDtypeStruct((TOKENS,), jnp.int32)
    chunk = 64

    def ours(z, y):
        return chunked_softmax_cross_entropy_with_integer_labels(
            z, y, chunk_size=chunk
        ).mean()

    def upcast(z, y):
        z = z.astype(jnp.float32)
        return optax.softmax_cross_entropy_with_integer_labels(z, y).mean()

    compiled = jax.jit(jax.value_and_grad(ours)).lower(z, y).compile()
    assert f"f32[{TOKENS},{VOCAB}]" not in compiled.as_text()
    # The bfloat16 gradient is an output, not a temporary. The temporaries
    # are a few float32 chunks (4 at most: logits, softmax, gradient and,
    # unfused on jaxlib 0.5, the int32 class index), the per-token vectors
    # (losses, labels, maxima, normalizers, their cotangents and the loop's
    # copies of them: 16 float32 vectors of TOKENS allowed, 0.4% of the
    # logits) and, on CPU with jaxlib 0.5, one copy of the logits' bits (its
    # CPU backend cannot slice bfloat16 in place; jaxlib 0.10 needs none):
    # together 3/4 of the float32 logits that the plain formulation holds.
    allowed = TOKENS * VOCAB * 2 + 4 * chunk * VOCAB * 4 + 16 * TOKENS * 4
    ours_bytes = compiled.memory_analysis().temp_size_in_bytes
    assert ours_bytes <= allowed, ours_bytes
    assert temp_bytes(jax.value_and_grad(upcast), z, y) >= LOGITS_F32_BYTES


# ----------------------------------------------------------------- errors


def test_bad_arguments_raise():
    hidden, weights, _, labels, _, _ = problem()
    with pytest.raises(ValueError, match="chunk_size"):
        chunked_softmax_cross_entropy_with_integer_labels(
            hidden @ weights, labels, chunk_size=0
        )
    with pytest.raises(ValueError, match="labels"):
        chunked_softmax_cross_entropy_with_integer_labels(hidden @ weights, labels[1:])
    with pytest.raises(ValueError, match="integers"):
        chunked_softmax_cross_entropy_with_integer_labels(hidden, hidden[:, 0])
    with pytest.raises(ValueError, match="multiply"):
        fused_linear_softmax_cross_entropy(hidden, weights.T, labels)
    with pytest.raises(ValueError, match="vocab_chunk"):
        fused_linear_softmax_cross_entropy(hidden, weights, labels, vocab_chunk=-1)
    with pytest.raises(ValueError, match="bias"):
        fused_linear_softmax_cross_entropy(hidden, weights, labels, bias=jnp.zeros(3))


def test_no_tokens_gives_an_empty_loss():
    empty = fused_linear_softmax_cross_entropy(
        jnp.zeros((0, 4)), jnp.zeros((4, 5)), jnp.zeros((0,), jnp.int32)
    )
    assert empty.shape == (0,)
    empty = chunked_softmax_cross_entropy_with_integer_labels(
        jnp.zeros((2, 0, 5)), jnp.zeros((2, 0), jnp.int32)
    )
    assert empty.shape == (2, 0)
