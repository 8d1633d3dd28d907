"""Conformance registry entries for the contrib optimizers (see registry.py)."""

from __future__ import annotations

from registry_base import Entry

ENTRIES: list[Entry] = []
