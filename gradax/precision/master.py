"""An exact float32 master for bfloat16 parameters, in 16 extra bits each."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._core.protocol import (
    GradientTransformation,
    TransformationLike,
    read_through_to_inner,
    transformation_field,
)
from .._core.treecheck import require_params
from .._core.updates import apply_updates
from ._common import (
    bits_to_float,
    float_to_bits,
    is_half,
    placeholder,
    refuse_float16,
    step_to,
    widen,
)
from .int8 import one_loop


class MasterWeightsState(NamedTuple):
    """State of :class:`master_weights`.

    Reading an attribute it lacks reads the inner state's (`state.mu`).
    """

    low_bits: Any  # uint16 per bfloat16 parameter; MaskedNode() for others
    inner_state: Any  # the inner transformation's, made for the float32 master

    # The inner transformation loads its own (8-bit) state.
    _loads_itself = True

    __getattr__ = read_through_to_inner


def _join(param: jax.Array, low: jax.Array) -> jax.Array:
    """The float32 whose high half is the bfloat16 `param`, low half `low`."""
    high = jax.lax.bitcast_convert_type(param, jnp.uint16).astype(jnp.uint32)
    return bits_to_float((high << 16) | low.astype(jnp.uint32))


def _split(master: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(high half as bfloat16, low half as uint16) of the float32 `master`."""
    bits = float_to_bits(master)
    high = jax.lax.bitcast_convert_type((bits >> 16).astype(jnp.uint16), jnp.bfloat16)
    return high, (bits & 0xFFFF).astype(jnp.uint16)


def _halves_in_one_loop(master: jax.Array) -> tuple[jax.Array, jax.Array]:
    """:func:`_split` of the new master, both halves written by one loop.

    The new master is the inner update added to the old one; its two
    halves feed two outputs (the new low bits, and the step that
    `apply_updates` adds). Computed apart, XLA writes the float32 update
    out for both (4 bytes a parameter) and copies the old parameters and
    low bits first (the two loops each read what the other overwrites).
    One loop reads the update once and writes the low bits in place, and
    the new high half (2 bytes a parameter) for `apply_updates`.
    """
    bits = float_to_bits(master)
    high = (bits >> 16).astype(jnp.uint16)
    low = (bits & 0xFFFF).astype(jnp.uint16)
    high, low = one_loop((high, low))
    return jax.lax.bitcast_convert_type(high, jnp.bfloat16), low


