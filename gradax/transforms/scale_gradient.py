"""scale_gradient: the identity forward, a scaled gradient backward."""

from __future__ import annotations

from typing import Any

import jax


@jax.custom_vjp
def _identity_scaled_backward(inputs: Any, scale: Any) -> Any:
    del scale  # used by the backward pass only
    return inputs


def _forward(inputs: Any, scale: Any) -> tuple[Any, Any]:
    return inputs, scale


def _scaled(g: jax.Array, scale: Any) -> jax.Array:
    out = g * scale
    # Keep the cotangent's dtype: an array scale must not promote it.
    return out if out.dtype == g.dtype else out.astype(g.dtype)


def _backward(scale: Any, cotangents: Any) -> tuple[Any, None]:
    return jax.tree.map(lambda g: _scaled(g, scale), cotangents), None


_identity_scaled_backward.defvjp(_forward, _backward)


def scale_gradient(inputs: Any, scale: Any) -> Any:
    """Returns `inputs` unchanged, but scales their gradient by `scale`.

    In the backward pass the cotangent of every leaf is multiplied by
    `scale`; `scale` itself gets no gradient. A Python `scale` of 1
    returns `inputs` as they are, and 0 stops the gradient.

    Differences from optax: `scale` may be a traced array (optax compares
    it with 1 and 0 in Python, which fails under `jit`); the scaled
    cotangents keep their dtype.

    Args:
      inputs: an array or a tree of arrays.
      scale: the factor applied to the gradient on the backward pass.

    Returns:
      `inputs`, with the scaled backward pass.

    Example:
      >>> import jax, jax.numpy as jnp, gradax
      >>> jax.grad(lambda x: gradax.scale_gradient(x, 0.5) ** 2)(jnp.float32(3.0))
      Array(3., dtype=float32)
    """
    if isinstance(scale, (int, float)) and not isinstance(scale, bool):
        if scale == 1:
            return inputs
        if scale == 0:
            return jax.lax.stop_gradient(inputs)
    return _identity_scaled_backward(inputs, scale)
