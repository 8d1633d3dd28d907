"""The suite's device count in XLA_FLAGS, and the environment of a
subprocess that chooses its own.

tests/conftest.py puts two kinds of options in XLA_FLAGS: 8 simulated CPU
devices, and options that make XLA compile fast. The device count replaces
any the caller gave (a common ``XLA_FLAGS=--xla_force_host_platform_device_count=1``
would otherwise leave the sharded tests one device); the caller's other flags
stay as written. A subprocess that simulates another number of devices (a
multi-host worker, the installed wheel's ``gradax bench``) drops the count
and keeps the rest: the compile options decide how long the subprocess
compiles, not what it checks, and programs compared with the suite's own are
then compiled alike.
"""

from __future__ import annotations

import os
import re

DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"
SUITE_DEVICE_COUNT = 8

# XLA reads ``--name=value`` and ``-name=value`` from XLA_FLAGS, separated by
# whitespace. Only the device count's own entries match (not a flag whose
# name merely starts the same way); the text around them is kept verbatim.
_DEVICE_COUNT_ENTRY = re.compile(
    r"(?:^|\s)--?" + DEVICE_COUNT_FLAG.lstrip("-") + r"(?:=\S*)?(?=\s|$)"
)


def strip_device_count(flags: str) -> str:
    """``flags`` (an XLA_FLAGS value) less every device-count entry."""
    return _DEVICE_COUNT_ENTRY.sub("", flags).strip()


def with_device_count(flags: str, count: int = SUITE_DEVICE_COUNT) -> str:
    """``flags`` with one device-count entry, ``count``, in place of any."""
    return f"{strip_device_count(flags)} {DEVICE_COUNT_FLAG}={count}".strip()


def without_device_count(drop: tuple[str, ...] = ()) -> dict[str, str]:
    """``os.environ`` less ``drop``, with XLA_FLAGS less its device count."""
    env = {k: v for k, v in os.environ.items() if k not in drop}
    flags = strip_device_count(env.pop("XLA_FLAGS", ""))
    if flags:
        env["XLA_FLAGS"] = flags
    return env
