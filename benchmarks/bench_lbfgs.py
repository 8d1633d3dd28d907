"""Time L-BFGS on a regularized logistic regression: gradax against scipy, optax.

The code is gradax_cli/benchmarks/lbfgs.py (shipped with the package, so
`gradax bench` runs it from an installed wheel too); see its docstring.

Run: python benchmarks/bench_lbfgs.py [--quick] [--dtype float32] [--max-steps 300]
[--json FILE]
"""

from gradax_cli.benchmarks.lbfgs import main, run  # noqa: F401

if __name__ == "__main__":
    main()
