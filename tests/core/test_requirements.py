"""The declared minimum versions: one set of numbers, checked at import."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gradax import _requirements

ROOT = Path(__file__).resolve().parents[2]


def _project_value(key: str) -> str:
    # Python 3.10 has no tomllib; the two lines are plain `key = value` ones.
    text = (ROOT / "pyproject.toml").read_text()
    found = re.findall(rf"^{key} = (.*?)(?:\s+#.*)?$", text, re.MULTILINE)
    assert len(found) == 1, f"pyproject.toml: one `{key} = ...` line, got {found}"
    return found[0]


def test_import_check_agrees_with_pyproject():
    python = ".".join(map(str, _requirements.MINIMUM_PYTHON))
    assert _project_value("requires-python") == f'">={python}"'
    jax = ".".join(map(str, _requirements.MINIMUM_JAX))
    assert f'"jax>={jax}"' in _project_value("dependencies")
    # The classifiers name each supported Python from the floor on.
    assert (
        f'"Programming Language :: Python :: {python}"'
        in (ROOT / "pyproject.toml").read_text()
    )


@pytest.mark.parametrize(
    "version", ["0.5.3", "0.6.2", "0.10.2", "0.11.2", "0.12.0.1", "1.0"]
)
def test_supported_jax_passes(version):
    _requirements.check(jax=version)


@pytest.mark.parametrize("version", ["0.5.2", "0.4.38", "0.3.25", "0.5"])
def test_older_jax_names_the_version_needed(version):
    with pytest.raises(
        ImportError, match=rf"needs jax 0\.5\.3 or newer.*jax {version}"
    ):
        _requirements.check(jax=version)


def test_older_python_names_the_version_needed():
    with pytest.raises(
        ImportError, match=r"needs Python 3\.10 or newer; this is Python 3\.9"
    ):
        _requirements.check(python=(3, 9))


def test_development_versions_count_by_their_release():
    _requirements.check(jax="0.6.0.dev20250101")
    with pytest.raises(ImportError):
        _requirements.check(jax="0.5.2.dev20250101")


def test_import_gradax_with_an_old_jax_fails_at_once(tmp_path):
    # A jax 0.4.38 distribution found first on the path: importing gradax stops
    # before any gradax module imports jax, with the version it needs.
    info = tmp_path / "jax-0.4.38.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: jax\nVersion: 0.4.38\n"
    )
    code = "import sys; sys.path.insert(0, sys.argv[1]); import gradax"
    environment = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    assert "ImportError: gradax needs jax 0.5.3 or newer" in done.stderr
    assert "jax 0.4.38" in done.stderr
    assert "_requirements.py" in done.stderr  # raised by the check, first
