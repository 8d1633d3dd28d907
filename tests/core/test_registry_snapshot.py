"""scripts/registry_snapshot.py's fingerprint sees every bit, and no address."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax.numpy as jnp
import numpy as np

import gradax

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location(
        "registry_snapshot", ROOT / "scripts" / "registry_snapshot.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fingerprint_changes_with_a_bit_a_dtype_or_the_structure():
    fingerprint = _script().fingerprint
    tree = {"a": jnp.arange(3.0), "b": jnp.ones(2)}
    same = {"a": jnp.arange(3.0), "b": jnp.ones(2)}
    assert fingerprint(tree) == fingerprint(same)
    one_bit = np.nextafter(np.float32(1.0), np.float32(2.0))
    assert fingerprint(tree) != fingerprint({**tree, "b": jnp.array([1.0, one_bit])})
    assert fingerprint(tree) != fingerprint({**tree, "b": jnp.ones(2, jnp.float16)})
    assert fingerprint(tree) != fingerprint([tree["a"], tree["b"]])


def test_fingerprint_ignores_addresses_in_the_tree_definition():
    fingerprint = _script().fingerprint

    def build():
        # A function held as structure: its repr carries its address.
        return gradax.GradientTransformation(lambda p: (), lambda u, s, p=None: (u, s))

    assert fingerprint(build()) == fingerprint(build())


def test_differences_names_the_entry_and_the_field():
    differences = _script().differences
    old = {"adam|0": {"init": "a", "state0": "b"}}
    new = {"adam|0": {"init": "a", "state0": "c"}, "sgd|1": {"init": "d"}}
    assert differences(old, old) == []
    assert differences(old, new) == [
        "adam|0: state0 b -> c",
        "sgd|1: init None -> d",
    ]
