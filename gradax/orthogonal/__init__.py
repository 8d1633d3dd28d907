"""Orthogonalization (Newton–Schulz and friends) and the Muon family."""
