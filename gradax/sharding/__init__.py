"""Mesh-aware pieces: distributed orthogonalization for Muon."""
