"""Shared pieces of the benchmarks, kept here for the scripts that import them.

The code is gradax_cli/benchmarks/common.py (shipped with the package).
"""

from gradax_cli.benchmarks.common import (  # noqa: F401
    comparison,
    comparisons_against,
    count_params,
    cpu_threads,
    fake_grads,
    gpt_like_params,
    normal_tree,
    optional_optax,
    optional_torch,
    time_interleaved,
    to_torch,
)
