"""Mesh-aware pieces: distributed orthogonalization for Muon, ZeRO-1 state
and its reduce-scattered data-parallel gradients."""

from ._data_parallel import data_parallel_value_and_grad as data_parallel_value_and_grad
from .zero import reduced_over as reduced_over
from .zero import shard_state as shard_state
from .zero import zero_spec as zero_spec
