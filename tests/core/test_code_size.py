"""scripts/code_size.py counts code lines as it says, over modules that exist."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location(
        "code_size", ROOT / "scripts" / "code_size.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docstrings_comments_and_blank_lines_are_not_code():
    source = '''"""A module docstring
over two lines."""

# a comment
import os  # code with a comment


def f(x):
    """A function docstring."""
    y = (x +
         1)
    return "a string that is not a docstring"


class C:
    """A class docstring."""

    z = 1
'''
    # import, def, two lines of y, return, class, z.
    assert _script().code_lines(source) == 7


def test_every_kernel_module_named_exists():
    script = _script()
    for name in script.KERNEL:
        assert (ROOT / "gradax" / "_core" / f"{name}.py").is_file(), name
    sizes = script.sizes(repeats=False)
    assert 0 < sizes["kernel"] < sizes["core_all"]
