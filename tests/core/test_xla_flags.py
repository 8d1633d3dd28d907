"""The suite sets its own device count, whatever XLA_FLAGS holds.

tests/conftest.py merges ``--xla_force_host_platform_device_count=8`` into
the caller's XLA_FLAGS: a count already there is replaced, every other flag
kept as written. Where JAX started before conftest could (pytest run from a
process that had used JAX), the run stops at once and says what to do.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from subprocess_env import (
    DEVICE_COUNT_FLAG,
    SUITE_DEVICE_COUNT,
    strip_device_count,
    with_device_count,
)

ROOT = Path(__file__).resolve().parents[2]
COUNT_NAME = DEVICE_COUNT_FLAG.lstrip("-") + "="
THIS_PROCESS = (
    f"{Path(__file__).relative_to(ROOT)}::test_this_process_runs_on_8_devices"
)


def test_a_count_is_replaced_and_the_other_flags_kept():
    cases = {
        "": f"{DEVICE_COUNT_FLAG}=8",
        f"{DEVICE_COUNT_FLAG}=1": f"{DEVICE_COUNT_FLAG}=8",
        f"--a=1 {DEVICE_COUNT_FLAG}=1 --b": f"--a=1 --b {DEVICE_COUNT_FLAG}=8",
        # XLA also reads one dash; every entry goes, not only the first.
        f"-{DEVICE_COUNT_FLAG.lstrip('-')}=2 --a {DEVICE_COUNT_FLAG}=4": (
            f"--a {DEVICE_COUNT_FLAG}=8"
        ),
        # Another flag whose name starts the same way stays, and so does
        # spacing inside the other flags' text.
        f"{DEVICE_COUNT_FLAG}_x=3 --dir='a  b'": (
            f"{DEVICE_COUNT_FLAG}_x=3 --dir='a  b' {DEVICE_COUNT_FLAG}=8"
        ),
    }
    for given, expected in cases.items():
        assert with_device_count(given) == expected, given
    assert strip_device_count(f"  {DEVICE_COUNT_FLAG}=16  ") == ""


def test_this_process_runs_on_8_devices():
    flags = os.environ["XLA_FLAGS"]
    counts = [f for f in flags.split() if f.lstrip("-").startswith(COUNT_NAME)]
    assert counts == [f"{DEVICE_COUNT_FLAG}={SUITE_DEVICE_COUNT}"], flags
    devices = jax.devices("cpu")
    assert len(devices) == SUITE_DEVICE_COUNT
    # One small program over all of them (it also gives --xla_dump_to,
    # where the caller set it, something to write).
    mesh = jax.sharding.Mesh(np.asarray(devices), ("d",))
    spread = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("d"))
    x = jax.device_put(jnp.arange(float(SUITE_DEVICE_COUNT)), spread)
    assert float(jax.jit(jnp.sum)(x)) == sum(range(SUITE_DEVICE_COUNT))


def _pytest_in_a_subprocess(xla_flags: str, code: str | None = None):
    """Runs the test above alone in a fresh interpreter under ``xla_flags``;
    ``code``: Python that runs first and then calls pytest itself."""
    environment = dict(os.environ, XLA_FLAGS=xla_flags, JAX_PLATFORMS="cpu")
    arguments = ["-q", "-n", "0", THIS_PROCESS]
    command = [sys.executable, "-m", "pytest", *arguments]
    if code is not None:
        command = [
            sys.executable,
            "-c",
            f"{code}\nsys.exit(pytest.main({arguments!r}))",
        ]
    return subprocess.run(
        command,
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def test_a_caller_count_of_1_is_replaced_and_their_other_flags_kept(tmp_path):
    dump = tmp_path / "dump"
    # The suite's compile options too, so the subprocess compiles as fast.
    flags = f"{DEVICE_COUNT_FLAG}=1 --xla_dump_to={dump}"
    flags += f" {strip_device_count(os.environ.get('XLA_FLAGS', ''))}"
    done = _pytest_in_a_subprocess(flags)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "1 passed" in done.stdout
    # XLA started with the caller's other flag: it wrote the program there.
    assert dump.is_dir() and any(dump.iterdir())


def test_jax_started_with_another_count_stops_the_run_saying_what_to_do():
    started = (
        "import sys, jax, pytest\n"
        "assert len(jax.devices('cpu')) == 1  # started before conftest"
    )
    done = _pytest_in_a_subprocess(f"{DEVICE_COUNT_FLAG}=1", started)
    output = done.stdout + done.stderr
    assert done.returncode == 4, output[-3000:]  # pytest's usage error
    assert "JAX started with 1 CPU device(s)" in output, output[-3000:]
    assert "Run pytest in a fresh process" in output
    assert "passed" not in done.stdout
