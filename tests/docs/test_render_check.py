"""The site's render check fails on markup that did not render.

``docs/hooks/render_check.py`` reads every built page: a docstring section
griffe did not parse (a paragraph starting ``Args:``), backticks left as
text, an unresolved cross-reference, or a link to a page or anchor that is
not there fails ``mkdocs build``. These tests feed it bad pages, and build a
tiny site whose docstrings make each mistake.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HOOKS = ROOT / "docs" / "hooks"


def _load(name):
    spec = importlib.util.spec_from_file_location(
        f"gradax_docs_{name}", HOOKS / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


render_check = _load("render_check")
api_tables = _load("api_tables")

GOOD = """<html><body><div class="doc doc-contents">
<p><span class="doc-section-title">Parameters:</span></p>
<table><tr><td><code>learning_rate</code></td><td>the step size</td></tr></table>
<p><span class="doc-section-title">Returns:</span></p>
<p>The optimizer: <code>chain(a, b)</code>, and <code>``x``</code> in code:</p>
<pre><code>x = `y` + [a][b]</code></pre>
<p id="here"><a href="#here">this anchor</a> and <a href="https://example.org">out</a></p>
</div></body></html>"""


def test_a_page_that_rendered_passes():
    assert render_check.page_problems(GOOD) == []


def test_an_unparsed_args_section_is_found():
    page = "<p>Args:\n  learning_rate: the step size.\n  b1: the decay.</p>"
    (problem,) = render_check.page_problems(page)
    assert "'Args:' section griffe did not parse" in problem


def test_raw_backticks_are_found():
    page = "<p>The optimizer: ``chain(a,</p><p>b)``.</p><p>a `split span</p>"
    problems = render_check.page_problems(page)
    assert len(problems) == 3 and all("raw backticks" in p for p in problems)


def test_an_unresolved_cross_reference_is_found():
    page = (
        "<p>See [gradax.nosuch][] and "
        '<autoref identifier="gradax.gone">x</autoref>.</p>'
    )
    problems = render_check.page_problems(page)
    assert len(problems) == 2 and all(
        "unresolved cross-reference" in p for p in problems
    )


def test_an_example_without_highlighted_code_is_found():
    good = (
        '<details class="example" open><summary>Example</summary>'
        '<div class="highlight"><pre><code>tx = gradax.sgd(0.1)</code></pre></div>'
        "</details>"
    )
    bad = (
        '<details class="example" open><summary>Example</summary>'
        "<p>tx = gradax.sgd(0.1)</p></details>"
    )
    assert render_check.page_problems(good) == []
    (problem,) = render_check.page_problems(bad)
    assert "an Example without highlighted code" in problem


def test_links_to_missing_pages_and_anchors_are_found(tmp_path):
    (tmp_path / "api").mkdir()
    (tmp_path / "api" / "index.html").write_text('<h3 id="gradax.sgd">sgd</h3>')
    (tmp_path / "index.html").write_text(
        '<a href="api/#gradax.sgd">ok</a> <a href="/api/">ok</a>'
        ' <a href="api/#gradax.nosuch">bad anchor</a> <a href="gone/">bad page</a>'
        ' <a href="https://example.org/x">outside</a>'
    )
    found = render_check.broken_links(tmp_path)
    assert found == [
        "index.html: broken link api/#gradax.nosuch",
        "index.html: broken link gone/",
    ]


def test_an_empty_type_column_is_dropped_and_a_full_one_kept():
    row = (
        '<tr class="doc-section-item">'
        "<td><code>{}</code></td><td>{}</td><td>d</td></tr>"
    )
    head = (
        "<table><thead><tr><th>Name</th><th>Type</th><th>Description</th></tr></thead>"
    )
    empty = head + row.format("x", " ") + row.format("y", "") + "</table>"
    typed = (
        head + row.format("x", "<code>int</code>") + row.format("y", "") + "</table>"
    )
    assert "Type" not in api_tables.drop_empty_type_columns(empty)
    assert api_tables.drop_empty_type_columns(empty).count("<td>") == 4
    assert api_tables.drop_empty_type_columns(typed) == typed


BAD_MODULE = '''
"""A package whose docstrings make the three mistakes."""


def unparsed(x):
    """A paragraph right above its arguments.
    Args:
      x: not a parameter table, since no blank line comes before Args.
    """


def backticks(x):
    """Returns its argument.

    Returns:
      The value ``x``, then a span that
      breaks `across
      two` items.
    """


def crossref(x):
    """Points at [bad.nosuch][], which does not exist."""
'''


@pytest.mark.parametrize("mistake", ["unparsed", "backticks", "crossref"])
def test_the_build_fails_on_each_mistake(tmp_path, mistake):
    pytest.importorskip("mkdocstrings_handlers.python", reason="the docs extra")
    (tmp_path / "bad.py").write_text(BAD_MODULE)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text(f"# Bad\n\n::: bad.{mistake}\n")
    (tmp_path / "mkdocs.yml").write_text(
        textwrap.dedent(f"""\
            site_name: bad
            hooks: [{HOOKS / "render_check.py"}]
            plugins:
              - mkdocstrings:
                  handlers:
                    python:
                      paths: [.]
                      options:
                        docstring_style: google
            """)
    )
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode != 0
    expected = {
        "unparsed": "'Args:' section griffe did not parse",
        "backticks": "raw backticks",
        "crossref": "unresolved cross-reference: '[bad.nosuch][]'",
    }[mistake]
    assert expected in done.stderr + done.stdout
