"""Learning-rate transfer across width and depth (issue 33): `gradax demo --transfer`.

A thin entry point: the sweep, its model and its rows live in the public
module `gradax_cli.transfer` (see its docstring and docs/width-transfer.md,
which holds the measured table, the plot and the wall time).

    python benchmarks/bench_width_transfer.py            # width and depth sweeps
    python benchmarks/bench_width_transfer.py --quick    # 4 rates, 40 steps
    python benchmarks/bench_width_transfer.py --out DIR  # transfer.json/.png

Any other argument goes to `gradax demo --transfer` as it is (`--rows`,
`--widths`, `--depths`, `--points`, `--steps`, ...).
"""

from __future__ import annotations

import sys

from gradax_cli import main as gradax_main


def main(argv: list[str]) -> int:
    args = ["demo", "--transfer", "all"]
    if "--quick" in argv:
        argv = [a for a in argv if a != "--quick"]
        args += ["--points", "4", "--steps", "40"]
    if "--out" not in argv:
        args += ["--out", "gradax-transfer"]
    return gradax_main(args + argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
