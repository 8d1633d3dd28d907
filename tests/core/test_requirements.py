"""The declared minimum versions: one set of numbers, checked at import."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from gradax import _requirements

ROOT = Path(__file__).resolve().parents[2]


def test_import_check_agrees_with_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    python = ".".join(map(str, _requirements.MINIMUM_PYTHON))
    assert project["requires-python"] == f">={python}"
    jax = ".".join(map(str, _requirements.MINIMUM_JAX))
    assert f"jax>={jax}" in project["dependencies"]


@pytest.mark.parametrize("version", ["0.10.2", "0.10.3", "0.11.2", "0.12.0.1", "1.0"])
def test_supported_jax_passes(version):
    _requirements.check(jax=version)


@pytest.mark.parametrize("version", ["0.6.2", "0.8.0", "0.10.1", "0.4.38", "0.10"])
def test_older_jax_names_the_version_needed(version):
    with pytest.raises(
        ImportError, match=rf"needs jax 0\.10\.2 or newer.*jax {version}"
    ):
        _requirements.check(jax=version)


def test_older_python_names_the_version_needed():
    with pytest.raises(
        ImportError, match=r"needs Python 3\.11 or newer; this is Python 3\.10"
    ):
        _requirements.check(python=(3, 10))


def test_development_versions_count_by_their_release():
    _requirements.check(jax="0.11.0.dev20260101")
    with pytest.raises(ImportError):
        _requirements.check(jax="0.10.1.dev20260101")


def test_import_gradax_with_an_old_jax_fails_at_once(tmp_path):
    # A jax 0.6.2 distribution found first on the path: importing gradax stops
    # before any gradax module imports jax, with the version it needs.
    info = tmp_path / "jax-0.6.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: jax\nVersion: 0.6.2\n")
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
    assert "ImportError: gradax needs jax 0.10.2 or newer" in done.stderr
    assert "jax 0.6.2" in done.stderr
    assert "_requirements.py" in done.stderr  # raised by the check, first
