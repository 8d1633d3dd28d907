"""Time one update of chain(clip_by_global_norm, adamw): gradax, optax, torch.

The code is gradax_cli/benchmarks/adamw.py (shipped with the package, so
`gradax bench` runs it from an installed wheel too); see its docstring.

Run: python benchmarks/bench_adamw.py [--quick] [--json FILE]
"""

from gradax_cli.benchmarks.adamw import main, run  # noqa: F401

if __name__ == "__main__":
    main()
