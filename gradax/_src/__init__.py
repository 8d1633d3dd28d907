"""Compatibility shims for code that imports optax's private modules.

Real optax code reaches into `optax._src` (`from optax._src import base`,
`optax._src.utils.canonicalize_dtype`). With `optax` replaced by
`gradax` those paths land here: one small module per private optax module
that such code imports, each binding optax's names to gradax's existing
objects and defining nothing of its own. A name gradax has no counterpart for
is left out (an `AttributeError` or `ImportError`, as for any missing
name). docs/optax-private-paths.md lists the modules, the names and how often
public code uses them.

`import gradax` does not import this package; its modules load on first use.
New code should use the public names (`gradax.GradientTransformation`).
"""

import importlib

# optax 0.2.8's private modules that public code imports (measured; see
# docs/optax-private-paths.md). optax's deprecations and test_utils modules
# are its own machinery and have no counterpart here.
_SHIMS = frozenset(
    {
        "alias",
        "base",
        "combine",
        "constrain",
        "factorized",
        "linear_algebra",
        "linesearch",
        "lookahead",
        "numerics",
        "schedule",
        "transform",
        "update",
        "utils",
        "wrappers",
    }
)


def __getattr__(name: str) -> object:
    # `import gradax._src as s; s.base` works as in optax, where importing the
    # package has already loaded every private module.
    if name in _SHIMS:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_SHIMS})
