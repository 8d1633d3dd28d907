"""The kernel: the base class and its template init/update, the Module base,
declared ranges, the state guard, tree checks, dtype policies and 8-bit state.

Private to gradax: every subpackage builds on it; users import from the
packages (docs/writing-a-transformation.md, "Modules").
"""
