"""Line searches, L-BFGS and a compiled minimize loop."""

from ._common import value_and_grad_from_state as value_and_grad_from_state
from .backtracking import BacktrackingLinesearchInfo as BacktrackingLinesearchInfo
from .backtracking import (
    ScaleByBacktrackingLinesearchState as ScaleByBacktrackingLinesearchState,
)
from .backtracking import (
    scale_by_backtracking_linesearch as scale_by_backtracking_linesearch,
)
from .lbfgs import ScaleByLBFGSState as ScaleByLBFGSState
from .lbfgs import lbfgs as lbfgs
from .lbfgs import scale_by_lbfgs as scale_by_lbfgs
from .minimize import MinimizeResult as MinimizeResult
from .minimize import MinimizeStatus as MinimizeStatus
from .minimize import minimize as minimize
from .zoom import ScaleByZoomLinesearchState as ScaleByZoomLinesearchState
from .zoom import ZoomLinesearchInfo as ZoomLinesearchInfo
from .zoom import scale_by_zoom_linesearch as scale_by_zoom_linesearch
