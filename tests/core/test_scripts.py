"""The scripts in scripts/: code_size.py counts code lines as it says, over
modules that exist; registry_snapshot.py's fingerprint sees every bit, and no
address."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax.numpy as jnp
import numpy as np

import gradax

ROOT = Path(__file__).resolve().parents[2]


def _script(name: str):
    """The module scripts/<name>.py (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
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
    assert _script("code_size").code_lines(source) == 7


def test_every_kernel_module_named_exists():
    script = _script("code_size")
    for name in script.KERNEL:
        assert (ROOT / "gradax" / "_core" / f"{name}.py").is_file(), name
    sizes = script.sizes(repeats=False)
    assert 0 < sizes["kernel"] < sizes["core_all"]


def test_fingerprint_changes_with_a_bit_a_dtype_or_the_structure():
    fingerprint = _script("registry_snapshot").fingerprint
    tree = {"a": jnp.arange(3.0), "b": jnp.ones(2)}
    same = {"a": jnp.arange(3.0), "b": jnp.ones(2)}
    assert fingerprint(tree) == fingerprint(same)
    one_bit = np.nextafter(np.float32(1.0), np.float32(2.0))
    assert fingerprint(tree) != fingerprint({**tree, "b": jnp.array([1.0, one_bit])})
    assert fingerprint(tree) != fingerprint({**tree, "b": jnp.ones(2, jnp.float16)})
    assert fingerprint(tree) != fingerprint([tree["a"], tree["b"]])


def test_fingerprint_ignores_addresses_in_the_tree_definition():
    fingerprint = _script("registry_snapshot").fingerprint

    def build():
        # A function held as structure: its repr carries its address.
        return gradax.GradientTransformation(lambda p: (), lambda u, s, p=None: (u, s))

    assert fingerprint(build()) == fingerprint(build())


def test_differences_names_the_entry_and_the_field():
    differences = _script("registry_snapshot").differences
    old = {"adam|0": {"init": "a", "state0": "b"}}
    new = {"adam|0": {"init": "a", "state0": "c"}, "sgd|1": {"init": "d"}}
    assert differences(old, old) == []
    assert differences(old, new) == [
        "adam|0: state0 b -> c",
        "sgd|1: init None -> d",
    ]
