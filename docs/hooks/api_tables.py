"""mkdocs hook: drop the Type column of API tables where it is empty.

gradax's docstrings give no types (the signatures say ``Any``: a number, an
array or a schedule), so mkdocstrings' parameter and return tables would
carry an empty Type column beside the description. After a page is rendered,
a table whose Type cells are all empty loses that column.
"""

from __future__ import annotations

import re
from typing import Any

_TABLE = re.compile(r"<table>.*?</table>", re.DOTALL)
_HEADER = re.compile(r"<th>(.*?)</th>\s*", re.DOTALL)
_ROW = re.compile(r'(<tr class="doc-section-item">)(.*?)(</tr>)', re.DOTALL)
_CELL = re.compile(r"<td>.*?</td>\s*", re.DOTALL)


def _cells(row: str) -> list[str]:
    return _CELL.findall(row)


def _drop_empty_type(match: re.Match) -> str:
    table = match.group(0)
    headers = _HEADER.findall(table)
    if "Type" not in headers:
        return table
    column = headers.index("Type")
    rows = [_cells(m.group(2)) for m in _ROW.finditer(table)]
    if not rows or any(
        len(cells) != len(headers) or re.sub(r"</?td>", "", cells[column]).strip()
        for cells in rows
    ):
        return table

    def drop(row: re.Match) -> str:
        cells = _cells(row.group(2))
        del cells[column]
        return row.group(1) + "".join(cells) + row.group(3)

    table = _ROW.sub(drop, table)
    return re.sub(r"<th>Type</th>\s*", "", table, count=1)


def drop_empty_type_columns(html: str) -> str:
    """``html`` with every all-empty Type column of its tables removed."""
    return _TABLE.sub(_drop_empty_type, html)


def on_post_page(output: str, page: Any, config: Any) -> str:
    return drop_empty_type_columns(output)
