"""A static type checker sees gradax's constructors (issue 25).

pyrefly (the checker CI runs on gradax/) must accept a file of typical calls
and report a misspelled keyword.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _pyrefly(*files: Path) -> subprocess.CompletedProcess:
    exe = shutil.which("pyrefly")
    assert exe, "pyrefly is in the test extra; install it with pip install -e .[test]"
    return subprocess.run(
        [exe, "check", *map(str, files)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_typical_calls_type_check_clean():
    out = _pyrefly(ROOT / "tests" / "typing" / "typical_calls.py")
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize(
    ("call", "reported"),
    [
        ("gradax.adamw(lr=1e-3)", "Unexpected keyword argument `lr`"),
        ("gradax.muon(0.02, ns_step=5)", "Unexpected keyword argument `ns_step`"),
        ("gradax.chain(gradax.adam(1e-3), nesterov=True)", "nesterov"),
    ],
)
def test_a_misspelled_keyword_is_reported(call, reported, tmp_path):
    # Written inside the repository so that pyrefly finds gradax as CI does.
    path = ROOT / "tests" / "typing" / f"_mistake_{abs(hash(call))}.py"
    path.write_text(f"import gradax\n\ntx = {call}\n")
    try:
        out = _pyrefly(path)
    finally:
        path.unlink()
    assert out.returncode != 0
    assert reported in out.stdout + out.stderr
