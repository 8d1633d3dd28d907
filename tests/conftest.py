"""Test configuration: 8 simulated CPU devices and deterministic hypothesis."""

import os
import sys

from subprocess_env import DEVICE_COUNT_FLAG, SUITE_DEVICE_COUNT, with_device_count


def _add_xla_flag(flag: str) -> None:
    """Adds ``--name=value`` to XLA_FLAGS unless the caller set ``name``."""
    name = flag.split("=")[0]
    flags = os.environ.get("XLA_FLAGS", "")
    if name not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {flag}".strip()


def _jax_backends_started() -> bool:
    """Whether JAX has made its backends in this process already: it reads
    XLA_FLAGS then, once (a process that used JAX before pytest loaded this
    file, or a plugin that did). Never starts them itself."""
    if "jax" not in sys.modules:
        return False
    try:
        from jax._src import xla_bridge
    except ImportError:  # a private module: where it moved, the check is
        return False  # left to the tests' own assertions
    return bool(getattr(xla_bridge, "_backends", None))


# 8 CPU devices, whatever XLA_FLAGS held: the sharded tests need 8, and a
# count the caller set for their own programs (a common
# ``--xla_force_host_platform_device_count=1``) is replaced; the caller's
# other flags are kept as written (tests/subprocess_env.py).
_STARTED_BEFORE_CONFTEST = _jax_backends_started()
os.environ["XLA_FLAGS"] = with_device_count(os.environ.get("XLA_FLAGS", ""))

# Compile fast. The suite compiles thousands of tiny programs, and XLA's CPU
# fusion emitters and LLVM's optimization passes cost far more than those
# programs ever run: ``tests/conformance/test_conformance.py -k adam`` took
# 87 s of CPU with the first two options below against 203 s without. What
# the tests check (numbers against
# optax and the papers, state types, sharding, bit-identical skips and
# resumes) does not depend on how well a program is optimized, and every
# comparison is made between programs compiled with the same options; a
# comparison that passes under one set of options and fails under another
# depends on rounding, which is a defect of the test (see issue 13).
# ``GRADAX_TEST_XLA=default python -m pytest`` runs the suite with XLA's
# default options, as users compile; it passes too (slower; on jaxlib 0.12.1
# three comparisons failed there by FMA contraction until 2026-12-07, and four
# more, float32 comparisons of two programs, until 2026-12-08: they now compare
# in float64). Subprocesses (resume, multi-host, examples, the wheel) inherit
# the options.
#
# XLA aborts the process on a flag it does not know, and newer releases drop
# flags (jaxlib 0.12 no longer has the fusion emitters switch, which is always
# on there). A flag is added only when the installed jaxlib accepts it: known
# for jaxlib before 0.11, asked of a short-lived interpreter otherwise, once
# (test workers and subprocesses inherit XLA_FLAGS and skip the question).


def _jaxlib_before_0_11() -> bool:
    from importlib.metadata import PackageNotFoundError, version

    try:
        release = version("jaxlib").split(".")[:2]
        return tuple(int(part) for part in release) < (0, 11)
    except (PackageNotFoundError, ValueError):
        return False


