"""Linear algebra used by optimizers: power iteration, inverse p-th roots, NNLS."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from .. import tree as gtree


def _normalized(v: Any) -> Any:
    return gtree.scale(1.0 / gtree.norm(v), v)


def power_iteration(
    matrix: jax.Array | Callable[[Any], Any],
    *,
    v0: Any = None,
    num_iters: Any = 100,
    error_tolerance: Any = 1e-6,
    precision: lax.Precision = lax.Precision.HIGHEST,
    key: jax.Array | None = None,
) -> tuple[jax.Array, Any]:
    r"""The dominant eigenvalue and eigenvector, by power iteration.

    Repeats :math:`v \leftarrow A v / \|A v\|` and :math:`\lambda = \langle v,
    A v\rangle` until :math:`\|A v - \lambda v\| / |\lambda|` is below
    `error_tolerance` or `num_iters` products were taken.

    Args:
      matrix: a square matrix, or a function computing a matrix-vector
        product on a tree.
      v0: the starting vector (a tree like the function's input when
        `matrix` is a function, where it is required). Default for an
        array: uniform in [-1, 1] drawn with `key`.
      num_iters: the largest number of iterations.
      error_tolerance: the relative residual at which to stop.
      precision: precision of the matrix products (for an array `matrix`).
      key: random key for the default `v0` (default: `jax.random.key(0)`).

    Returns:
      `(eigenvalue, eigenvector)`, the eigenvector normalized.

    Raises:
      ValueError: if `matrix` is a function and `v0` is missing.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> eig, vec = gradax.power_iteration(jnp.diag(jnp.array([1.0, 3.0])))
      >>> round(float(eig), 4)
      3.0
    """
    if callable(matrix):
        mvp = matrix
        if v0 is None:
            raise ValueError("power_iteration needs v0 when matrix is a function")
    else:

        def mvp(v):
            return jnp.matmul(matrix, v, precision=precision)

        if v0 is None:
            key = jax.random.key(0) if key is None else key
            v0 = jax.random.uniform(
                key, matrix.shape[-1:], matrix.dtype, minval=-1.0, maxval=1.0
            )
    v0 = _normalized(v0)
    z0 = mvp(v0)

    def keep_going(carry):
        vec, z, eig, i = carry
        residual = gtree.norm(gtree.sub(z, gtree.scale(eig, vec)))
        return ~(jnp.abs(residual / eig) < error_tolerance) & (i < num_iters)

    def step(carry):
        _, z, _, i = carry
        vec = _normalized(z)
        z = mvp(vec)
        return vec, z, gtree.vdot(vec, z), i + 1

    start = (v0, z0, jnp.zeros_like(gtree.vdot(v0, z0)), jnp.asarray(0))
    _, z, eig, _ = lax.while_loop(keep_going, step, start)
    return eig, _normalized(z)


def _matrix_power(m: jax.Array, p: int, precision: Any) -> jax.Array:
    """`m**p` for a positive integer `p`, by repeated squaring."""
    if p == 1:
        return m
    if p % 2 == 0:
        half = _matrix_power(m, p // 2, precision)
        return jnp.matmul(half, half, precision=precision)
    return jnp.matmul(m, _matrix_power(m, p - 1, precision), precision=precision)


def matrix_inverse_pth_root(
    matrix: jax.Array,
    p: Any,
    num_iters: Any = 100,
    ridge_epsilon: Any = 1e-6,
    error_tolerance: Any = 1e-6,
    precision: lax.Precision = lax.Precision.HIGHEST,
) -> tuple[jax.Array, Any]:
    r"""`(matrix + ridge I)**(-1/p)` of a symmetric PSD matrix, by coupled Newton.

    With :math:`\epsilon = \text{ridge\_epsilon} \cdot \max(\lambda_{max},
    10^{-16})` (:math:`\lambda_{max}` from :func:`power_iteration`),
    :math:`A = \text{matrix} + \epsilon I`, :math:`z = (1 + p) / (2
    \|A\|_F)`, start from :math:`M_0 = z A`, :math:`H_0 = z^{1/p} I` and
    repeat, with :math:`\alpha = -1/p`,

    .. math::
      X_k = (1 - \alpha) I + \alpha M_k,\quad M_{k+1} = X_k^p M_k,\quad
      H_{k+1} = H_k X_k

    while :math:`\max|M_k - I|` exceeds `error_tolerance` and keeps
    decreasing (by less than a factor 1.2 growth); the last iterate that
    decreased the error is returned.

    Differences from optax: a Python integer `p` may be any positive
    integer (optax computes :math:`X^p` only for p in 1, 2, 4, 8; so does
    gradax when `p` is an array).

    Args:
      matrix: a symmetric positive semi-definite matrix.
      p: the root, a positive integer.
      num_iters: the largest number of iterations.
      ridge_epsilon: relative ridge added to the diagonal.
      error_tolerance: stop when :math:`\max|M_k - I|` is below it.
      precision: precision of the matrix products.

    Returns:
      `(root, error)`: the inverse p-th root (dtype of `matrix`) and
      :math:`\max|M - I|` at the end.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> root, _ = gradax.matrix_inverse_pth_root(jnp.diag(jnp.array([4.0, 16.0])), 2)
      >>> jnp.round(jnp.diag(root), 3)
      Array([0.5 , 0.25], dtype=float32)

    References:
      Higham, Functions of Matrices: Theory and Computation, SIAM 2008,
      eq. 7.18.
    """
    size = matrix.shape[0]
    dtype = jnp.promote_types(matrix.dtype, jnp.float32)
    alpha = jnp.asarray(-1.0 / p, jnp.float32)
    eye = jnp.eye(size, dtype=dtype)
    max_ev, _ = power_iteration(
        matrix, num_iters=100, error_tolerance=1e-6, precision=precision
    )
    ridge = ridge_epsilon * jnp.maximum(max_ev, 1e-16)
    if size == 1:
        return (matrix + ridge) ** alpha, 0

    if isinstance(p, int) and not isinstance(p, bool):
        if p < 1:
            raise ValueError(f"p must be a positive integer, got {p!r}")

        def power(x):
            return _matrix_power(x, p, precision)
    else:
        branches = [lambda x, k=k: _matrix_power(x, 2**k, precision) for k in range(4)]

        def power(x):
            index = jnp.asarray(jnp.round(jnp.log2(p)), jnp.int32)
            return lax.switch(index, branches, x)

    def keep_going(carry):
        i, _, _, _, error, improving = carry
        return (i < num_iters) & (error > error_tolerance) & improving

    def step(carry):
        i, m, h, _, error, _ = carry
        x = (1 - alpha) * eye + alpha * m
        new_m = jnp.matmul(power(x), m, precision=precision)
        new_h = jnp.matmul(h, x, precision=precision)
        new_error = jnp.max(jnp.abs(new_m - eye))
        return i + 1, new_m, new_h, h, new_error, new_error < error * 1.2

    damped = matrix + ridge * eye
    z = (1 + p) / (2 * jnp.linalg.norm(damped))
    m0 = damped * z
    h0 = eye * jnp.power(z, 1.0 / p)
    start = (0, m0, h0, h0, jnp.max(jnp.abs(m0 - eye)), True)
    _, m, h, previous_h, _, improving = lax.while_loop(keep_going, step, start)
    error = jnp.max(jnp.abs(m - eye))
    kept = jnp.asarray(improving, previous_h.dtype)
    root = kept * h + (1 - kept) * previous_h
    return jnp.asarray(root, matrix.dtype), error


def nnls(
    A: jax.Array,  # noqa: N803 - optax's argument names
    b: jax.Array,
    iters: int,
    unroll: int | bool = 1,
    L: Any = None,  # noqa: N803
) -> jax.Array:
    r"""Non-negative least squares: :math:`\min_{x \ge 0} \|A x - b\|_2`.

    Fast projected gradient (Polyak 2015): with :math:`Q = A^T A`,
    :math:`q = A^T b`, :math:`L` a bound on the spectral radius of :math:`Q`
    and :math:`c_0 = 0`, :math:`x_0 = y_0 = 0`,

    .. math::
      c_{k+1} = \tfrac{1 + \sqrt{1 + 4 c_k^2}}{2},\quad
      x_{k+1} = \max(y_k - (Q y_k - q) / L, 0),\quad
      y_{k+1} = x_{k+1} + \tfrac{c_k - 1}{c_{k+1}} (x_{k+1} - x_k).

    Args:
      A: a matrix of shape `(M, N)`.
      b: a vector `(M,)` or matrix `(M, K)`.
      iters: the number of iterations.
      unroll: `unroll` of the `lax.scan` over iterations.
      L: an upper bound on the spectral radius of :math:`A^T A` (default:
        the smaller of its Frobenius norm and its 1-norm).

    Returns:
      The solution, of shape `(N,)` or `(N, K)`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> A = jnp.array([[1.0, 0.0], [0.0, 1.0]])
      >>> gradax.nnls(A, jnp.array([2.0, -1.0]), iters=50)
      Array([2., 0.], dtype=float32)

    References:
      Polyak, Projected gradient method for non-negative least square,
      Contemporary Mathematics 636, 2015.
    """
    if A.ndim != 2 or b.ndim not in (1, 2) or b.shape[0] != A.shape[0]:
        raise ValueError(
            f"nnls needs A of shape (M, N) and b of shape (M,) or (M, K); got "
            f"{A.shape} and {b.shape}"
        )
    Q = A.mT @ A  # noqa: N806
    q = A.mT @ b
    if L is None:
        L = jnp.minimum(  # noqa: N806
            jnp.linalg.matrix_norm(Q, ord="fro"),
            jnp.linalg.matrix_norm(Q, ord=1) if Q.size else 0,
        )
    L = jnp.where(L == 0, 1, L)  # noqa: N806

    def step(carry, _):
        x, y, c = carry
        c_next = (1 + jnp.sqrt(1 + 4 * c**2)) / 2
        x_next = jnp.clip(y - (Q @ y - q) / L, 0)
        y_next = x_next + (c - 1) / c_next * (x_next - x)
        return (x_next, y_next, c_next), None

    x0 = jnp.zeros_like(b, shape=A.shape[-1:] + b.shape[1:])
    (x, _, _), _ = lax.scan(step, (x0, x0, 0.0), length=iters, unroll=unroll)
    return x
