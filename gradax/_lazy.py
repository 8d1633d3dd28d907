"""Names a subpackage offers for optax compatibility but gradax defines elsewhere."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable


def reexport_lazily(
    module_name: str, names: Iterable[str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """A module `__getattr__` and `__dir__` that serve `names` from gradax.

    The names are looked up on the top-level `gradax` package on first use,
    so a subpackage can offer them without importing the modules that define
    them (which import the subpackage: a cycle).
    """
    served = frozenset(names)

    def __getattr__(name: str) -> object:
        if name in served:
            return getattr(importlib.import_module("gradax"), name)
        raise AttributeError(f"module {module_name!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[module_name]), *served})

    return __getattr__, __dir__
