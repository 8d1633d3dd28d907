"""The oldest Python and jax gradax runs on, checked when gradax is imported.

pip refuses to install gradax where `requires-python` or the `jax`
requirement in pyproject.toml is not met; this check catches the rest (an
environment changed after installing, `--no-deps`, a source checkout on the
path) before an optimizer fails on a missing jax API. Keep the numbers equal
to pyproject.toml's (tests/core/test_requirements.py checks they are).
"""

from __future__ import annotations

import re
import sys

MINIMUM_PYTHON = (3, 10)
MINIMUM_JAX = (0, 5, 3)


def _release(version: str) -> tuple[int, ...]:
    """The leading numbers of a version string: `"0.8.1.dev2"` -> (0, 8, 1)."""
    match = re.match(r"\d+(?:\.\d+)*", version.strip())
    return tuple(int(part) for part in match.group(0).split(".")) if match else ()


def _dotted(numbers: tuple[int, ...]) -> str:
    return ".".join(str(n) for n in numbers)


def _installed_jax() -> str | None:
    """The installed jax's version, read without importing jax when possible."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("jax")
    except PackageNotFoundError:
        pass
    try:  # a source checkout on the path has no distribution metadata
        import jax
    except ImportError:
        return None
    return str(getattr(jax, "__version__", "")) or None


def check(python: tuple[int, ...] | None = None, jax: str | None = None) -> None:
    """Raise ImportError naming the version needed, if this one is too old.

    `python` and `jax` default to the running interpreter and the
    installed jax (arguments are for tests).
    """
    python = tuple(sys.version_info[:2]) if python is None else python
    if python < MINIMUM_PYTHON:
        raise ImportError(
            f"gradax needs Python {_dotted(MINIMUM_PYTHON)} or newer; this is "
            f"Python {_dotted(python)}."
        )
    found = _installed_jax() if jax is None else jax
    need = _dotted(MINIMUM_JAX)
    if found is None:
        raise ImportError(
            f"gradax needs jax {need} or newer, and jax is not installed: "
            f"pip install 'jax>={need}'."
        )
    release = _release(found)
    release += (0,) * (len(MINIMUM_JAX) - len(release))  # "0.8" is 0.8.0
    if release and release < MINIMUM_JAX:
        raise ImportError(
            f"gradax needs jax {need} or newer; this environment has jax "
            f"{found}: pip install --upgrade 'jax>={need}'."
        )


check()
