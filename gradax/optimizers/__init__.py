"""Optimizers, one file each."""
