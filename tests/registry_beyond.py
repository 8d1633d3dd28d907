"""Conformance registry entries for the beyond optimizers (see registry.py)."""

from __future__ import annotations

from registry_base import Entry

ENTRIES: list[Entry] = []
