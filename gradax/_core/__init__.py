"""The kernel: the base class and its template init/update, the Module base,
declared ranges, the state guard, tree checks, dtype policies, and the hook
for state stored in another form (the 8-bit storage is gradax/precision/int8.py).

Private to gradax: every subpackage builds on it; users import from the
packages (docs/writing-a-transformation.md, "Modules").
"""
