"""The reference suite's cases: each optimizer against its authors' code."""
