"""optax compatibility shims: its type aliases and its private module paths
outside ``optax._src`` (``gradax._src`` serves those under it).
"""
