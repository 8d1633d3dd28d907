"""Compatibility shim for `optax._src.linesearch`: line searches.

Maps the public names: `scale_by_backtracking_linesearch`,
`scale_by_zoom_linesearch`, their states and infos, and
`value_and_grad_from_state`. Left out, as gradax has no counterpart: the
internal `zoom_linesearch` function, `ZoomLinesearchState`,
`BacktrackingLineSearchState` and the `FLAG_*` message strings.

Each name is gradax's own object, defined nowhere here:
`linesearch.scale_by_zoom_linesearch is gradax.scale_by_zoom_linesearch`.
See docs/optax-private-paths.md for the measured use of each name.
"""

from gradax import BacktrackingLinesearchInfo as BacktrackingLinesearchInfo
from gradax import (
    ScaleByBacktrackingLinesearchState as ScaleByBacktrackingLinesearchState,
)
from gradax import ScaleByZoomLinesearchState as ScaleByZoomLinesearchState
from gradax import ZoomLinesearchInfo as ZoomLinesearchInfo
from gradax import scale_by_backtracking_linesearch as scale_by_backtracking_linesearch
from gradax import scale_by_zoom_linesearch as scale_by_zoom_linesearch
from gradax import value_and_grad_from_state as value_and_grad_from_state
