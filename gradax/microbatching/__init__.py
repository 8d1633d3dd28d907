"""Microbatching: evaluate a function on a large batch one slice at a time.

The names of `optax.microbatching`: :func:`microbatch` (any function),
:func:`micro_vmap` (`jax.vmap` in slices) and :func:`micro_grad`
(per-example gradients, transformed and combined), with the combination
rules :class:`Accumulator` and :class:`AccumulationType`.
"""

from ._accumulate import AccumulationType as AccumulationType
from ._accumulate import Accumulator as Accumulator
from ._microbatch import micro_grad as micro_grad
from ._microbatch import micro_vmap as micro_vmap
from ._microbatch import microbatch as microbatch
from ._microbatch import reshape_batch_axis as reshape_batch_axis
