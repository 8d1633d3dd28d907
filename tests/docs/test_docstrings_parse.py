"""Every docstring in gradax parses, as the API reference parses it, without
a warning.

``mkdocs build --strict`` aborts on a warning of griffe, the parser
mkdocstrings reads docstrings with. An ``Args:`` item whose names run onto a
second line before the colon is one: griffe takes the first line alone as
``name: description`` and finds no colon (issue 47: ``hyperball.py:156:
Failed to get 'name: description' pair``). ``mkdocs build --quiet`` drops
warnings before strict mode counts them, so a build run with ``--quiet``
passes anyway; this test parses every docstring with the site's options and
extension (from mkdocs.yml) and fails on any warning, without building the
site. Several names share an item by keeping the colon on its first line:
``nesterov, momentum, bias_correction: ...``.
"""

from __future__ import annotations

import logging
import textwrap
from pathlib import Path

import pytest

griffe = pytest.importorskip("griffe", reason="the docs extra")
yaml = pytest.importorskip("yaml", reason="the docs extra (mkdocs reads YAML)")

ROOT = Path(__file__).resolve().parents[2]


def handler_options() -> dict:
    """The mkdocstrings Python handler's options in mkdocs.yml."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    [plugin] = [
        entry["mkdocstrings"]
        for entry in config["plugins"]
        if isinstance(entry, dict) and "mkdocstrings" in entry
    ]
    return plugin["handlers"]["python"]["options"]


def docstring_warnings(package: str, search_path: Path, caplog) -> list[str]:
    """griffe's warnings on every docstring of ``package``, parsed with the
    site's style, options and extension."""
    options = handler_options()
    style, parse_options = options["docstring_style"], options["docstring_options"]
    extensions = griffe.load_extensions(
        *(str(ROOT / extension) for extension in options.get("extensions", []))
    )
    loaded = griffe.load(
        package,
        search_paths=[str(search_path)],
        extensions=extensions,
        docstring_parser=style,
        docstring_options=parse_options,
    )
    seen: set[str] = set()

    def parse_all(obj) -> None:
        if obj.path in seen:
            return
        seen.add(obj.path)
        if obj.docstring is not None:
            # Not ``.parsed``: that is cached, and parsed once, warns once.
            obj.docstring.parse(style, **parse_options)
        for member in list(obj.members.values()):
            if not member.is_alias:
                parse_all(member)

    caplog.clear()
    with caplog.at_level(logging.WARNING):
        parse_all(loaded)
    assert len(seen) > 1, f"griffe found nothing in {package}"
    return [
        record.getMessage()
        for record in caplog.records
        if record.name.split(".")[0] == "griffe"
    ]


def test_every_gradax_docstring_parses_without_a_warning(caplog):
    assert docstring_warnings("gradax", ROOT, caplog) == []


def test_names_that_run_onto_a_second_line_are_caught(tmp_path, caplog):
    package = tmp_path / "griffe_probe_package"
    package.mkdir()
    (package / "__init__.py").write_text(
        textwrap.dedent('''\
            def split(a, b, c, d):
                """Names that run onto a second line before their colon.

                Args:
                  a, b,
                    c: the colon is not on the item's first line.
                  d: fine.
                """


            def joined(a, b, c, d):
                """Several names, the colon on the item's first line.

                Args:
                  a, b, c: the description may run onto
                    a second line.
                  d: fine.
                """
            ''')
    )
    warnings = docstring_warnings("griffe_probe_package", tmp_path, caplog)
    assert len(warnings) == 1, warnings
    assert "Failed to get 'name: description' pair from 'a, b,'" in warnings[0]
