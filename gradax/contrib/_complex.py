"""Optimizing complex parameters as pairs of real ones."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._core.protocol import (
    GradientTransformation,
    TransformationLike,
    transformation_field,
)


class SplitRealAndImaginaryArrays(NamedTuple):
    """The real and imaginary parts of one complex array, as two real arrays."""

    real: jax.Array
    imaginary: jax.Array


def _split(x: Any) -> Any:
    if x is not None and jnp.iscomplexobj(x):
        return SplitRealAndImaginaryArrays(jnp.real(x), jnp.imag(x))
    return x


def _merge(x: Any) -> Any:
    if isinstance(x, SplitRealAndImaginaryArrays):
        return x.real + x.imaginary * 1j
    return x


def _is_pair(x: Any) -> bool:
    return isinstance(x, SplitRealAndImaginaryArrays)


class SplitRealAndImaginaryState(NamedTuple):
    """State of :class:`split_real_and_imaginary`."""

    inner_state: Any  # the state of ``inner`` on the split parameters


class split_real_and_imaginary(GradientTransformation):
    r"""Runs `inner` on the real and imaginary parts of complex leaves apart.

    Every complex leaf :math:`z = x + iy` of the updates and params is given
    to `inner` as the pair of real leaves :math:`(x, y)`, and the pair it
    returns is put back together as :math:`x' + iy'`; real leaves pass as
    they are. So an optimizer treats a complex parameter exactly like two
    real ones (e.g. Adam's second moment is kept per part, not of
    :math:`|z|^2`).

    `jax.grad` of a real loss with respect to complex parameters returns
    the conjugate of the steepest-ascent direction; conjugate it before the
    update to descend.

    Args:
      inner: the transformation to run on real leaves (gradax or optax).

    Returns:
      A transformation whose state is a :class:`SplitRealAndImaginaryState`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.contrib.split_real_and_imaginary(gradax.sign_sgd(1.0))
      >>> z = jnp.array([1.0 + 2.0j])
      >>> tx.update(jnp.array([3.0 - 0.5j]), tx.init(z), z)[0]
      Array([-1.+1.j], dtype=complex64)
    """

    inner: TransformationLike = transformation_field()

    def init_state(self, params):
        split = jax.tree.map(_split, params)
        return SplitRealAndImaginaryState(self.inner.init(split))

    def update_state(self, updates, state, params=None, **extra_args):
        split_updates = jax.tree.map(_split, updates)
        split_params = jax.tree.map(_split, params)
        new_updates, inner_state = self.inner.update(
            split_updates, state.inner_state, split_params, **extra_args
        )
        merged = jax.tree.map(_merge, new_updates, is_leaf=_is_pair)
        return merged, SplitRealAndImaginaryState(inner_state)
