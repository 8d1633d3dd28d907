"""Line searches, L-BFGS and a compiled minimize loop."""

from ._backtracking import BacktrackingLinesearchInfo as BacktrackingLinesearchInfo
from ._backtracking import (
    ScaleByBacktrackingLinesearchState as ScaleByBacktrackingLinesearchState,
)
from ._backtracking import (
    scale_by_backtracking_linesearch as scale_by_backtracking_linesearch,
)
from ._common import value_and_grad_from_state as value_and_grad_from_state
from ._zoom import ScaleByZoomLinesearchState as ScaleByZoomLinesearchState
from ._zoom import ZoomLinesearchInfo as ZoomLinesearchInfo
from ._zoom import scale_by_zoom_linesearch as scale_by_zoom_linesearch
from .lbfgs import ScaleByLBFGSState as ScaleByLBFGSState
from .lbfgs import lbfgs as lbfgs
from .lbfgs import scale_by_lbfgs as scale_by_lbfgs
from .minimize import MinimizeResult as MinimizeResult
from .minimize import MinimizeStatus as MinimizeStatus
from .minimize import minimize as minimize
