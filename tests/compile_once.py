"""``jit_once``: ``jax.jit`` for a test program compiled once and run once.

Without LLVM's optimization of the generated code such a program compiles in
about half the time. Both libraries of a comparison are compiled alike, so
the comparison is like with like.
"""

import functools

import jax

jit_once = functools.partial(
    jax.jit, compiler_options={"xla_backend_optimization_level": 0}
)
