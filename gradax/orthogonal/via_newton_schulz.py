"""optax's Newton–Schulz entry point, `orthogonalize_via_newton_schulz`.

Code written for optax calls it from `optax.contrib._muon` directly, often
with `state.ns_coeffs` (a traced array) inside a jitted update. This is that
call on gradax's iteration (:func:`~.newton_schulz.orthogonalize_rows`): the
dimension numbers make a stack of matrices as in
:meth:`gradax.orthogonal._steps.NewtonSchulz.orthogonalize_leaf`,
`preconditioning` maps to :func:`gradax.orthogonalize`'s `normalization`
and `precondition` through
the family's one table (`PRECONDITIONING`), and the coefficients become one
row a step.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any, Literal

import jax
import jax.numpy as jnp

from ..linalg.matrices import MuonDimensionNumbers, is_dimension_numbers
from ._fields import PRECONDITIONING
from ._steps import FIRST_STEP_EPS
from .blocks import matrix_blocks
from .coefficients import coefficient_rows
from .newton_schulz import orthogonalize_rows


def _steps_from(ns_coeffs: Any, ns_steps: Any) -> Sequence[Sequence[Any]]:
    """optax's rule: (3,) runs `ns_steps` times, (n, 3) runs each row once."""
    shape = jnp.shape(ns_coeffs)
    if len(shape) not in (1, 2) or shape[-1] != 3:
        raise ValueError(
            "ns_coeffs must have shape (3,) (one row, run ns_steps times) or "
            f"(n, 3) (one row a step), got shape {shape}"
        )
    if isinstance(ns_coeffs, jax.core.Tracer):
        # Traced coefficients (optax's MuonState.ns_coeffs under jit): rows of
        # scalar arrays; the shape, and so the number of steps, is static.
        table = jnp.atleast_2d(ns_coeffs)
        rows: Sequence[Sequence[Any]] = [
            tuple(table[i, j] for j in range(3)) for i in range(table.shape[0])
        ]
    else:
        rows = coefficient_rows(ns_coeffs)
    if len(shape) == 2:
        return rows
    try:
        steps = operator.index(ns_steps)
    except TypeError:
        raise TypeError(
            "ns_steps must be a concrete integer (it sets how many steps are "
            f"unrolled), got {ns_steps!r}"
        ) from None
    if steps < 0:
        raise ValueError(f"ns_steps must be an integer >= 0, got {steps}")
    return list(rows) * steps


def orthogonalize_via_newton_schulz(
    x: jax.Array,
    ns_coeffs: jax.Array,
    ns_steps: jax.typing.ArrayLike = 5,
    preconditioning: Literal["frobenius", "spectral", "aol", "schatten"] = "frobenius",
    eps: jax.typing.ArrayLike = 1e-8,
    dimension_numbers: MuonDimensionNumbers | None = None,
) -> jax.Array:
    r"""Orthogonalize a matrix (or a weight, by its dimension numbers), as optax does.

    `optax.contrib._muon.orthogonalize_via_newton_schulz`: the same
    arguments, defaults and numbers. The (wide) matrix :math:`X_0` is
    :math:`G / (\|G\| + \epsilon)`, then each step with its coefficients
    :math:`(a, b, c)` is

    .. math::
      A = X X^\top,\quad X \leftarrow a X + (b A + c A^2) X,

    which sends each singular value :math:`s` to :math:`a s + b s^3 + c s^5`,
    about 1 after a few steps: :math:`X` approaches :math:`U V^\top` for
    :math:`G = U S V^\top`.

    Args:
      x: a matrix `(m, n)`, or a weight of any rank >= 2 with
        `dimension_numbers`.
      ns_coeffs: the coefficients `(a, b, c)`: shape (3,), used at every
        step, or (n, 3), one row a step (`ns_steps` is then ignored). An
        array, traced or not (`state.ns_coeffs` of a `MuonState`).
      ns_steps: the number of steps for (3,) coefficients, a concrete
        integer >= 0.
      preconditioning: how :math:`X_0` is made: `'frobenius'` divides by
        :math:`\|G\|_F + \epsilon`, `'spectral'` by :math:`\|G\|_2 +
        \epsilon` (by SVD), `'aol'` scales row :math:`i` of the first step
        by :math:`(\sum_j |A_{ij}|)^{-1/2}` (Turbo-Muon), `'schatten'`
        divides by :math:`\|G G^\top\|_F^{1/2}` (the Schatten-4 norm).
      eps: added to the Frobenius or spectral norm before dividing. The AOL
        and Schatten-4 scalings floor their sums at 1e-8, as optax's do.
      dimension_numbers: a :class:`MuonDimensionNumbers` (or
        :class:`MuonSplit`): which axes of `x` are the matrix's rows and
        columns; the others are batch axes, each slice orthogonalized on its
        own. Required when `x` is not 2-D; ignored when it is.

    Returns:
      An array with `x`'s shape and dtype.

    Raises:
      ValueError: `x` is not 2-D and has no dimension numbers,
        `ns_coeffs` is not of shape (3,) or (n, 3), or `preconditioning`
        is not one of the four.

    Differences from optax: a float16 or bfloat16 `x` is iterated in
    float32 (optax iterates in `x`'s dtype, its coefficients rounded to
    it); in `'schatten'` a complex `x` gets :math:`G G^H` where optax
    forms :math:`G G^\top` (and returns NaN).

    Example:
      >>> import jax, jax.numpy as jnp, gradax
      >>> g = jax.random.normal(jax.random.key(0), (4, 6))
      >>> coeffs = jnp.array([3.4445, -4.775, 2.0315])
      >>> o = gradax.orthogonalize_via_newton_schulz(g, coeffs, ns_steps=5)
      >>> s = jnp.linalg.svd(o, compute_uv=False)
      >>> bool(jnp.all((s > 0.6) & (s < 1.2)))
      True

    References:
      Jordan et al., Muon: An optimizer for hidden layers in neural networks,
      2024 (kellerjordan.github.io/posts/muon). Boissin et al., Turbo-Muon,
      2025 (arXiv:2512.04632).
    """
    x = jnp.asarray(x)
    if x.ndim == 2:
        dimension_numbers = MuonDimensionNumbers(reduction_axis=0, output_axis=1)
    elif not is_dimension_numbers(dimension_numbers):
        raise ValueError(
            f"x must be a matrix (m, n), or dimension_numbers must say which axes "
            f"of x form the matrix; got x of shape {x.shape} and "
            f"dimension_numbers={dimension_numbers!r}"
        )
    rows = _steps_from(ns_coeffs, ns_steps)
    if preconditioning not in PRECONDITIONING:
        raise ValueError(
            f"preconditioning must be one of {tuple(PRECONDITIONING)}, got "
            f"{preconditioning!r}"
        )
    normalization, precondition = PRECONDITIONING[preconditioning]
    if preconditioning in ("aol", "schatten"):
        # Their scaling belongs to the first step: no step, no scaling.
        normalization = normalization if rows else "none"
        eps = FIRST_STEP_EPS

    def orthogonalize(matrices):
        return orthogonalize_rows(
            matrices,
            rows,
            eps=eps,
            normalization=normalization,
            norm_factor=1.0,
            precondition=precondition,
            method="ns",  # optax's order of operations
            precision=None,
        )

    blocks = matrix_blocks(x.shape, dimension_numbers)
    return blocks.from_stacks([orthogonalize(m) for m in blocks.to_stacks(x)])
