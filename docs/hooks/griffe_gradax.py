"""Griffe extension for the API reference: gradax's classes and docstrings.

mkdocstrings reads gradax statically (with griffe), which misses two things:

- Every gradax transformation is a class made a frozen dataclass by
  ``Module.__init_subclass__``, not by a ``@dataclass`` decorator, so griffe
  sees no ``__init__`` and would list every argument as required with no
  signature. This extension imports each class, and where it is a dataclass
  without an ``__init__`` of its own, gives it the runtime signature.
- The docstrings use reStructuredText roles (``:math:`x```, ``:class:`x```),
  ``.. math::`` blocks and doctests under ``Example:``, which Markdown would
  mangle (``[1.0, 0.5]`` reads as a link). Math is typeset here, at build
  time, as MathML (which browsers render without a script); the other roles
  become code spans and doctests code blocks. A formula latex2mathml cannot
  read stays a code span or a ``text`` block.

Registered under ``extensions:`` of the mkdocstrings handler in ``mkdocs.yml``.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
import textwrap
from typing import Any

import griffe

_MATH_ROLE = re.compile(r":math:`([^`]+)`")
_ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|obj|exc):`~?([^`]+)`")
_DIRECTIVE = re.compile(r"^(\s*)\.\. math::(.*)$")
# A ``>`` opening a line or an argument's description (``eps: >= 0``) would
# start a Markdown block quote.
_QUOTE = re.compile(r"(^\s*|:\s+)>(?!>>)")

_KINDS = {
    inspect.Parameter.POSITIONAL_ONLY: griffe.ParameterKind.positional_only,
    inspect.Parameter.POSITIONAL_OR_KEYWORD: griffe.ParameterKind.positional_or_keyword,
    inspect.Parameter.VAR_POSITIONAL: griffe.ParameterKind.var_positional,
    inspect.Parameter.KEYWORD_ONLY: griffe.ParameterKind.keyword_only,
    inspect.Parameter.VAR_KEYWORD: griffe.ParameterKind.var_keyword,
}


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _fence(lines: list[str], indent: str, language: str) -> list[str]:
    """``lines`` as a fenced code block at ``indent``, after a blank line."""
    code = textwrap.dedent("\n".join(lines)).strip("\n").splitlines()
    return ["", f"{indent}```{language}", *(indent + c for c in code), f"{indent}```"]


def _extend(out: list[str], block: list[str]) -> None:
    """Append a code block; right under a section title (``Example:``) it
    starts at once, since a blank line would end the Google-style section."""
    if out and out[-1].rstrip().endswith(":"):
        block = block[1:]
    out.extend(block)


def mathml(latex: str, display: bool) -> str | None:
    """``latex`` as one line of MathML, or None where it cannot be read."""
    from latex2mathml.converter import convert

    try:
        markup = convert(latex.strip(), display="block" if display else "inline")
    except Exception:  # latex2mathml raises many kinds on what it cannot read
        return None
    return " ".join(markup.split())


def _inline_math(match: re.Match) -> str:
    markup = mathml(match.group(1), display=False)
    if markup is None:
        return f"`{match.group(1)}`"
    # Markdown reads a line that starts with ``<math>`` (a block-level tag) as
    # an HTML block, which would split "eta, a number..." into two blocks.
    return f'<span class="math">{markup}</span>'


def _math_block(lines: list[str], indent: str) -> list[str]:
    """A ``.. math::`` body: one MathML paragraph per formula, else a text block."""
    formulas = textwrap.dedent("\n".join(lines)).strip("\n").split("\n\n")
    out: list[str] = []
    for formula in formulas:
        markup = mathml(" ".join(formula.split()), display=True)
        if markup is None:
            return _fence(lines, indent, "text")
        out += ["", indent + markup]
    return out


def markdown_docstring(text: str) -> str:
    """Rewrite reStructuredText roles, math blocks and doctests as Markdown.

    Math roles and ``.. math::`` blocks become MathML, other roles code spans,
    runs of doctest lines (``>>>`` with their output) ``pycon`` code blocks,
    and a ``>`` that Markdown would read as a block quote is escaped.
    """
    lines = _ROLE.sub(r"`\1`", _MATH_ROLE.sub(_inline_math, text)).splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        directive = _DIRECTIVE.match(line)
        if directive is not None:
            indent, first = directive.group(1), directive.group(2).strip()
            body = [indent + first] if first else []
            i += 1
            while i < len(lines) and (
                not lines[i].strip() or _indent(lines[i]) > len(indent)
            ):
                body.append(lines[i])
                i += 1
            # The blank lines after the formula stay in the text: a section
            # title (``Args:``) right after it needs one before it, or griffe
            # reads the section as a paragraph.
            while body and not body[-1].strip():
                body.pop()
                i -= 1
            _extend(out, _math_block(body, indent))
        elif line.lstrip().startswith(">>>"):
            indent = line[: _indent(line)]
            body = []
            while i < len(lines) and lines[i].strip() and lines[i].startswith(indent):
                body.append(lines[i])
                i += 1
            _extend(out, _fence(body, indent, "pycon"))
        else:
            out.append(_QUOTE.sub(r"\1\\>", line))
            i += 1
    return "\n".join(out)


def _runtime(obj: griffe.Class) -> Any:
    """The live class a griffe class stands for, or None."""
    try:
        value: Any = importlib.import_module(obj.module.path)
    except ImportError:
        return None
    inner = obj.path[len(obj.module.path) + 1 :]
    for part in inner.split("."):
        value = getattr(value, part, None)
    return value


def _add_init(obj: griffe.Class) -> None:
    """Give a runtime dataclass with no ``__init__`` in its source its signature."""
    if "__init__" in obj.members:
        return
    cls = _runtime(obj)
    if not (inspect.isclass(cls) and dataclasses.is_dataclass(cls)):
        return
    try:
        signature = inspect.signature(cls)
    except (TypeError, ValueError):
        return
    parameters = [
        griffe.Parameter("self", kind=griffe.ParameterKind.positional_or_keyword)
    ]
    for param in signature.parameters.values():
        default = None if param.default is param.empty else repr(param.default)
        parameters.append(
            griffe.Parameter(param.name, kind=_KINDS[param.kind], default=default)
        )
    init = griffe.Function(
        "__init__",
        lineno=0,
        endlineno=0,
        parent=obj,
        parameters=griffe.Parameters(*parameters),
        returns="None",
    )
    obj.set_member("__init__", init)


def _walk(obj: griffe.Object, seen: set[str]) -> None:
    if obj.path in seen:
        return
    seen.add(obj.path)
    if obj.docstring is not None:
        obj.docstring.value = markdown_docstring(obj.docstring.value)
    if isinstance(obj, griffe.Class):
        _add_init(obj)
    for member in list(obj.members.values()):
        if not member.is_alias:
            _walk(member, seen)


class GradaxDocs(griffe.Extension):
    """Dataclass signatures and Markdown docstrings for the gradax package."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        """Rewrite the loaded ``gradax`` package in place."""
        if pkg.name == "gradax":
            _walk(pkg, set())
