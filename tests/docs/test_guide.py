"""Every code example of docs/writing-a-transformation.md runs, in order.

The page's examples are the files a contributor writes inside the package:
each runs as a module of the package it names (the optimizer file as
``gradax.transforms.thing``, the re-export as ``gradax/__init__.py``'s
lines), so their relative imports resolve as they would there.
"""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

from registry_base import Entry

import gradax

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "writing-a-transformation.md"
THING = "gradax.transforms.thing"


def _python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", GUIDE.read_text(), re.S | re.M)


def _package_of(block: str) -> str:
    # The re-export is written in gradax/__init__.py; every other example in
    # the optimizer's file, gradax/transforms/thing.py.
    return "gradax" if "from .transforms.thing import" in block else "gradax.transforms"


def test_every_example_of_the_guide_runs():
    blocks = _python_blocks()
    assert len(blocks) >= 6
    module = types.ModuleType(THING)
    module.__package__ = "gradax.transforms"
    namespace = module.__dict__
    namespace.update(gradax=gradax, Entry=Entry)
    sys.modules[THING] = module
    try:
        for i, block in enumerate(blocks):
            namespace["__package__"] = _package_of(block)
            exec(compile(block, f"{GUIDE.name}, example {i + 1}", "exec"), namespace)
    finally:
        del sys.modules[THING]
    # The worked example is one file of about a hundred lines, under 120.
    code = [
        line
        for line in blocks[0].splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    assert len(code) < 120, len(code)
    assert isinstance(namespace["thing"](0.1), gradax.Alias)
