"""The comparisons ``gradax bench`` runs, shipped with the package.

Each module has ``run(quick: bool) -> dict``: its figures, a list of
``"comparisons"`` (rows of the table, see :func:`.common.comparison`) and
``"notes"``. optax, torch and scipy are imported inside ``run`` and left out
where they are not installed. The repository's ``benchmarks/bench_*.py`` are
thin entry points to these modules.

A module may change process-wide JAX settings (float64, simulated devices),
so ``gradax bench`` runs each in a process of its own, with the environment
variables listed here.
"""

from __future__ import annotations

SIMULATED_DEVICES = "--xla_force_host_platform_device_count=8"
"""The XLA flag that makes 8 CPU devices, for the distributed benchmark."""

# name -> (module under this package, environment variables for its process).
# The order is the table's.
BENCHMARKS: dict[str, tuple[str, dict[str, str]]] = {
    "adamw": ("adamw", {}),
    "muon": ("muon", {}),
    "optimizers": ("optimizers", {}),
    "lbfgs": ("lbfgs", {}),
    "distributed": (
        "distributed",
        {"XLA_FLAGS": SIMULATED_DEVICES},
    ),
}