class master_weights(GradientTransformation):
    r"""Trains bfloat16 parameters on an exact float32 master kept in 16 bits.

    Each bfloat16 parameter :math:`p` is the high half of a float32 master
    :math:`m`; the state keeps the low half :math:`\ell` (uint16), so
    :math:`m = \mathrm{bits}^{-1}((\mathrm{bits}(p) \ll 16) \mid \ell)`
    exactly. An update

    .. math::

       u^{\mathrm{in}} = \mathrm{inner}(g, m), \quad
       m' = m + u^{\mathrm{in}} \ \text{(float32)}, \quad
       p' = \mathrm{trunc}_{16}(m'), \quad
       \ell' = \mathrm{low}_{16}(m'), \quad
       u = p' - p \ \text{(float32)}

    runs the inner transformation on the master (`params=m`, so weight
    decay sees the master), keeps the new low half and returns float32
    updates with which `apply_updates(params, updates)` gives exactly
    :math:`p'`, the truncated high half (as the modded-nanogpt speedrun
    splits its master). So the masters follow a float32 run bit for bit
    (when the inner transformation is given the same gradients), with 2 bytes
    of parameter and 2 of state per parameter, while the forward pass reads
    bfloat16 weights.

    **Exactness of** `apply_updates`. It computes `(p + u).astype(p.dtype)`
    with the sum in float32. :math:`p` and :math:`p'` have 8 significant
    bits; when their exponents differ by at most 15, :math:`p' - p` needs at
    most 24 and is exact in float32, so the sum is :math:`p'`. When
    :math:`|p'|` is the larger by more, the float32 rounding of :math:`u`
    is far below half a bfloat16 ulp of :math:`p'` and the cast rounds back
    to :math:`p'`. Exactness can fail in one case only: a step that shrinks
    a parameter's magnitude by a factor over :math:`2^{15}` without reaching
    zero (a coordinate landing within :math:`3 \cdot 10^{-5}|p|` of zero);
    no float32 `u` can reach such a :math:`p'` from :math:`p`, because
    :math:`p + u` then lies on a grid of spacing :math:`2^{-23}|p|`. The
    parameter is then off by less than that spacing and the master by the
    same. XLA flushes subnormal float32 results to zero on CPUs, the plain
    float32 run too; values below :math:`2^{-126}` are not kept.

    **Updates are float32** for bfloat16 parameters, unlike every other
    gradax transformation (whose updates have the gradients' dtype): no
    bfloat16 update carries the step exactly (a sign change needs up to 9
    significant bits). So `master_weights` must be the outermost
    transformation: put clipping and the rest inside it
    (`master_weights(chain(clip_by_global_norm(1.0), adamw(...)))`); a
    `chain` around it would cast its updates back to bfloat16 gradients'
    dtype. For skipping non-finite steps, wrap the inner transformation
    (`master_weights(apply_if_finite(tx, ...))`): a skipped step adds
    zero to the master and leaves every bit of it. Gradients of bfloat16
    parameters are widened to float32 (exactly) before the inner
    transformation sees them, and the inner state is made for float32
    parameters (so `adamw`'s moments are float32, or 8-bit with
    `int8_blockwise`).

    Leaves that are not bfloat16 (float32, float64, complex) pass through:
    the inner transformation updates them as usual and the state keeps an
    empty `MaskedNode()` for them (checkpointable, unlike a zero-size
    array). float16 parameters are refused: float32's high half is not a
    float16, and a float16 value plus a 16-bit residual does not hold a
    float32 exactly (float16's 5 exponent bits put small masters out of
    reach), so :func:`stochastic_rounding` is the way to train them.

    Args:
      tx: the transformation to run on the master (gradax or optax).

    Returns:
      A transformation whose state is a :class:`MasterWeightsState`. Its
      :meth:`master_params` rebuilds the float32 master, and
      :meth:`init_with_master` starts from float32 values.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.master_weights(gradax.sgd(1e-3))
      >>> params, state = tx.init_with_master(jnp.array([1.0, -2.0]))
      >>> updates, state = tx.update(jnp.array([1.0, 1.0]), state, params)
      >>> params = gradax.apply_updates(params, updates)
      >>> tx.master_params(params, state)  # float32 1 - 1e-3, -2 - 1e-3
      Array([ 0.999, -2.001], dtype=float32)
      >>> params.dtype
      dtype(bfloat16)

    References:
      Keller Jordan et al., modded-nanogpt (`train_gpt.py`): bfloat16
      weights with a uint16 buffer of the master's low mantissa bits.
      Zamirai et al., "Revisiting BFloat16 Training", arXiv:2010.06192.
    """

    # Updates of 16-bit params come back float32 (gradax/_core/half.py).
    _update_dtypes = "widen_half"

    tx: TransformationLike = transformation_field()

    # -- what users call besides init/update ---------------------------------

    def master_params(self, params: Any, state: MasterWeightsState) -> Any:
        """The float32 master: each bfloat16 parameter joined with its low bits.

        Leaves that are not bfloat16 are returned as they are.
        """
        return jax.tree.map(
            lambda p, low: _join(p, low) if is_half(p) else p,
            params,
            _low_bits(state),
            is_leaf=_is_low_leaf,
        )

    def init_with_master(self, master: Any) -> tuple[Any, MasterWeightsState]:
        """Parameters and state whose master is `master` (float32) exactly.

        float32 leaves become bfloat16 parameters (their high halves) with
        their low halves in the state; other leaves are kept as given.

        Returns:
          `(params, state)`.
        """

        def splits(m: Any) -> bool:
            return jnp.dtype(getattr(m, "dtype", jnp.float64)) == jnp.float32

        params = jax.tree.map(lambda m: _split(m)[0] if splits(m) else m, master)
        low = jax.tree.map(lambda m: _split(m)[1] if splits(m) else None, master)
        state = self.init(params)
        low_bits = jax.tree.map(
            lambda new, old: old if new is None else new,
            low,
            state.low_bits,
            is_leaf=lambda x: x is None or _is_low_leaf(x),
        )
        return params, state._replace(low_bits=low_bits)

    # -- the protocol ----------------------------------------------------------

    def init_state(self, params):
        refuse_float16(params, "master_weights")
        low = jax.tree.map(
            lambda p: jnp.zeros_like(p, jnp.uint16) if is_half(p) else placeholder(),
            params,
        )
        return MasterWeightsState(low, self.tx.init(widen(params, params)))

    def update_state(self, updates, state, params=None, **extra_args):
        require_params(params, "master_weights")
        master = self.master_params(params, state)
        inner_updates, inner_state = self.tx.update(
            updates, state.inner_state, master, **extra_args
        )
        # The float32 run's own step: the same function, on the same values.
        new_master = apply_updates(master, inner_updates)

        leaves, treedef = jax.tree.flatten(params)
        updates_out, low_out = [], []
        for p, u, m in zip(
            leaves,
            treedef.flatten_up_to(inner_updates),
            treedef.flatten_up_to(new_master),
            strict=True,
        ):
            if not is_half(p):
                updates_out.append(u)
                low_out.append(placeholder())
                continue
            high, low = _halves_in_one_loop(m)
            updates_out.append(step_to(high, p))
            low_out.append(low)
        new_updates = jax.tree.unflatten(treedef, updates_out)
        low = jax.tree.unflatten(treedef, low_out)
        return new_updates, MasterWeightsState(low, inner_state)


def _is_low_leaf(x: Any) -> bool:
    return type(x).__name__ == "MaskedNode" or hasattr(x, "dtype")


def _low_bits(state: Any) -> Any:
    low = getattr(state, "low_bits", None)
    if low is None:
        raise TypeError(
            "master_weights.master_params needs the state its init made "
            f"(a MasterWeightsState), got {type(state).__name__}"
        )
    return low
