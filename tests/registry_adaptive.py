"""Conformance registry entries for the adaptive optimizers (see registry.py)."""

from __future__ import annotations

from registry_base import Entry

ENTRIES: list[Entry] = []
