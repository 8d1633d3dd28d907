"""optax compatibility shims: its type aliases, its private module paths
outside ``optax._src`` (``gradax._src`` serves those under it), and
``multi_normal``, an optax utility with no domain of its own in gradax.
"""
