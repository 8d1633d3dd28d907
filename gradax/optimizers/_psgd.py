"""The Kronecker-factored PSGD preconditioner (Kron) on one tensor.

A tensor `G` of rank `r` has one factor `Q_i` per axis: an upper
triangular `(n_i, n_i)` matrix, or a diagonal stored as a vector `(n_i,)`.
`Q` acts on `G` by multiplying each axis by its factor (`Q G`), and the
preconditioner is `P = Q^H Q`. Everything here works on a single tensor;
the optimizer maps it over leaves and `vmap`s it over stacked layers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

MEMORY_SAVE_MODES = (None, "one_diag", "smart_one_diag", "all_diag")
# The spectral-norm lower bounds the factor step can divide by: psgd-jax's
# (two power steps) and gradax's earlier rule (one step).
NORM_LOWER_BOUNDS = ("two_step", "one_step")
HIGHEST = jax.lax.Precision.HIGHEST


def diagonal_axes(
    shape: Sequence[int],
    max_size_triangular: int,
    min_ndim_triangular: int,
    memory_save_mode: str | None,
) -> tuple[bool, ...]:
    """For each axis of `shape`, whether its factor is diagonal.

    Diagonal: an axis of size 1, one longer than `max_size_triangular`,
    every axis of a tensor of rank below `min_ndim_triangular`, and the
    axes the memory-saving mode picks ("one_diag": the largest axis, the
    last of equals; "smart_one_diag": in a tensor of rank >= 2, the largest
    axis only when it is strictly the largest; "all_diag": every axis).
    """
    shape = tuple(shape)
    diagonal = [
        n == 1 or n > max_size_triangular or len(shape) < min_ndim_triangular
        for n in shape
    ]
    if shape and memory_save_mode == "all_diag":
        diagonal = [True] * len(shape)
    elif shape and memory_save_mode == "one_diag":
        diagonal[int(np.argsort(shape, kind="stable")[-1])] = True
    elif len(shape) > 1 and memory_save_mode == "smart_one_diag":
        order = np.argsort(shape, kind="stable")
        if shape[order[-1]] > shape[order[-2]]:
            diagonal[int(order[-1])] = True
    return tuple(diagonal)


def init_factors(shape, diagonal, scale, dtype) -> tuple[jax.Array, ...]:
    """`scale**(1/r) I` per axis, as a matrix or a diagonal vector."""
    per_axis = scale ** (1.0 / max(len(shape), 1))
    return tuple(
        per_axis * (jnp.ones(n, dtype) if diag else jnp.eye(n, dtype=dtype))
        for n, diag in zip(shape, diagonal, strict=True)
    )


def _along(x: jax.Array, axis: int, fn: Callable) -> jax.Array:
    """Apply `fn` to `x` unfolded as `(n_axis, everything else)`."""
    moved = jnp.moveaxis(x, axis, 0)
    out = fn(moved.reshape(moved.shape[0], -1)).reshape(moved.shape)
    return jnp.moveaxis(out, 0, axis)


def _mm(a: jax.Array, b: jax.Array) -> jax.Array:
    return jnp.matmul(a, b, precision=HIGHEST)


def _ct(a: jax.Array) -> jax.Array:
    return jnp.conj(a).T


def apply_q(factors, x: jax.Array) -> jax.Array:
    """`Q x`: each axis multiplied by its factor."""
    for axis, q in enumerate(factors):
        if q.ndim == 1:
            x = _along(x, axis, lambda m, q=q: q[:, None] * m)
        else:
            x = _along(x, axis, lambda m, q=q: _mm(q, m))
    return x


def solve_qh(factors, x: jax.Array) -> jax.Array:
    """`Q^{-H} x`: each axis solved against its factor's adjoint."""

    def solve(m, q):
        return jax.lax.linalg.triangular_solve(
            q, m, left_side=True, lower=False, transpose_a=True, conjugate_a=True
        )

    for axis, q in enumerate(factors):
        if q.ndim == 1:
            x = _along(x, axis, lambda m, q=q: m / jnp.conj(q)[:, None])
        else:
            x = _along(x, axis, lambda m, q=q: solve(m, q))
    return x


def precondition(factors, g: jax.Array) -> jax.Array:
    """`P g = Q^H Q g`, axis by axis."""
    for axis, q in enumerate(factors):
        if q.ndim == 1:
            x = jnp.abs(q) ** 2
            g = _along(g, axis, lambda m, x=x: x[:, None].astype(m.dtype) * m)
        else:
            g = _along(g, axis, lambda m, q=q: _mm(_ct(q), _mm(q, m)))
    return g


