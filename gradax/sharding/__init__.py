"""Mesh-aware pieces: distributed orthogonalization for Muon, ZeRO-1 state."""

from .zero import shard_state as shard_state
from .zero import zero_spec as zero_spec
