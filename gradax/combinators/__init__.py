"""Combinators and wrappers of transformations."""
