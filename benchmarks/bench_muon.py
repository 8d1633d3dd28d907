"""Time one Muon update: gradax against optax, torch and the matmul floor.

The code is gradax_cli/benchmarks/muon.py (shipped with the package, so
`gradax bench` runs it from an installed wheel too); see its docstring.

Run: python benchmarks/bench_muon.py [--quick] [--json FILE]
"""

from gradax_cli.benchmarks.muon import main, run  # noqa: F401

if __name__ == "__main__":
    main()
