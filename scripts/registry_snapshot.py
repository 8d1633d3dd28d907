"""Fingerprint every conformance-registry entry, to prove a refactor changed nothing.

For each entry of ``tests/registry.py`` (and each entry whose update needs the
objective's value, ``EXTRA_ARG_CASES``) this builds the transformation, runs
``init`` and three eager updates on the suite's parameters with fixed
gradients, and records a hash of: the object's pytree (tree definition and
leaves), its ``repr``, the initial state, and the updates and state after each
step. A hash covers tree structure, dtypes, shapes and every bit, so two
checkouts whose snapshots are equal build the same objects, state trees and
numbers. Memory addresses printed in a ``repr`` or a tree definition (a
function's ``at 0x...``) are left out: they differ between processes.

Run against two checkouts and compare:

    PYTHONPATH=/path/to/old python scripts/registry_snapshot.py old.json
    python scripts/registry_snapshot.py new.json
    python scripts/registry_snapshot.py --diff old.json new.json

It needs the test extra (the registry lives in tests/). About two minutes on
two CPU cores. `scripts/public_signatures.py` is the same check for the
public call signatures.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
STEPS = 3
_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")


def _text(value: Any) -> bytes:
    return _ADDRESS.sub("0x", value).encode()


def fingerprint(tree: Any) -> str:
    """A hash of a pytree's structure and of every leaf's dtype, shape and bits."""
    import jax
    import numpy as np

    leaves, treedef = jax.tree_util.tree_flatten(tree)
    digest = hashlib.sha256(_text(str(treedef)))
    for leaf in leaves:
        dtype = getattr(leaf, "dtype", None)
        if dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
            leaf = jax.random.key_data(leaf)
        try:
            array = np.asarray(leaf)
        except (TypeError, ValueError):  # not an array: its repr
            digest.update(_text(repr(leaf)))
            continue
        digest.update(f"{array.dtype}{array.shape}".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()[:16]


def snapshot() -> dict[str, dict[str, str]]:
    """Every entry's fingerprints, keyed by its name and position."""
    sys.path.insert(0, str(ROOT / "tests"))
    import jax
    import registry
    from conformance_base import make_params
    from registry_base import loss_fn

    import gradax

    params = make_params()
    grads = jax.tree.map(lambda p: 0.1 * p + 0.3, params)
    cases: list[tuple[str, Any, Any]] = [
        (f"{entry.name}|{registry.entry_id(entry)}|{i}", entry.build, None)
        for i, entry in enumerate(registry.ENTRIES)
    ]
    cases += [
        (f"{case.name}|extra|{i}", case.make, case)
        for i, case in enumerate(registry.EXTRA_ARG_CASES)
    ]
    result = {}
    for key, build, case in cases:
        record: dict[str, str] = {}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the entries' own warnings
                tx = build()
                state = tx.init(params)
            record["object"] = fingerprint(tx)
            record["repr"] = hashlib.sha256(_text(repr(tx))).hexdigest()[:16]
            record["init"] = fingerprint(state)
            current = params
            for step in range(STEPS):
                extra = case.extra(current, loss_fn(current)) if case else {}
                scaled = jax.tree.map(lambda g, k=step: g * (k + 1), grads)
                updates, state = tx.update(scaled, state, current, **extra)
                current = gradax.apply_updates(current, updates)
                record[f"updates{step}"] = fingerprint(updates)
                record[f"state{step}"] = fingerprint(state)
        except Exception as error:  # noqa: BLE001 - recorded, and compared too
            record["error"] = f"{type(error).__name__}: {error}"[:300]
        result[key] = record
    return result


def differences(old: dict, new: dict) -> list[str]:
    """One line per entry and field whose fingerprint differs."""
    lines = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key, {}), new.get(key, {})
        for field in sorted(set(a) | set(b)):
            if a.get(field) != b.get(field):
                lines.append(f"{key}: {field} {a.get(field)} -> {b.get(field)}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, help="write the snapshot here")
    parser.add_argument("--diff", nargs=2, type=Path, metavar=("OLD", "NEW"))
    args = parser.parse_args()
    if args.diff:
        old, new = (json.loads(path.read_text()) for path in args.diff)
        lines = differences(old, new)
        print("\n".join(lines))
        print(f"{len(old)} and {len(new)} entries, {len(lines)} differences")
        sys.exit(1 if lines else 0)
    if args.out is None:
        parser.error("give a file to write, or --diff OLD NEW")
    result = snapshot()
    args.out.write_text(json.dumps(result, indent=1, sort_keys=True))
    errors = sum("error" in record for record in result.values())
    print(f"{len(result)} entries ({errors} raised) written to {args.out}")


if __name__ == "__main__":
    main()
