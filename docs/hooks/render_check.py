"""mkdocs hook: the built pages read well; markup that did not render fails.

Four mistakes leave no warning of their own and show on the site as text:

- a docstring section griffe did not parse (bad indentation, no blank line
  before ``Args:``) renders as a paragraph with a line starting ``Args:``
  instead of a parameter table;
- reStructuredText's double backticks, or a code span split across two
  items of a Returns section, show as literal backticks;
- a cross-reference that did not resolve stays as ``[text][target]`` text,
  and a link to a page or anchor that is not on the site goes nowhere;
- an ``Example:`` whose code is not a doctest or a fenced block shows as
  prose, not highlighted code.

Each page is read after it is rendered (outside ``code``, ``pre`` and
``math``); links are followed once every page is written. The build fails
naming the page and the text. ``python docs/hooks/render_check.py SITE``
checks a built site alone.
"""

from __future__ import annotations

import re
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

# The Google-style section titles that griffe turns into tables or blocks; one
# that starts a line of a paragraph was not parsed.
_SECTION = re.compile(
    r"^\s*(Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments|"
    r"Other Parameters|Returns|Yields|Receives|Raises|Warns|Attributes|"
    r"Example|Examples):",
    re.MULTILINE,
)
_EXAMPLE = re.compile(r'<details class="examples?"[^>]*>(.*?)</details>', re.DOTALL)
_UNRESOLVED = re.compile(r"\[[^\]\n]+\]\[[^\]\n]*\]")
_VERBATIM = {"code", "pre", "math", "script", "style", "kbd", "samp"}


class _Page(HTMLParser):
    """The paragraphs' text outside code, the ids and the links of a page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.verbatim = 0
        self.paragraphs: list[str] = []
        self.text: list[str] = []
        self.ids: set[str] = set()
        self.links: list[str] = []
        self._paragraph: list[str] | None = None
        self._title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("id"):
            self.ids.add(values["id"] or "")
        if tag == "a" and values.get("href"):
            self.links.append(values["href"] or "")
        if tag in _VERBATIM:
            self.verbatim += 1
        elif tag == "p":
            self._paragraph = []
        elif "doc-section-title" in (values.get("class") or "").split():
            # mkdocstrings' own title over a parsed section's table.
            self._title = True
        if tag == "autoref":  # mkdocs-autorefs' placeholder, left unresolved
            self.text.append(f"<autoref {values.get('identifier', '')}>")

    def handle_endtag(self, tag: str) -> None:
        if tag in _VERBATIM:
            self.verbatim = max(0, self.verbatim - 1)
        elif tag == "p" and self._paragraph is not None:
            if not self._title:
                self.paragraphs.append("".join(self._paragraph).strip())
            self._paragraph = None
            self._title = False

    def handle_data(self, data: str) -> None:
        if self.verbatim:
            return
        self.text.append(data)
        if self._paragraph is not None:
            self._paragraph.append(data)


def _parse(html: str) -> _Page:
    page = _Page()
    page.feed(html)
    page.close()
    return page


def page_problems(html: str) -> list[str]:
    """What did not render on one page, one line each: unparsed sections,
    Examples without highlighted code, raw backticks, unresolved
    cross-references."""
    page = _parse(html)
    found = []
    for paragraph in page.paragraphs:
        title = _SECTION.search(paragraph)
        if title:
            found.append(
                f"a '{title.group(1)}:' section griffe did not parse "
                f"(rendered as a paragraph): {paragraph[:70]!r}"
            )
    # An Example section is code: doctests become highlighted pycon blocks
    # (griffe_gradax.py); one without a highlighted block shows as prose.
    for example in _EXAMPLE.finditer(html):
        if 'class="highlight"' not in example.group(1):
            found.append(
                "an Example without highlighted code: "
                f"{' '.join(re.sub('<[^>]+>', ' ', example.group(1)).split())[:70]!r}"
            )
    text = "".join(page.text)
    # A backtick outside code is markup that did not render: reStructuredText's
    # double backticks, or a code span split across two Returns items.
    for match in re.finditer(r"`+", text):
        around = text[max(0, match.start() - 30) : match.end() + 30]
        found.append(f"raw backticks: {' '.join(around.split())!r}")
    for match in _UNRESOLVED.finditer(text):
        found.append(f"unresolved cross-reference: {match.group(0)!r}")
    found += [
        f"unresolved cross-reference: {t}"
        for t in page.text
        if t.startswith("<autoref")
    ]
    return found


def _target(site: Path, page: Path, href: str) -> tuple[Path, str] | None:
    """The file and anchor a link inside the site points at, or None."""
    parts = urlsplit(href)
    if parts.scheme or parts.netloc or href.startswith(("mailto:", "javascript:")):
        return None
    path = unquote(parts.path)
    if not path:
        target = page
    elif path.startswith("/"):  # from the site's root (the 404 page's links)
        target = site / path.lstrip("/")
    else:
        target = (page.parent / path).resolve()
    if target.is_dir() or path.endswith("/"):
        target = target / "index.html"
    return target, unquote(parts.fragment)


def broken_links(site: Path) -> list[str]:
    """``page: href`` for each link to a missing page or anchor of the site."""
    site = site.resolve()
    pages = {
        page.resolve(): _parse(page.read_text(encoding="utf-8"))
        for page in site.rglob("*.html")
    }
    found = []
    for page, parsed in sorted(pages.items()):
        for href in parsed.links:
            target = _target(site, page, href)
            if target is None:
                continue
            path, anchor = target
            if path.suffix == ".html" and path not in pages:
                ok = False
            elif path.suffix != ".html":
                ok = path.exists()
            else:
                ok = not anchor or anchor in pages[path].ids
            if not ok:
                found.append(f"{page.relative_to(site)}: broken link {href}")
    return found


_problems: list[str] = []


def on_pre_build(config: Any) -> None:
    _problems.clear()


def on_post_page(output: str, page: Any, config: Any) -> str:
    _problems.extend(f"{page.file.src_uri}: {p}" for p in page_problems(output))
    return output


def on_post_build(config: Any) -> None:
    found = _problems + broken_links(Path(config["site_dir"]))
    if found:
        from mkdocs.exceptions import PluginError

        raise PluginError(
            "markup that did not render, or links that go nowhere:\n  "
            + "\n  ".join(found)
        )


if __name__ == "__main__":
    site = Path(sys.argv[1] if len(sys.argv) > 1 else "site")
    problems = [
        f"{page.relative_to(site)}: {p}"
        for page in sorted(site.rglob("*.html"))
        for p in page_problems(page.read_text(encoding="utf-8"))
    ] + broken_links(site)
    print("\n".join(problems) or "no problems")
    sys.exit(1 if problems else 0)
