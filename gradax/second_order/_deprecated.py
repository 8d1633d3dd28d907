"""Hessian-vector products and Hessian and Fisher diagonals (deprecated).

optax 0.2.7 deprecated these and removes them in 0.2.9; gradax keeps them,
with the same :class:`DeprecationWarning` on every call, for code that
still uses them.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree


def _deprecated(fun: Callable[..., Any]) -> Callable[..., Any]:
    """Warns (a DeprecationWarning at the caller's line) on every call."""
    message = (
        f"gradax.second_order.{fun.__name__} is deprecated, as optax's is "
        "(optax removes it in 0.2.9)."
    )

    @functools.wraps(fun)
    def warned(*args: Any, **kwargs: Any) -> Any:
        warnings.warn(message, DeprecationWarning, stacklevel=2)
        return fun(*args, **kwargs)

    return warned


def _hvp(loss, v, params, inputs, targets):
    _, unravel = ravel_pytree(params)
    grad = jax.grad(lambda p: loss(p, inputs, targets))
    return jax.jvp(grad, (params,), (unravel(v),))[1]


@_deprecated
def hvp(
    loss: Callable[[Any, jax.Array, jax.Array], jax.Array],
    v: jax.Array,
    params: Any,
    inputs: jax.Array,
    targets: jax.Array,
) -> jax.Array:
    r"""Hessian-vector product of a loss (deprecated, as in optax).

    .. math::
      H v,\qquad H = \nabla^2_\theta\, \ell(\theta, x, y)

    computed as a forward-mode derivative of the gradient, without forming
    :math:`H`. Every call warns with a :class:`DeprecationWarning`.

    Args:
      loss: the loss, `loss(params, inputs, targets) -> scalar`.
      v: a flat vector with as many entries as `params` (in
        `jax.flatten_util.ravel_pytree` order).
      params: the parameters :math:`\theta`, a pytree.
      inputs: inputs :math:`x` passed to `loss`.
      targets: targets :math:`y` passed to `loss`.

    Returns:
      :math:`H v`, as a pytree with the structure of `params`.

    Example:
      >>> import warnings, jax.numpy as jnp
      >>> from gradax import second_order
      >>> loss = lambda w, x, y: jnp.sum((x * w - y) ** 2)
      >>> with warnings.catch_warnings():
      ...     warnings.simplefilter("ignore", DeprecationWarning)
      ...     second_order.hvp(loss, jnp.ones(2), jnp.zeros(2),
      ...                      jnp.array([1.0, 2.0]), jnp.zeros(2))
      Array([2., 8.], dtype=float32)
    """
    return _hvp(loss, v, params, inputs, targets)


@_deprecated
def hessian_diag(
    loss: Callable[[Any, jax.Array, jax.Array], jax.Array],
    params: Any,
    inputs: jax.Array,
    targets: jax.Array,
) -> jax.Array:
    r"""Diagonal of the Hessian of a loss (deprecated, as in optax).

    .. math::
      \operatorname{diag}(H)_k = e_k^\top H e_k,\qquad
      H = \nabla^2_\theta\, \ell(\theta, x, y)

    with one Hessian-vector product per parameter (vectorized with
    `vmap`), so only for small models. Every call warns with a
    :class:`DeprecationWarning`.

    Args:
      loss: the loss, `loss(params, inputs, targets) -> scalar`.
      params: the parameters :math:`\theta`, a pytree.
      inputs: inputs :math:`x` passed to `loss`.
      targets: targets :math:`y` passed to `loss`.

    Returns:
      The diagonal as a flat vector (`ravel_pytree` order of `params`).

    Example:
      >>> import warnings, jax.numpy as jnp
      >>> from gradax import second_order
      >>> loss = lambda w, x, y: (x @ w - y) ** 2  # Hessian 2 x x^T
      >>> with warnings.catch_warnings():
      ...     warnings.simplefilter("ignore", DeprecationWarning)
      ...     second_order.hessian_diag(loss, jnp.zeros(2), jnp.array([1.0, 2.0]), 0.0)
      Array([2., 8.], dtype=float32)
    """
    flat, _ = ravel_pytree(params)

    def diagonal_entry(e: jax.Array) -> jax.Array:
        column, _ = ravel_pytree(_hvp(loss, e, params, inputs, targets))
        return jnp.vdot(e, column)

    return jax.vmap(diagonal_entry)(jnp.eye(flat.size))


@_deprecated
def fisher_diag(
    negative_log_likelihood: Callable[[Any, jax.Array, jax.Array], jax.Array],
    params: Any,
    inputs: jax.Array,
    targets: jax.Array,
) -> jax.Array:
    r"""Diagonal of the observed Fisher information (deprecated, as in optax).

    .. math::
      \operatorname{diag}(F) = \big(\nabla_\theta\, (-\log p(y \mid x, \theta))
      \big)^{\odot 2}

    the squared gradient of the negative log-likelihood at the given data.
    Every call warns with a :class:`DeprecationWarning`.

    Args:
      negative_log_likelihood: `nll(params, inputs, targets) -> scalar`.
      params: the parameters :math:`\theta`, a pytree.
      inputs: inputs :math:`x` passed to `negative_log_likelihood`.
      targets: targets :math:`y` passed to `negative_log_likelihood`.

    Returns:
      The squared gradient as a flat vector (`ravel_pytree` order of
      `params`).

    Example:
      >>> import warnings, jax, jax.numpy as jnp
      >>> from gradax import second_order
      >>> nll = lambda w, x, y: 0.5 * jnp.sum((x * w - y) ** 2)
      >>> w, x, y = jnp.ones(2), jnp.array([1.0, 2.0]), jnp.zeros(2)
      >>> with warnings.catch_warnings():
      ...     warnings.simplefilter("ignore", DeprecationWarning)
      ...     diag = second_order.fisher_diag(nll, w, x, y)
      >>> diag
      Array([ 1., 16.], dtype=float32)
      >>> jax.grad(nll)(w, x, y) ** 2
      Array([ 1., 16.], dtype=float32)

    References:
      Kunstner et al., `Limitations of the empirical Fisher approximation
      for natural gradient descent <https://arxiv.org/abs/1905.12558>`_,
      NeurIPS 2019.
    """
    gradient, _ = ravel_pytree(
        jax.grad(negative_log_likelihood)(params, inputs, targets)
    )
    return jnp.square(gradient)
