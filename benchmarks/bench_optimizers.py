"""Update time of the elementwise optimizers: gradax, optax and the bandwidth floor.

The code is gradax_cli/benchmarks/optimizers.py (shipped with the package, so
`gradax bench` runs it from an installed wheel too); see its docstring.

Run: python benchmarks/bench_optimizers.py [--quick] [--json FILE]
"""

from gradax_cli.benchmarks.optimizers import main, run  # noqa: F401

if __name__ == "__main__":
    main()
