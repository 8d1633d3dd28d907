"""The documentation site works offline: nothing is loaded from elsewhere.

``docs/hooks/offline_check.py`` fails ``mkdocs build`` on a page that loads
a script or stylesheet from another site; CI builds the site with it. These
tests check the checker, and that the configuration highlights code at build
time (Pygments) instead of with highlight.js from a CDN.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _load_checker():
    path = ROOT / "docs" / "hooks" / "offline_check.py"
    spec = importlib.util.spec_from_file_location("gradax_docs_offline", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


offline_check = _load_checker()

PAGE = """<html><head>
<link rel="stylesheet" href="../css/base.css">
<link rel="stylesheet" href="https://cdn.example.org/highlight/github.min.css">
<link rel="canonical" href="https://example.org/docs/">
<script src="../js/base.js"></script>
<script src="//cdn.example.org/highlight.min.js"></script>
<script>var inline = 1;</script>
</head><body><a href="https://example.org">a link is not a load</a></body></html>
"""


def test_external_scripts_and_stylesheets_are_found():
    assert offline_check.external_loads(PAGE) == [
        "<link rel=stylesheet href=https://cdn.example.org/highlight/github.min.css>",
        "<script src=//cdn.example.org/highlight.min.js>",
    ]


def test_a_site_with_an_external_load_is_named_by_page(tmp_path):
    (tmp_path / "api").mkdir()
    (tmp_path / "index.html").write_text('<script src="js/base.js"></script>')
    (tmp_path / "api" / "index.html").write_text(PAGE)
    found = offline_check.find_external(tmp_path)
    assert len(found) == 2 and all(f.startswith("api/index.html: ") for f in found)
    (tmp_path / "api" / "index.html").write_text("<p>local only</p>")
    assert offline_check.find_external(tmp_path) == []


def test_a_stylesheet_that_imports_fonts_from_elsewhere_is_found(tmp_path):
    (tmp_path / "assets").mkdir()
    (tmp_path / "assets" / "main.css").write_text(
        '@import url("https://fonts.googleapis.com/css?family=Roboto");\n'
        "@font-face { src: url(fonts/local.woff2); }\n"
        ".icon { background: url('//cdn.example.org/i.svg'); }\n"
    )
    assert offline_check.find_external(tmp_path) == [
        "assets/main.css: url(https://fonts.googleapis.com/css?family=Roboto)",
        "assets/main.css: url(//cdn.example.org/i.svg)",
    ]


def test_the_site_highlights_at_build_time_and_runs_the_check():
    config = (ROOT / "mkdocs.yml").read_text()
    assert "name: material" in config
    # Material would fetch Google fonts unless told not to.
    assert "font: false" in config
    assert "use_pygments: true" in config
    assert "docs/hooks/offline_check.py" in config
