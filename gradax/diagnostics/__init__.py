"""Training metrics recorded inside the optimizer step, and how to read them.

:class:`with_metrics` wraps any transformation and keeps, in its state, the
numbers a training run logs (gradient, update and parameter norms per
parameter group, learning rates, clips, skipped steps); :func:`metrics`
reads them back as a flat dict; :func:`group_labels` says which group each
parameter is in. The names and formulas are in docs/metrics.md.
"""

from ._anatomy import group_labels as group_labels
from ._reading import MetricsState as MetricsState
from ._reading import metrics as metrics
from ._wrapper import with_metrics as with_metrics