def _xla_accepts(flag: str) -> bool:
    """Whether XLA starts with ``flag`` added to XLA_FLAGS (in a subprocess)."""
    import subprocess
    import sys

    flags = f"{os.environ.get('XLA_FLAGS', '')} {flag}".strip()
    environment = dict(os.environ, XLA_FLAGS=flags, JAX_PLATFORMS="cpu")
    probe = [sys.executable, "-c", "import jax; jax.devices()"]
    try:
        done = subprocess.run(
            probe, env=environment, capture_output=True, timeout=300, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def _add_xla_flag_if_known(flag: str) -> None:
    name = flag.split("=")[0]
    refused = os.environ.get("GRADAX_TEST_XLA_REFUSED", "").split()
    if name in os.environ.get("XLA_FLAGS", "") or name in refused:
        return
    if _jaxlib_before_0_11() or _xla_accepts(flag):
        _add_xla_flag(flag)
    else:  # remembered by test workers and subprocesses
        os.environ["GRADAX_TEST_XLA_REFUSED"] = " ".join([*refused, name])


if os.environ.get("GRADAX_TEST_XLA", "fast") != "default":
    _add_xla_flag_if_known("--xla_backend_optimization_level=0")
    _add_xla_flag_if_known("--xla_cpu_use_fusion_emitters=false")
    # One LLVM module per program, not several compiled on threads: the
    # workers already keep every core busy, and splitting costs CPU time
    # (35% of the compile time of tests/conformance/test_faults.py's programs,
    # measured with time.process_time on the 2-core development machine).
    _add_xla_flag_if_known("--xla_cpu_parallel_codegen_split_count=1")

import hypothesis  # noqa: E402

hypothesis.settings.register_profile(
    "gradax", derandomize=True, deadline=None, max_examples=30, print_blob=True
)
hypothesis.settings.load_profile("gradax")

# Helper scripts, not test modules: keep --doctest-modules from importing them
# (the workers parse sys.argv).
collect_ignore = [
    "sharding/multihost_worker.py",
    "conformance/resume_worker.py",
]


import jax  # noqa: E402
import pytest  # noqa: E402


def pytest_configure(config):
    """Stop at once, saying what to do, where JAX started before this file
    could set the device count, with another count."""
    if not _STARTED_BEFORE_CONFTEST:
        return
    try:
        count = len(jax.devices("cpu"))
    except RuntimeError:  # JAX_PLATFORMS left the CPU out
        count = 0
    if count != SUITE_DEVICE_COUNT:
        raise pytest.UsageError(
            f"JAX started with {count} CPU device(s) before tests/conftest.py "
            f"could set {DEVICE_COUNT_FLAG}={SUITE_DEVICE_COUNT} in XLA_FLAGS "
            "(XLA reads it once, when JAX first makes its backends); the suite "
            f"needs {SUITE_DEVICE_COUNT}. Run pytest in a fresh process "
            "(python -m pytest ...), not from one that has already used JAX, "
            "or put "
            f"{DEVICE_COUNT_FLAG}={SUITE_DEVICE_COUNT} in XLA_FLAGS before it "
            "starts."
        )


# Docstring examples that show an API of a newer jax than the floor: skipped
# there, saying why (as tests/jax_versions.py's needs_jax skips the tests).
def _doctest_skips() -> dict:
    from jax_versions import needs_jax

    return {
        "gradax.combinators.offload.offload_state": needs_jax(
            (0, 10, 2), "host offload on the CPU backend"
        ),
        "gradax.sharding._data_parallel.data_parallel_value_and_grad": needs_jax(
            (0, 7, 1), "jax.set_mesh"
        ),
        "gradax.sharding.zero.shard_state": needs_jax((0, 7, 1), "jax.set_mesh"),
        # Detected as gradax.sharding.zero.reduced_over detects it.
        "gradax.sharding.zero.reduced_over": pytest.mark.skipif(
            not hasattr(jax.sharding.PartitionSpec(), "reduced"),
            reason=f"reduced sharding types are not in jax {jax.__version__}",
        ),
    }


def pytest_collection_modifyitems(items):
    """A test of a registry entry that needs a newer jax (Entry.requires)
    carries the entry's skip, whichever file parametrizes it; so does a
    docstring example that shows a newer jax's API (_doctest_skips)."""
    from registry_base import Entry

    doctest_skips = _doctest_skips()
    for item in items:
        if type(item).__name__ == "DoctestItem" and item.name in doctest_skips:
            item.add_marker(doctest_skips[item.name])
        callspec = getattr(item, "callspec", None)
        for value in callspec.params.values() if callspec else ():
            if isinstance(value, Entry):
                for mark in value.marks:
                    item.add_marker(mark)


# A test worker drops JAX's compilation caches when its resident memory has
# grown this much since the last time it did.
_CACHE_GROWTH_BYTES = 1536 * 1024**2
_baseline = {"bytes": None}


def _resident_bytes() -> int:
    """This process's resident memory (Linux; 0 where /proc is missing)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


@pytest.fixture(autouse=True)
def _release_compiled_programs():
    """Drop JAX's compilation caches once a worker's memory has grown a lot.

    Thousands of parametrized checks each compile their own programs; kept
    alive, they grew a test worker past 5 GB and one crashed in XLA. Clearing
    after every test keeps memory low but recompiles the small kernels every
    eager op needs (67 adam checks: 414 s against 128 s). The trigger is growth
    since the last clear, not a fixed size, because freed memory is not always
    given back to the system. No test relies on a program compiled by another.
    """
    yield
    resident = _resident_bytes()
    if _baseline["bytes"] is None:
        _baseline["bytes"] = resident
    elif resident - _baseline["bytes"] > _CACHE_GROWTH_BYTES:
        jax.clear_caches()
        _baseline["bytes"] = _resident_bytes()
