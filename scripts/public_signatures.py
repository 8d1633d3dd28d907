"""Print the signature of every public gradax callable, one per line, sorted.

Run against two checkouts and diff the outputs to see what a change did to
the public API (issue 25 keeps signatures unchanged):

    PYTHONPATH=/path/to/old python scripts/public_signatures.py > old.txt
    python scripts/public_signatures.py > new.txt
    diff old.txt new.txt

With ``--calls``, annotations are left out: what a caller sees (argument
names, kinds and defaults).
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys

MODULES = (
    "gradax",
    "gradax.contrib",
    "gradax.tree",
    "gradax.losses",
    "gradax.projections",
    "gradax.schedules",
    "gradax.transforms",
    "gradax.linesearch",
    "gradax.sharding",
    "gradax.second_order",
    "gradax.perturbations",
    "gradax.assignment",
    "gradax.microbatching",
    "gradax.experimental.aggregating",
    "gradax.declare",
    "gradax.linalg",
    "gradax.tree_utils",
)


def main() -> None:
    lines = set()
    for name in MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        public = getattr(module, "__all__", None) or [
            n for n in dir(module) if not n.startswith("_")
        ]
        for attr in public:
            obj = getattr(module, attr, None)
            if not callable(obj) or inspect.ismodule(obj):
                continue
            try:
                signature = inspect.signature(obj)
            except (TypeError, ValueError):
                lines.add(f"{name}.{attr}(no signature)")
                continue
            if "--calls" in sys.argv:
                # What a caller sees: names, kinds and defaults, no annotations.
                signature = signature.replace(
                    parameters=[
                        p.replace(annotation=inspect.Parameter.empty)
                        for p in signature.parameters.values()
                    ],
                    return_annotation=inspect.Signature.empty,
                )
            # Function defaults print with their address; it differs per run.
            signature = re.sub(r" at 0x[0-9a-f]+", "", str(signature))
            lines.add(f"{name}.{attr}{signature}")
    print("\n".join(sorted(lines)))


if __name__ == "__main__":
    main()
