"""Stochastic rounding of 16-bit parameters: unbiased steps with no master."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._core.declarations import Range, hyper, static_field
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
    step_to,
    widen,
)
from ._hash import hash_bits


class StochasticRoundingState(NamedTuple):
    """State of :class:`stochastic_rounding`.

    Reading an attribute it lacks reads the inner state's (`state.mu`).
    """

    rng_key: jax.Array  # typed PRNG key, split at each step that moves a parameter
    inner_state: Any  # the inner transformation's, made for float32 parameters

    # The inner transformation loads its own (8-bit) state.
    _loads_itself = True

    __getattr__ = read_through_to_inner


def round_bfloat16(x: jax.Array, key: jax.Array) -> jax.Array:
    """`x` (float32) rounded to bfloat16, up or down at random, unbiased.

    Adds 16 uniform random bits below the 16 bits bfloat16 keeps, then
    truncates: a value whose low half is `L` rounds away from zero with
    probability `L / 2**16` exactly, which is its distance to the bfloat16
    below (in magnitude) over the spacing. NaN stays NaN. The bits are the
    top half of a keyed hash of each element's index (`_hash.hash_bits`),
    a function of `key` and the index only.
    """
    noise = hash_bits(key, jnp.shape(x)) >> 16
    bits = (float_to_bits(x) + noise) & jnp.uint32(0xFFFF0000)
    rounded = bits_to_float(bits).astype(jnp.bfloat16)  # exact: low half is 0
    return jnp.where(jnp.isnan(x), x.astype(jnp.bfloat16), rounded)


def round_float16(x: jax.Array, key: jax.Array) -> jax.Array:
    """`x` (float32) rounded to float16, up or down at random, unbiased.

    The two float16 neighbours `lo <= x <= hi` are found from the nearest
    one; `hi` is taken with probability `(x - lo) / (hi - lo)`, drawn as
    a float32 uniform on `[0, 1)` from the top 23 bits of the element's
    hash (a bias below `2**-23` of the spacing). Beyond float16's largest
    finite value the result is that value (rounding never overflows to
    infinity); infinities and NaN stay.
    """
    nearest = x.astype(jnp.float16)
    below = nearest.astype(jnp.float32) <= x
    up = jnp.nextafter(nearest, jnp.asarray(jnp.inf, jnp.float16))
    down = jnp.nextafter(nearest, jnp.asarray(-jnp.inf, jnp.float16))
    lo = jnp.where(below, nearest, down)
    hi = jnp.where(below, up, nearest)
    lo32, hi32 = lo.astype(jnp.float32), hi.astype(jnp.float32)
    chance = (x - lo32) / (hi32 - lo32)
    # 23 bits as the fraction of a float in [1, 2), minus 1: exact.
    fraction = (hash_bits(key, jnp.shape(x)) >> 9) | jnp.uint32(0x3F800000)
    draw = bits_to_float(fraction) - 1.0
    rounded = jnp.where(draw < chance, hi, lo)
    return jnp.where(jnp.isfinite(x), rounded, nearest)


def _round(x: jax.Array, dtype: Any, key: jax.Array) -> jax.Array:
    if jnp.dtype(dtype) == jnp.bfloat16:
        return round_bfloat16(x, key)
    return round_float16(x, key)


class stochastic_rounding(GradientTransformation):
    r"""Rounds each 16-bit parameter's step up or down at random, unbiased.

    For a bfloat16 or float16 parameter :math:`p` the inner transformation
    runs in float32 (on :math:`p` widened, exactly) and the new parameter is

    .. math::

       x = p + u^{\mathrm{in}} \ \text{(float32)}, \qquad
       p' = \begin{cases} \lceil x \rceil & \text{with probability }
       (x - \lfloor x \rfloor) / (\lceil x \rceil - \lfloor x \rfloor) \\
       \lfloor x \rfloor & \text{otherwise} \end{cases}

    where :math:`\lfloor x \rfloor, \lceil x \rceil` are the 16-bit values
    around :math:`x`, so :math:`\mathbb E[p'] = x`: small steps are not lost
    to round-to-nearest (which keeps :math:`p` whenever
    :math:`|u| < \mathrm{ulp}(p)/2`; bfloat16 has 8 significant bits) but
    taken on average. For bfloat16 this is exact: 16 random bits are added
    below the 16 kept bits and the result truncated. No master is kept: a
    parameter costs 2 bytes, plus the inner state.

    The key lives in the state (`rng_key`), so a run is reproducible from
    `seed` and resumes exactly from a checkpoint. It is split at each step,
    and the step's key, folded
    with each leaf's position, keys a cheap hash of every element's index
    that gives its random bits (a MurmurHash3 finalizer, two keyed rounds: about
    fifteen integer operations an element, against threefry's twenty
    rounds for 64 bits; the bits do not depend on the sharding). A step
    whose updates are all zero (one skipped by `apply_if_finite` inside
    this wrapper) rounds nothing (:math:`x = p` exactly), but its key is
    split too, so later steps draw other bits than a run that never saw
    it (unbiased all the same). `keep_key_on_zero_steps=True` leaves the
    key as it was after such a step, so that it leaves no trace at all,
    at the cost of one more pass over the updates to find out. On a
    2-core CPU, around 8-bit AdamW, the step took 0.95x to 1.07x the
    round-to-nearest step by default and 1.30x to 1.44x with the check
    (`benchmarks/bench_state_memory.py`, three runs; issue 35's target for
    the rounding is 1.2x).

    Updates are float32 for 16-bit parameters (:math:`p' - p`, which
    `apply_updates` turns into :math:`p'` exactly under the condition in
    :func:`master_weights`), so this wrapper must be the outermost one: put
    clipping and `apply_if_finite` inside it. Gradients of 16-bit
    parameters are widened to float32 before the inner transformation sees
    them, and its state is made for float32 parameters (float32 or 8-bit
    moments, whatever its `mu_dtype` says, never bfloat16). Other leaves
    (float32 and wider) pass through unrounded.

    Args:
      tx: the transformation whose steps to round (gradax or optax).
      seed: an integer seed for the rounding's random bits.
      key: a PRNG key (`jax.random.key` or raw `jax.random.PRNGKey`
        data) instead of `seed`; give one or the other.
      keep_key_on_zero_steps: `True` leaves the key as it was after a step
        whose updates are all zero, at the cost of a pass over the updates;
        `False` (default) splits it at every step.

    Returns:
      A transformation whose state is a :class:`StochasticRoundingState`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.stochastic_rounding(gradax.sgd(1.0), seed=0)
      >>> params = jnp.ones(1000, jnp.bfloat16)  # bfloat16 spacing at 1: 2**-7
      >>> updates, _ = tx.update(jnp.full(1000, 2.0**-9), tx.init(params), params)
      >>> new = gradax.apply_updates(params, updates)  # 1 - 2**-9 on average
      >>> bool(jnp.all((new == 1) | (new == 1 - 2.0**-8)))  # spacing 2**-8 below 1
      True
      >>> bool(abs(new.astype(jnp.float32).mean() - (1 - 2.0**-9)) < 2.0**-10)
      True

    References:
      Gupta et al., "Deep Learning with Limited Numerical Precision", ICML
      2015 (arXiv:1502.02551). Zamirai et al., "Revisiting BFloat16
      Training", arXiv:2010.06192.
    """

    # Updates of 16-bit params come back float32 (gradax/_core/half.py).
    _update_dtypes = "widen_half"

    tx: TransformationLike = transformation_field()
    seed: int = hyper(default=0, valid=Range(integer=True), static=True, kw_only=True)
    key: Any = None
    keep_key_on_zero_steps: bool = static_field(default=False, kw_only=True)

    def __check_init__(self):
        if self.key is not None and self.seed != 0:
            raise ValueError("stochastic_rounding: give key or seed, not both")

    def _first_key(self) -> jax.Array:
        key = self.key
        if key is None:
            return jax.random.key(self.seed)
        if jax.dtypes.issubdtype(jnp.asarray(key).dtype, jax.dtypes.prng_key):
            return key
        key = jnp.asarray(key)
        if key.dtype == jnp.uint32 and key.ndim == 1:
            return jax.random.wrap_key_data(key)
        raise TypeError(
            "stochastic_rounding: key must be a PRNG key (jax.random.key or "
            f"jax.random.PRNGKey), got {key.dtype} of shape {key.shape}; give "
            "an integer as seed= instead"
        )

    def init_state(self, params):
        return StochasticRoundingState(
            self._first_key(), self.tx.init(widen(params, params))
        )

    def update_state(self, updates, state, params=None, **extra_args):
        require_params(params, "stochastic_rounding")
        wide = widen(params, params)
        inner_updates, inner_state = self.tx.update(
            updates, state.inner_state, wide, **extra_args
        )
        next_key, step_key = jax.random.split(state.rng_key)
        targets = apply_updates(wide, inner_updates)
        leaves, treedef = jax.tree.flatten(params)
        outs = []
        for i, (p, u, x) in enumerate(
            zip(
                leaves,
                treedef.flatten_up_to(inner_updates),
                treedef.flatten_up_to(targets),
                strict=True,
            )
        ):
            if is_half(p):
                rounded = _round(x, p.dtype, jax.random.fold_in(step_key, i))
                outs.append(step_to(rounded, p))
            else:
                outs.append(u)
        if self.keep_key_on_zero_steps:
            # One more pass over every update: XLA's CPU backend writes them
            # to memory for the reduction and reads them back.
            moved = jnp.zeros([], bool)
            for u in jax.tree.leaves(inner_updates):
                moved = moved | jnp.any(u != 0)
            data = jnp.where(
                moved,
                jax.random.key_data(next_key),
                jax.random.key_data(state.rng_key),
            )
            impl = jax.random.key_impl(state.rng_key)
            next_key = jax.random.wrap_key_data(data, impl=impl)
        new_state = StochasticRoundingState(next_key, inner_state)
        return jax.tree.unflatten(treedef, outs), new_state
