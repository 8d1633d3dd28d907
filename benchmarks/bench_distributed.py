"""Distributed Muon on 8 simulated devices: collective bytes and time.

The code is gradax_cli/benchmarks/distributed.py (shipped with the package,
so `gradax bench` runs it from an installed wheel too); see its docstring.

Run: python benchmarks/bench_distributed.py [--quick] [--json FILE]
"""

import os

from gradax_cli.benchmarks import SIMULATED_DEVICES

# Before JAX starts: simulated CPU devices for the sharded steps.
if SIMULATED_DEVICES not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " " + SIMULATED_DEVICES
    ).strip()

from gradax_cli.benchmarks.distributed import main, run  # noqa: E402, F401

if __name__ == "__main__":
    main()
