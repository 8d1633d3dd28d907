"""Compiler options for the test matrices: compile fast, check the same thing.

The catalogue checks (conformance, faults, resume, the extra-argument
optimizers) compile thousands of tiny programs, and XLA's CPU fusion emitters
and LLVM's optimization passes cost far more than those programs ever run:
with these options ``test_conformance -k adam`` takes 87 s of CPU instead of
203 s. What the matrices check (equal numbers between two forms compiled
together, state types, sharding, bit-identical skips) does not depend on how
well a program is optimized; both sides of every comparison are compiled with
the same options. The comparisons with optax elsewhere in the suite
(test_dropin, test_muon, ...) keep the default options, so the code users run
is tested as well.
"""

from __future__ import annotations

import functools

import jax

COMPILER_OPTIONS = {
    "xla_backend_optimization_level": 0,
    "xla_cpu_use_fusion_emitters": False,
}

# ``jax.jit`` with the options above (same arguments otherwise).
fast_jit = functools.partial(jax.jit, compiler_options=COMPILER_OPTIONS)
