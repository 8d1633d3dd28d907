"""Two processes with jax.distributed train like one process (CPU, gloo)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
from subprocess_env import without_device_count

WORKER = Path(__file__).with_name("multihost_worker.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _run(num_processes: int, out: Path) -> None:
    port = str(_free_port())
    env = without_device_count()
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(i), str(num_processes), port, str(out)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(num_processes)
    ]
    for proc in procs:
        output, _ = proc.communicate(timeout=240)
        assert proc.returncode == 0, output[-3000:]


def test_two_processes_match_one(tmp_path):
    single, multi = tmp_path / "single.npz", tmp_path / "multi.npz"
    _run(1, single)
    _run(2, multi)
    a, b = np.load(single), np.load(multi)
    assert set(a.files) == set(b.files) == {"w1", "w2", "b"}
    for name in a.files:
        np.testing.assert_allclose(b[name], a[name], rtol=1e-6, atol=1e-7)
    # Training moved the parameters (the comparison is not of initial values).
    assert np.abs(a["w1"]).sum() > 0
