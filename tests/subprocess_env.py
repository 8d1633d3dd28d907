"""The environment of a subprocess that chooses its own device count.

tests/conftest.py puts two kinds of options in XLA_FLAGS: 8 simulated CPU
devices, and options that make XLA compile fast. A subprocess that simulates
another number of devices (a multi-host worker, the installed wheel's
``gradax bench``) keeps the compile options: they decide how long the
subprocess compiles, not what it checks, and programs compared with the
suite's own are then compiled alike.
"""

from __future__ import annotations

import os

DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"


def without_device_count(drop: tuple[str, ...] = ()) -> dict[str, str]:
    """``os.environ`` less ``drop``, with XLA_FLAGS less its device count."""
    env = {k: v for k, v in os.environ.items() if k not in drop}
    flags = [
        flag
        for flag in env.pop("XLA_FLAGS", "").split()
        if flag.split("=")[0] != DEVICE_COUNT_FLAG
    ]
    if flags:
        env["XLA_FLAGS"] = " ".join(flags)
    return env