def _gram(x: jax.Array, axis: int, diagonal: bool) -> jax.Array:
    """`X_i X_i^H` of `x` unfolded along `axis` (its diagonal if asked)."""
    moved = jnp.moveaxis(x, axis, 0)
    m = moved.reshape(moved.shape[0], -1)
    if diagonal:
        return jnp.sum(jnp.abs(m) ** 2, axis=1)
    return _mm(m, _ct(m))


def norm_lower_bound(a: jax.Array, rule: str = "two_step") -> jax.Array:
    """A lower bound of the spectral norm of Hermitian `a`, cheaply.

    From `x`, the column of `a` with the largest norm: `||a (a x)|| /
    ||a x||` (`rule="two_step"`, two power steps, as psgd-jax and
    kron_torch compute it) or `||a x|| / ||x||` (`"one_step"`, which can
    be lower by a few percent). `a` is first scaled by its largest entry
    so that squares neither overflow nor underflow. 0 for a zero matrix.
    """
    if rule not in NORM_LOWER_BOUNDS:
        raise ValueError(f"norm lower bound rule must be one of {NORM_LOWER_BOUNDS}")
    top = jnp.max(jnp.abs(a))
    safe_top = jnp.where(top > 0, top, 1)
    b = a / safe_top.astype(a.dtype)
    column = jnp.argmax(jnp.sum(jnp.abs(b) ** 2, axis=0))
    x = b[:, column]
    if rule == "two_step":
        x = _mm(b, x)
    x_norm = jnp.linalg.norm(x)
    bound = jnp.linalg.norm(_mm(b, x)) / jnp.where(x_norm > 0, x_norm, 1)
    return jnp.where(top > 0, top * bound, 0.0)


def update_factors(
    factors, g: jax.Array, v: jax.Array, lr, norm_bound: str = "two_step"
) -> tuple[jax.Array, ...]:
    """One step on each factor towards `P = (E[g g^H])^{-1/2}`.

    With `A = Q g` and `B = Q^{-H} v` (`v` standard normal), the
    criterion `E[g^H P g + v^H P^{-1} v]` has, on the group of triangular
    matrices, the gradient `triu(A_i A_i^H - B_i B_i^H) Q_i` for axis `i`
    (`A_i` unfolded along it); each factor steps against it with the
    step size `lr` divided by a lower bound of
    `||A_i A_i^H + B_i B_i^H||` (:func:`norm_lower_bound` by the rule
    `norm_bound`; the largest entry, for a diagonal).
    """
    a = apply_q(factors, g)
    b = solve_qh(factors, v)
    new = []
    for axis, q in enumerate(factors):
        diagonal = q.ndim == 1
        term1, term2 = _gram(a, axis, diagonal), _gram(b, axis, diagonal)
        tiny = jnp.finfo(term1.dtype).tiny
        if diagonal:
            scale = lr / (jnp.max(jnp.abs(term1 + term2)) + tiny)
            q = q - (scale * (term1 - term2)).astype(q.dtype) * q
        else:
            bound = norm_lower_bound(term1 + term2, norm_bound)
            scale = lr / (bound + tiny)
            step = jnp.triu(term1 - term2) * scale.astype(term1.dtype)
            q = q - _mm(step.astype(q.dtype), q)
        new.append(q)
    return tuple(new)


def balance(factors) -> tuple[jax.Array, ...]:
    """Rescale the factors to equal largest entries; `Q` is unchanged.

    Each factor is multiplied by `geometric_mean / its_largest_entry`; the
    multipliers' product is 1. Factors with a zero largest entry are left.
    """
    if len(factors) < 2:
        return tuple(factors)
    # initial=0: a factor of a side of length 0 has no entries (its largest
    # is then 0, and nothing is rescaled); |q| >= 0 leaves the rest alone.
    norms = jnp.stack(
        [jnp.max(jnp.abs(q), initial=0).astype(jnp.float32) for q in factors]
    )
    positive = jnp.all(norms > 0)
    safe = jnp.where(positive, norms, 1.0)
    mean = jnp.exp(jnp.mean(jnp.log(safe)))
    return tuple(
        q * jnp.where(positive, mean / n, 1.0).astype(q.dtype)
        for q, n in zip(factors, safe, strict=True)
    )


def trust_region(x: jax.Array, scale) -> jax.Array:
    """psgd-jax's soft clip: `s (0.1 log(1 + r/s) + 0.9 tanh(r/s))` along `x`.

    `r = |x|`; about `r` for small entries, growing only
    logarithmically past `s`. Complex entries keep their phase.
    """
    r = jnp.abs(x)
    positive = r > 0
    phase = jnp.where(positive, x / jnp.where(positive, r, 1).astype(x.dtype), 0)
    s = jnp.asarray(scale, r.dtype)
    magnitude = s * (0.1 * jnp.log1p(r / s) + 0.9 * jnp.tanh(r / s))
    return phase * magnitude.astype(x.dtype)
