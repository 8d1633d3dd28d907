"""Cheap random bits for stochastic rounding: a keyed hash of the element index.

Rounding a float32 to bfloat16 at random needs 16 uniform bits a parameter,
and no cryptographic quality. `jax.random.bits` draws them from threefry
(20 rounds of integer work for each 64 bits); here each element's 32 bits
are a hash of its flat index under a 64-bit key, about fifteen uint32
operations that XLA fuses into the rounding itself:

    h = fmix32(fmix32(index + k0) ^ k1)

`fmix32` is the finalizer of Austin Appleby's MurmurHash3 (public domain):
`x ^= x >> 16; x *= 0x85EBCA6B; x ^= x >> 13; x *= 0xC2B2AE35; x ^= x >> 16`,
a bijection of uint32 whose every input bit flips each output bit with
probability close to 1/2 (its constants were chosen by that avalanche
criterion). One round keyed by `k0` alone would give step `t + 1` the
bits of step `t` shifted by `k0' - k0` elements; the second round,
keyed by `k1`, breaks that relation. The key `(k0, k1)` is a fresh
PRNG key's data (split from the state's key each step, folded with the
leaf's position), so bits differ across steps and leaves.

The index is computed from `iota` in the array's own shape, so the bits do
not depend on how the array is sharded. It is taken modulo `2**32`: an
array of more than `2**32` elements repeats its bits every `2**32`
elements.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

# MurmurHash3's fmix32 multipliers (Appleby, MurmurHash3.cpp, public domain).
_M1 = np.uint32(0x85EBCA6B)
_M2 = np.uint32(0xC2B2AE35)


def _fmix32(x: jax.Array) -> jax.Array:
    x = x ^ (x >> 16)
    x = x * _M1
    x = x ^ (x >> 13)
    x = x * _M2
    return x ^ (x >> 16)


def _flat_index(shape: tuple[int, ...]) -> jax.Array:
    """Each element's row-major index in an array of `shape` (uint32, wrapping)."""
    index = jnp.zeros(shape, jnp.uint32)
    stride = 1
    for axis in reversed(range(len(shape))):
        iota = jax.lax.broadcasted_iota(jnp.uint32, shape, axis)
        index = index + iota * np.uint32(stride % 2**32)
        stride *= shape[axis]
    return index


def key_words(key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Two uint32 words from a PRNG key's data (even and odd words xor-ed).

    A threefry key's data is two words: they are `k0` and `k1`. Keys of
    other implementations (`rbg`: four words) are folded into two.
    """
    data = jax.random.key_data(key).reshape(-1).astype(jnp.uint32)
    k0, k1 = data[0], data[1]
    for i in range(2, data.shape[0]):
        if i % 2:
            k1 = k1 ^ data[i]
        else:
            k0 = k0 ^ data[i]
    return k0, k1


def hash_bits(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """32 pseudo-random bits (uint32) for each element of an array of `shape`.

    A function of `key` and the element's index only (see the module's
    documentation): the same key gives the same bits, in any sharding.
    """
    k0, k1 = key_words(key)
    return _fmix32(_fmix32(_flat_index(tuple(shape)) + k0) ^ k1)
