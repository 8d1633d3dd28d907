"""The ``gradax`` command follows Python's conventions, and the README matches it.

``gradax --version``, ``python -m gradax``, errors that name the subcommand,
exit statuses documented in ``--help`` and in the README, and the README's
lists of names equal to what ``--help`` offers.
"""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
import sys
from pathlib import Path

import pytest

import gradax
from gradax_cli import EXIT_STATUSES, main

README = Path(__file__).resolve().parents[2] / "README.md"


def run_module(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gradax", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def help_text(*command: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
        main([*command, "--help"])
    assert done.value.code == 0
    return out.getvalue()


def test_version_in_a_real_process():
    done = run_module("--version")
    assert done.returncode == 0, done.stderr
    line = done.stdout.strip()
    assert line.startswith(f"gradax {gradax.__version__} (jax "), line
    assert "Python 3." in line


def test_python_dash_m_gradax_is_the_command():
    done = run_module("demo", "--bogus")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "gradax demo: unrecognized arguments: --bogus (see gradax demo --help)"
    ]
    assert done.stdout == ""


def test_import_gradax_loads_neither_the_command_nor_dunder_main():
    code = (
        "import sys, gradax; "
        "print(sorted(m for m in sys.modules if m == 'gradax.__main__' "
        "or m.startswith('gradax_cli')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("argv", "prefix"),
    [
        (["demo", "--bogus"], "gradax demo: unrecognized arguments: --bogus"),
        (["bench", "--bogus", "x"], "gradax bench: unrecognized arguments: --bogus x"),
        (["demo", "--steps", "x"], "gradax demo: argument --steps"),
        (["bench", "--only", "nosuch"], "gradax bench: unknown benchmark nosuch"),
        (["nosuch"], "gradax: argument COMMAND: invalid choice"),
        ([], "gradax: the following arguments are required"),
    ],
)
def test_errors_name_the_subcommand(argv, prefix, capsys):
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(prefix), captured.err


@pytest.mark.parametrize("command", [(), ("demo",), ("bench",)])
def test_help_lists_the_exit_statuses(command):
    text = help_text(*command)
    table = text[text.index("exit status:") :]
    for code, meaning in EXIT_STATUSES:
        assert re.search(rf"^\s+{code}\s+{re.escape(meaning)}$", table, re.M), table


def test_readme_lists_the_exit_statuses():
    text = README.read_text()
    for code, meaning in EXIT_STATUSES:
        assert re.search(rf"^\| {code} \| {re.escape(meaning)} \|$", text, re.M), code


def _names_after(label: str, text: str) -> list[str]:
    """The comma-separated names that follow ``label`` up to the end of its list."""
    start = text.index(label) + len(label)
    names = re.match(r"\s*((?:\w+\s*,\s*)*\w+)", text[start:])
    assert names is not None, label
    return [n.strip() for n in names.group(1).split(",")]


def test_readme_names_the_demo_optimizers_as_help_does():
    offered = _names_after("from:", " ".join(help_text("demo").split()))
    readme = _names_after("Names:", " ".join(README.read_text().split()))
    assert readme == offered


def test_readme_names_the_benchmarks_as_help_does():
    offered = _names_after("from:", " ".join(help_text("bench").split()))
    readme_text = " ".join(README.read_text().split())
    readme = _names_after("Benchmarks (`--only`):", readme_text)
    assert readme == offered
