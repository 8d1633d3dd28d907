"""Compatibility shim for `optax._src.combine`: chaining and partitioning.

Maps `chain`, `named_chain`, `partition`, `multi_transform` and
`MultiTransformState`, all of the optax module.

Each name is gradax's own object, defined nowhere here:
`combine.chain is gradax.chain`.
See docs/optax-private-paths.md for the measured use of each name.
"""

from gradax import MultiTransformState as MultiTransformState
from gradax import chain as chain
from gradax import multi_transform as multi_transform
from gradax import named_chain as named_chain
from gradax import partition as partition
