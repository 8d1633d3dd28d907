"""Registry entries for the top-level gradax modules (see tests/registry.py)."""

from __future__ import annotations

from registry_base import Entry

ENTRIES: list[Entry] = [
    Entry("identity"),
    Entry("set_to_zero"),
]
