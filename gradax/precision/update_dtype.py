"""Choosing the dtype of the updates: the gradients', the parameters', or both."""

from __future__ import annotations

from .._core.declarations import OneOf, hyper
from .._core.protocol import (
    GradientTransformation,
    TransformationLike,
    transformation_field,
)

TARGETS = ("grads", "params", "promote")


class cast_updates(GradientTransformation):
    r"""Gives a transformation's updates the gradients' or the parameters' dtype.

    For each leaf with gradient dtype :math:`d_g` and parameter dtype
    :math:`d_p` the updates come out in

    - `to="grads"`: :math:`d_g`, what every gradax transformation gives
      by itself (and optax where the gradients and parameters share a dtype,
      or for bfloat16 parameters with float32 gradients);
    - `to="params"`: :math:`d_p`, so `apply_updates` adds in the
      parameters' precision and a `MultiSteps` or `lax.cond` around the
      step sees one dtype;
    - `to="promote"`: :math:`\mathrm{promote}(d_g, d_p)`, what optax's
      stateful optimizers give when the two differ (their moments take the
      parameters' dtype and promote the gradients), e.g. float32 updates
      for float32 parameters with bfloat16 gradients (optax #1098, #1552).

    Gradients are widened exactly to :math:`\mathrm{promote}(d_g, d_t)`
    (:math:`d_t` the target) before the inner transformation sees them, so
    it computes in the wider dtype, and its updates are then cast to
    :math:`d_t` (a narrowing cast rounds once, to nearest). This must be
    the outermost transformation: a `chain` around it casts updates back
    to the gradients' dtype.

    Args:
      tx: the transformation (gradax or optax).
      to: `"promote"` (the default: optax's dtypes), `"grads"` or
        `"params"`.

    Returns:
      A transformation with `tx`'s state (unchanged: no node is added).

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.cast_updates(gradax.adam(1e-3), to="params")
      >>> params = jnp.ones(2, jnp.float32)
      >>> grads = jnp.ones(2, jnp.bfloat16)
      >>> tx.update(grads, tx.init(params), params)[0].dtype
      dtype('float32')

    References:
      optax issues #1098 ("Updates dtype do not need to match params dtype
      but only grads dtype") and #1552; optax pull request #1687 (closed
      unmerged).
    """

    tx: TransformationLike = transformation_field()
    to: str = hyper(default="promote", valid=OneOf(TARGETS), static=True, kw_only=True)

    def update_dtypes(self) -> str:
        """The policy `to` names; the base widens, runs and casts."""
        return self.to

    def init_state(self, params):
        return self.tx.init(params)

    def update_state(self, updates, state, params=None, **extra_args):
        return self.tx.update(updates, state, params, **extra_args)
