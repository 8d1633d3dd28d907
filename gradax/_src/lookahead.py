"""Compatibility shim for `optax._src.lookahead`.

Maps `lookahead`, `LookaheadParams` and `LookaheadState`, all of the
optax module.

Each name is gradax's own object, defined nowhere here:
`lookahead.lookahead is gradax.lookahead`.
See docs/optax-private-paths.md for the measured use of each name.
"""

from gradax import LookaheadParams as LookaheadParams
from gradax import LookaheadState as LookaheadState
from gradax import lookahead as lookahead
