"""Orthogonalization: the approximate polar factor by Newton–Schulz iteration.

`orthogonalize(G)` maps `G = U S V^T` to about `U V^T`. It works on the
wide orientation (so the Gram matrix `X X^T` is the small one), normalizes,
then applies a quintic per step. Leading axes are batch axes: a stack of
same-shape matrices is one batched iteration, not a loop.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

from .._core.leaf_ops import arithmetic, cast
from . import _symmetric as symmetric
from .coefficients import resolve_coefficients

NORMALIZATIONS = ("frobenius", "spectral", "schatten", "none")
PRECONDITIONERS = (None, "aol")
METHODS = ("auto", "ns", "gram", "symmetric", "gram_symmetric")
PRECISIONS = (None, "float32", "highest", "bfloat16", "float16")

# Gram Newton–Schulz recomputes X and its Gram matrix after this many steps,
# which stops rounding errors in the accumulated product from growing.
_GRAM_RESTART_STEP = 2


def _mT(x: jax.Array) -> jax.Array:  # noqa: N802 - the usual math name
    """Conjugate transpose of the last two axes."""
    # The primitives `jnp.swapaxes` and `jnp.conj` end in, called directly.
    turned = jax.lax.transpose(x, (*range(x.ndim - 2), x.ndim - 1, x.ndim - 2))
    return jax.lax.conj(turned) if jnp.iscomplexobj(x) else turned


def _work_dtype_and_precision(dtype: Any, precision: str | None):
    if precision is None:
        return jnp.promote_types(dtype, jnp.float32), None
    if precision == "float32":
        return jnp.promote_types(dtype, jnp.float32), jax.lax.Precision.DEFAULT
    if precision == "highest":
        return jnp.promote_types(dtype, jnp.float32), jax.lax.Precision.HIGHEST
    return jnp.dtype(precision), None


def _normalize(x, normalization, norm_factor, eps):
    if normalization == "none":
        return x
    if normalization == "frobenius":
        wide = jnp.abs(x).astype(jnp.promote_types(x.dtype, jnp.float32))
        norm = jnp.sqrt(jnp.sum(wide**2, axis=(-2, -1), keepdims=True))
    elif normalization == "schatten":
        # Schatten-4 norm: ||X||_4 = ||X X^T||_F^(1/2); bounds the spectral
        # norm more tightly than Frobenius does.
        gram = jnp.matmul(x, _mT(x))
        squared = jnp.sqrt(jnp.sum(jnp.abs(gram) ** 2, axis=(-2, -1), keepdims=True))
        return x * jax.lax.rsqrt(jnp.maximum(squared, eps)).astype(x.dtype)
    else:
        norm = jnp.linalg.norm(x, ord=2, axis=(-2, -1), keepdims=True)
    return x / (norm * norm_factor + eps).astype(x.dtype)


def _aol_scale(x, gram, eps):
    """AOL: rows scaled by (sum_j |A_ij|)^(-1/2) make the spectral norm <= 1."""
    row_sums = jnp.maximum(jnp.sum(jnp.abs(gram), axis=-1), eps)
    s = jax.lax.rsqrt(row_sums)[..., :, None]
    return x * s, gram * s * jnp.swapaxes(s, -1, -2)


def _combine(*terms):
    """`sum(coefficient * array)` evaluated in at least float32.

    In bfloat16 a Python coefficient would first be rounded to bfloat16
    (3.4445 -> 3.4375), which visibly changes the polynomial; torch computes
    such products in float32 and rounds only the result, and so do we.
    """
    dtype = terms[0][1].dtype
    wide = jnp.promote_types(dtype, jnp.float32)
    # A Python coefficient stays a number; an array (traced coefficients)
    # takes `wide`'s real dtype, so it neither widens nor narrows the step.
    real = jnp.finfo(wide).dtype
    coefficients, arrays = [], []
    for coef, arr in terms:  # a loop, not helpers: this runs at every step
        if not isinstance(coef, (int, float)):
            coef = jnp.asarray(coef).astype(real)
        coefficients.append(coef)
        same = arr.dtype == wide and not jax.typeof(arr).weak_type
        arrays.append(arr if same else arr.astype(wide))
    op, coefficients = arithmetic(arrays, coefficients)
    total = None
    for coef, arr in zip(coefficients, arrays, strict=True):
        product = op.mul(coef, arr)
        total = product if total is None else op.add(total, product)
    return cast(total, dtype)


def _plain_ns(x, table, precondition, eps, mm, hermitian=None, square=None):
    """Newton–Schulz; `hermitian(l, r)`, when given, takes `l @ r^H` for
    `A = X X^H`, and `square(l, r)` for `A A`: the two products known to
    be Hermitian. With either, the steps run in a loop
    (`symmetric.loop_rows`: each blocked product compiled once, not once a
    step)."""

    def step(x, row, first):
        a, b, c = row
        gram = mm(x, _mT(x)) if hermitian is None else hermitian(x, x)
        if first and precondition == "aol":
            x, gram = _aol_scale(x, gram, eps)
        squared = mm(gram, gram) if square is None else square(gram, gram)
        poly = _combine((b, gram), (c, squared))
        return _combine((a, x), (1.0, mm(poly, x)))

    if hermitian is None and square is None:
        for index, row in enumerate(table):
            x = step(x, row, index == 0)
        return x
    # AOL rescales in the first step only: that step runs before the loop.
    first = 1 if precondition == "aol" else 0
    for row in table[:first]:
        x = step(x, row, True)
    rest = table[first:]
    return symmetric.loop_rows(
        lambda x, row, _: step(x, row, False), x, rest, _real_dtype(x)
    )


def _real_dtype(x):
    """The real dtype `_combine` casts array coefficients to for `x`."""
    return jnp.finfo(jnp.promote_types(x.dtype, jnp.float32)).dtype


def _gram_ns(x, table, precondition, eps, mm, hermitian=None, small=None):
    """Newton–Schulz on the small Gram matrix, applying the product once.

    With `R = X X^T` and `P = a I + b R + c R^2`, one step is
    `X <- P X`, so `R <- P R P` and the accumulated `Q <- P Q`; X itself
    is touched only at the end (and at the restart).

    `hermitian(l, r)`, when given, takes `l @ r^H` for `X X^H`, and
    `small(l, r)` for every product of two small matrices: all of them
    are polynomials in the first Gram matrix, so they commute and their
    products are Hermitian. With `small` the steps run in a loop
    (:func:`_gram_ns_looped`).
    """
    m = x.shape[-1 if x.shape[-2] > x.shape[-1] else -2]
    # Broadcast to the stack's shape, not left to the addition: a program
    # run with jax_numpy_rank_promotion="raise" refuses implicit ranks.
    eye = jnp.broadcast_to(jnp.eye(m, dtype=x.dtype), (*x.shape[:-2], m, m))
    if small is not None:
        return _gram_ns_looped(x, table, precondition, eps, mm, small, eye)

    def sym(a, b):
        return mm(a, _mT(b)) if hermitian is None else hermitian(a, b)

    # The plain path keeps its historical products (a @ b, not a @ b^H).
    small = mm
    gram = sym(x, x)
    if precondition == "aol":
        x, gram = _aol_scale(x, gram, eps)
    q = None
    last = len(table) - 1
    for step, (a, b, c) in enumerate(table):
        if step == _GRAM_RESTART_STEP and q is not None:
            x = mm(q, x)
            gram = sym(x, x)
            q = None
        poly = _combine((a, eye), (b, gram), (c, small(gram, gram)))
        q = poly if q is None else small(poly, q)
        if step < last:
            gram = small(poly, small(gram, poly))
    return x if q is None else mm(q, x)


def _gram_ns_looped(x, table, precondition, eps, mm, hermitian, eye):
    """:func:`_gram_ns` with the symmetric products, its steps in one loop.

    Each product is then traced and compiled once, not once a step
    (see gradax/orthogonal/_symmetric.py). What the unrolled iteration
    decides by the step's number is a branch here (`lax.cond`), taken
    the same way: the restart (`X <- Q X` and a fresh `R = X X^T`),
    `Q <- P` where `Q` starts afresh (step 0 and the restart), and no
    update of `R` after the last step. The first `R` is the restart's
    branch too, at step 0, unless AOL rescales by it first. The products
    and their order are the unrolled iteration's.
    """
    if not table:
        gram = hermitian(x, x)
        return _aol_scale(x, gram, eps)[0] if precondition == "aol" else x
    last = len(table) - 1
    restart = _GRAM_RESTART_STEP  # >= 1: Q exists by then
    if precondition == "aol":
        x, gram = _aol_scale(x, hermitian(x, x), eps)
        first_gram = restart
    else:
        gram = jnp.zeros((*x.shape[:-1], x.shape[-2]), x.dtype)
        first_gram = 0

    def step(carry, row, t):
        x, gram, q = carry
        a, b, c = row
        x = jax.lax.cond(t == restart, lambda x, q: mm(q, x), lambda x, q: x, x, q)
        gram = jax.lax.cond(
            (t == first_gram) | (t == restart),
            lambda x, gram: hermitian(x, x),
            lambda x, gram: gram,
            x,
            gram,
        )
        poly = _combine((a, eye), (b, gram), (c, hermitian(gram, gram)))
        q = jax.lax.cond(
            (t == 0) | (t == restart),
            lambda p, q: p,
            lambda p, q: hermitian(p, q),
            poly,
            q,
        )
        gram = jax.lax.cond(
            t < last,
            lambda p, g: hermitian(p, hermitian(g, p)),
            lambda p, g: g,
            poly,
            gram,
        )
        return x, gram, q

    carry = (x, gram, jnp.zeros_like(gram))
    x, _, q = symmetric.loop_rows(step, carry, table, _real_dtype(x))
    return mm(q, x)


def orthogonalize(
    x: Any,
    *,
    coefficients: Any = "keller",
    steps: int | None = None,
    eps: float = 1e-7,
    normalization: str = "frobenius",
    precondition: str | None = None,
    method: str = "auto",
    precision: str | None = None,
) -> jax.Array:
    r"""The approximate polar factor `U V^T` of a matrix or a batch of them.

    For `X_0 = G / (\|G\| \cdot f + \epsilon)` (`G` turned wide), each step
    applies `X \leftarrow a X + (b A + c A^2) X` with `A = X X^T`.

    Args:
      x: an array of shape `(..., m, n)`; leading axes are batch axes.
      coefficients: a preset — `"keller"` (alias `"standard"`), `"you5"`
        (alias `"dion"`), `"jiacheng6"`, `"polar_express"`,
        `"polar_express_fixed5"` (the five published rows, norm x 1.02:
        Dion2's reference) — or an array
        of shape `(3,)` (used at every step) or `(T, 3)` (one row a step).
      steps: number of steps (default: the preset's; a `(T, 3)` table's T;
        5 for one row). A shorter table repeats its last row.
      eps: added to the norm before dividing, so `orthogonalize(0) == 0`.
      normalization: `"frobenius"` (`f = 1.01` for Polar Express, else
        1), `"spectral"` (exact, by SVD; slow), `"schatten"` (the
        Schatten-4 norm `||X X^T||_F^{1/2}`) or `"none"`.
      precondition: None or `"aol"` (Turbo-Muon: rescale rows by the first
        Gram matrix's absolute row sums, which bounds the spectral norm by 1;
        combine with `normalization="none"`).
      method: `"ns"` (plain), `"gram"` (Gram Newton–Schulz: the same map
        with fewer FLOPs on rectangular matrices), `"symmetric"` and
        `"gram_symmetric"` (the same two, computing only the upper blocks
        of the products known to be symmetric, `X X^T` and `A A`, and
        mirroring them: Flash-Muon's saving; a Pallas kernel on GPUs in
        bfloat16 and float16) or `"auto"`: the fastest measured for the
        shape, dtype and backend that compiles about as fast as the plain
        products (:func:`auto_method`): `"gram"` when the long side is at
        least twice the short side, else `"ns"`; on the CPU in float32
        from 1024 rows (and a long side at most 16 times the short one)
        with `X X^T` alone computed by upper blocks.
      precision: None (float32, or float64 for float64 input, at the default
        matmul precision), `"float32"`, `"highest"` (float32 with
        full-precision matmuls, for TPU/GPU), `"bfloat16"` or `"float16"`
        (iterate in that dtype, as GPU references do).

    Returns:
      An array with `x`'s shape and dtype.

    Raises:
      TypeError: `x` is not a floating-point or complex array.
      ValueError: `x` has rank < 2, or an option is not known.

    Example:
      >>> import jax, jax.numpy as jnp, gradax
      >>> g = jax.random.normal(jax.random.key(0), (4, 6))
      >>> o = gradax.orthogonalize(g, coefficients="polar_express", steps=8)
      >>> bool(jnp.allclose(o @ o.T, jnp.eye(4), atol=2e-2))
      True

    References:
      Jordan et al., Muon: An optimizer for hidden layers in neural networks,
      2024 (kellerjordan.github.io/posts/muon). Amsel et al., The Polar
      Express, 2025 (arXiv:2505.16932). Boissin et al., Turbo-Muon, 2025
      (arXiv:2512.04632). Zhang, Amsel, Chen and Dao, Gram Newton–Schulz, 2026.
      Flash-Muon (github.com/nil0x9/flash-muon), 2025.
    """
    check_options(normalization, precondition, method, precision)
    table, norm_factor = resolve_coefficients(coefficients, steps)
    return orthogonalize_rows(
        x,
        [tuple(map(float, row)) for row in table],
        eps=eps,
        normalization=normalization,
        norm_factor=norm_factor,
        precondition=precondition,
        method=method,
        precision=precision,
    )


def orthogonalize_rows(
    x: Any,
    rows: Sequence[Sequence[Any]],
    *,
    eps: Any,
    normalization: str,
    norm_factor: float,
    precondition: str | None,
    method: str,
    precision: str | None,
) -> jax.Array:
    """:func:`orthogonalize` with its options resolved: one `(a, b, c)` a step.

    The iteration every entry point runs. `rows` holds Python floats
    (compile-time constants: :func:`orthogonalize`) or scalar arrays, traced
    ones included (`orthogonalize_via_newton_schulz` given the coefficients
    of optax's `MuonState`); an empty `rows` only normalizes. The options
    are those of :func:`orthogonalize`, already checked; `norm_factor`
    multiplies the Frobenius or spectral norm.
    """
    x = jnp.asarray(x)
    if x.ndim < 2:
        raise ValueError(f"orthogonalize needs an array of rank >= 2, got {x.shape}")
    if not jnp.issubdtype(x.dtype, jnp.inexact):
        # The result has x's dtype; an integer polar factor would be garbage.
        raise TypeError(
            "orthogonalize needs a floating-point or complex array (the result "
            f"has the input's dtype), got dtype {x.dtype}; convert x first, "
            "e.g. x.astype(jnp.float32)"
        )
    out_dtype = x.dtype
    work_dtype, mm_precision = _work_dtype_and_precision(x.dtype, precision)
    if jnp.iscomplexobj(x) and not jnp.issubdtype(work_dtype, jnp.complexfloating):
        work_dtype = jnp.promote_types(work_dtype, jnp.complex64)

    mm = functools.partial(jnp.matmul, precision=mm_precision)

    transposed = x.shape[-2] > x.shape[-1]
    if transposed:
        x = jnp.swapaxes(x, -1, -2)
    x = _normalize(x.astype(work_dtype), normalization, norm_factor, eps)
    m, n = x.shape[-2:]
    backend = jax.default_backend()
    auto = method == "auto"
    if auto:
        method = auto_method(m, n, work_dtype, backend)
    hermitian = small = None
    if method in ("symmetric", "gram_symmetric"):
        hermitian = symmetric.hermitian_products(m, work_dtype, mm, backend)
        # "auto" blocks `X X^H` alone, the product whose saving is largest
        # for what its loop costs to compile (see auto_method).
        small = None if auto else hermitian
    if method in ("gram", "gram_symmetric") and m < n:
        x = _gram_ns(x, rows, precondition, eps, mm, hermitian, small)
    else:
        x = _plain_ns(x, rows, precondition, eps, mm, hermitian, small)
    if transposed:
        x = jnp.swapaxes(x, -1, -2)
    return x.astype(out_dtype)


# "auto" blocks X X^T on the CPU in float32 from this many rows of the Gram
# matrix, while the long side is at most AUTO_SYMMETRIC_MAX_ASPECT times the
# short one (measured: see auto_method).
AUTO_SYMMETRIC_MIN_ROWS = 1024
AUTO_SYMMETRIC_MAX_ASPECT = 16


def auto_method(m: int, n: int, dtype: Any, backend: str) -> str:
    """The method `"auto"` runs for a wide `m x n` iteration (`m <= n`).

    `"gram"` when the long side is at least twice the short one (fewer
    FLOPs), else `"ns"`; on the CPU in float32 their `"symmetric"`
    versions from 1024 rows, where `"auto"` blocks only `X X^T`
    (:func:`orthogonalize_rows`).

    Measured (benchmarks/bench_muon_compile.py, 2-core x86 CPU under load,
    against the plain products). Newton–Schulz alone, wall time: blocking
    `X X^T` alone took 0.99 of the time on 1024x1024, 0.94 on 1024x4096,
    0.93 on 2048x2048; blocking every Hermitian product
    (`method="symmetric"`) 0.98, 0.96 and 0.86. Each blocked product is a
    compiled loop: the GPT Muon steps with every product blocked compiled
    in 1.3x (17M), 1.5x (GPT-2 small) and 1.8x (GPT-2 medium) optax's
    time; with `X X^T` alone, blocked from 512 rows, in 1.0x, 0.9x and
    1.0x. Below 1024 rows the blocked `X X^T` saved nothing measurable
    (CPU seconds per call 0.99-1.03 of the plain products' on the 17M and
    GPT-2-small trees' stacks of 512 and 768 rows), so those keep the
    plain products and compile in about 0.6x optax's time; at 256 rows
    and on 768x50257 (each block of rows read from memory twice) it lost.
    Elsewhere (GPU and TPU, other dtypes) the plain products.
    """
    gram = n >= 2 * m
    blocked = (
        backend == "cpu"
        and jnp.dtype(dtype) == jnp.dtype(jnp.float32)
        and m >= AUTO_SYMMETRIC_MIN_ROWS
        and n <= AUTO_SYMMETRIC_MAX_ASPECT * m
        and symmetric.cpu_blocks(m) > 1
    )
    if blocked:
        return "gram_symmetric" if gram else "symmetric"
    return "gram" if gram else "ns"


def check_options(normalization, precondition, method, precision) -> None:
    """ValueError naming the option when one is not known."""
    for name, value, allowed in (
        ("normalization", normalization, NORMALIZATIONS),
        ("precondition", precondition, PRECONDITIONERS),
        ("method", method, METHODS),
        ("precision", precision, PRECISIONS),
    ):
        if value not in allowed:
            raise ValueError(f"{name} must be one of {allowed}, got {value!r}")


def newton_schulz_flops(m: int, n: int, steps: int) -> int:
    """Matmul FLOPs of plain Newton–Schulz on one m x n matrix."""
    m, n = min(m, n), max(m, n)
    return steps * (4 * m * m * n + 2 * m**3)
