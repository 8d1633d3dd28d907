"""mkdocs hook: the built site loads no script or stylesheet from elsewhere.

The site must work offline (no CDN): the theme (mkdocs-material) serves its
own scripts, styles and icons and uses the system's fonts (``font: false``:
no Google fonts), code is highlighted at build time by Pygments
(``pymdownx.highlight`` in ``mkdocs.yml``) and the API pages' math is MathML
made at build time (``griffe_gradax.py``). After the build, every HTML page
and stylesheet is read; a ``<script src=...>`` or ``<link href=...>``
(stylesheet, icon, font), or a stylesheet's ``@import`` or ``url(...)``, that
points outside the site fails the build, naming the file and the address.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

_EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:)?//", re.IGNORECASE)


class _Loads(HTMLParser):
    """Collects what a page loads: script sources and linked resources."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "script" and values.get("src"):
            self.found.append(f"<script src={values['src']}>")
        elif tag == "link" and values.get("href"):
            rel = (values.get("rel") or "").lower()
            if rel not in ("canonical", "alternate", "prev", "next"):
                self.found.append(f"<link rel={rel} href={values['href']}>")


def external_loads(html: str) -> list[str]:
    """The script and link tags of ``html`` whose address is outside the site."""
    parser = _Loads()
    parser.feed(html)
    return [tag for tag in parser.found if _EXTERNAL.search(tag.split("=", 2)[-1])]


# A stylesheet's own loads: ``@import url(...)``, ``@import "..."`` and
# ``url(...)`` (fonts, images), as a theme's font option would add them.
_CSS_LOAD = re.compile(
    r"""@import\s+(?:url\()?\s*["']?([^"')\s;]+)|url\(\s*["']?([^"')\s]+)"""
)


def external_css_loads(css: str) -> list[str]:
    """The addresses outside the site that a stylesheet loads."""
    found = []
    for match in _CSS_LOAD.finditer(css):
        address = match.group(1) or match.group(2)
        if _EXTERNAL.search(address):
            found.append(f"url({address})")
    return found


def find_external(site_dir: Path) -> list[str]:
    """``page: tag`` for each external load in the built site: the pages'
    scripts and links, and what its stylesheets import."""
    found = []
    for page in sorted(site_dir.rglob("*.html")):
        for tag in external_loads(page.read_text(encoding="utf-8")):
            found.append(f"{page.relative_to(site_dir)}: {tag}")
    for sheet in sorted(site_dir.rglob("*.css")):
        for load in external_css_loads(sheet.read_text(encoding="utf-8")):
            found.append(f"{sheet.relative_to(site_dir)}: {load}")
    return found


def on_post_build(config: Any) -> None:
    found = find_external(Path(config["site_dir"]))
    if found:
        from mkdocs.exceptions import PluginError

        raise PluginError(
            "the site loads scripts or stylesheets from elsewhere (it must "
            "work offline):\n  " + "\n  ".join(found)
        )
