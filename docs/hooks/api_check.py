"""Every public gradax name has its own docstring and an API reference entry.

Used two ways:

- as an mkdocs hook (``hooks:`` in ``mkdocs.yml``): before the site is built,
  any offender fails the build with a ``PluginError`` listing all of them;
- standalone: ``python docs/hooks/api_check.py`` prints the offenders and
  exits 1 (0 and a count when there are none). ``tests/docs/test_docs.py`` calls
  :func:`find_offenders` in-process.

Public names of a module are its ``__all__`` when it has one, else what its
source makes public: explicit re-exports (``from x import a as a``) and the
top-level functions, classes and assignments without a leading underscore.
Assignments that only give a local name to something from outside gradax (a
``TypeVar``, ``P = jax.sharding.PartitionSpec``) and submodules are skipped.

Docstrings are read from the source, so a class does not pass on the docstring
of its base, nor on the text that ``dataclasses`` and ``NamedTuple`` make up
for a class without one. A public constant or type alias is documented by a
string literal on the line after its assignment (what mkdocstrings renders).

A name is in the reference when a ``::: identifier`` block in ``docs/api/*.md``
names it, names a module whose public names include it, or names the same
class or function under another path (``gradax.contrib.prodigy`` documents
``gradax.prodigy``).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any

# The public modules whose names are checked; their submodules are private
# unless listed here.
MODULES = (
    "gradax",
    "gradax.tree",
    "gradax.declare",
    "gradax.contrib",
    "gradax.sharding",
    "gradax.sharding.distributed",
    "gradax.microbatching",
    "gradax.tree_utils",
    "gradax.losses",
    "gradax.projections",
    "gradax.perturbations",
    "gradax.assignment",
    "gradax.second_order",
    "gradax.experimental",
    "gradax.experimental.aggregating",
)

ROOT = Path(__file__).resolve().parents[2]
API_DIR = ROOT / "docs" / "api"
_BLOCK = re.compile(r"^:::\s+([A-Za-z_][\w.]*)\s*$", re.MULTILINE)

_trees: dict[str, ast.Module | None] = {}


def _tree(module_name: str) -> ast.Module | None:
    """The parsed source of a module, or None when it has no source file."""
    if module_name not in _trees:
        module = sys.modules.get(module_name) or importlib.import_module(module_name)
        path = getattr(module, "__file__", None)
        if path is None or not path.endswith(".py"):
            _trees[module_name] = None
        else:
            _trees[module_name] = ast.parse(Path(path).read_text(), path)
    return _trees[module_name]


def _assigned_names(node: ast.stmt) -> list[str]:
    """Names bound by a top-level ``x = ...`` or ``x: T = ...`` statement."""
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, ast.AnnAssign) and node.value is not None:
        targets = [node.target]
    else:
        return []
    return [t.id for t in targets if isinstance(t, ast.Name)]


def _is_foreign(value: Any) -> bool:
    """True for a value a gradax module only names: not gradax API of its own."""
    if isinstance(value, (types.ModuleType, typing.TypeVar)):
        return True
    if inspect.isclass(value) or inspect.isroutine(value):
        # ``X = typing.Any`` is a type alias (a class since Python 3.11).
        home = getattr(value, "__module__", "")
        return not (home.startswith("gradax") or home == "typing")
    return False


def public_names(module_name: str) -> list[str]:
    """The public names of a module, in source order (see the module docstring)."""
    module = importlib.import_module(module_name)
    explicit = getattr(module, "__all__", None)
    if explicit is not None:
        return list(explicit)
    tree = _tree(module_name)
    if tree is None:
        return sorted(n for n in vars(module) if not n.startswith("_"))
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                # Only ``import a as a`` re-exports (PEP 484); plain imports
                # are the module's own tools.
                if alias.asname is not None and alias.asname == alias.name:
                    names.append(alias.asname)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        else:
            for name in _assigned_names(node):
                if not _is_foreign(getattr(module, name, None)):
                    names.append(name)
    seen: set[str] = set()
    result = []
    for name in names:
        value = getattr(module, name, None)
        if name.startswith("_") or name in seen or isinstance(value, types.ModuleType):
            continue
        seen.add(name)
        result.append(name)
    return result


def _find_definition(tree: ast.Module, qualname: str) -> ast.AST | None:
    """The ``def``/``class`` node of a dotted qualname inside a parsed module."""
    body: list[ast.stmt] = tree.body
    node: ast.AST | None = None
    for part in qualname.split("."):
        if part == "<locals>":
            return None
        node = next(
            (
                n
                for n in body
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                and n.name == part
            ),
            None,
        )
        if node is None:
            return None
        body = node.body
    return node


def _resolve_import(module_name: str, node: ast.ImportFrom) -> str:
    """The absolute name of the module a ``from ... import`` reads from."""
    if not node.level:
        return node.module or ""
    package = module_name
    module = sys.modules.get(module_name)
    if module is not None and not hasattr(module, "__path__"):
        package = module_name.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def _attribute_docstring(module_name: str, name: str, depth: int = 0) -> str | None:
    """The string literal after ``name = ...``, following re-exports."""
    tree = _tree(module_name)
    if tree is None or depth > 20:
        return None
    body = tree.body
    for i, node in enumerate(body):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    source = _resolve_import(module_name, node)
                    return _attribute_docstring(source, alias.name, depth + 1)
        elif name in _assigned_names(node):
            following = body[i + 1] if i + 1 < len(body) else None
            if (
                isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                return inspect.cleandoc(following.value.value)
            return None
    return None


def docstring(module_name: str, name: str) -> str | None:
    """The docstring ``module.name`` has of its own, or None."""
    value = getattr(importlib.import_module(module_name), name)
    if isinstance(value, types.ModuleType):
        return value.__doc__
    if _is_code(value):
        value = inspect.unwrap(value)
        home = getattr(value, "__module__", None)
        qualname = getattr(value, "__qualname__", None)
        if home and qualname:
            tree = _tree(home) if home in sys.modules else None
            node = _find_definition(tree, qualname) if tree is not None else None
            if node is not None:
                return ast.get_docstring(node)  # type: ignore[arg-type]
        if inspect.isclass(value):
            return value.__dict__.get("__doc__")
        return getattr(value, "__doc__", None)
    return _attribute_docstring(module_name, name)


def documented_identifiers(api_dir: Path = API_DIR) -> list[str]:
    """Every ``::: identifier`` of the API reference pages."""
    found = []
    for page in sorted(api_dir.glob("*.md")):
        found.extend(_BLOCK.findall(page.read_text()))
    return found


def _lookup(identifier: str) -> tuple[bool, Any]:
    """Import ``identifier`` (module or module attribute): (found, object)."""
    parts = identifier.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for part in parts[cut:]:
                value = getattr(value, part)
        except AttributeError:
            return False, None
        return True, value
    return False, None


def _is_code(value: Any) -> bool:
    """A class or function with source of its own (not ``typing.Any``, nor
    an alias such as ``Callable[[Params], OptState]``, which Python 3.10's
    ``inspect.isclass`` calls a class; 3.11 does not)."""
    if isinstance(value, types.GenericAlias):
        return False
    return (inspect.isclass(value) or inspect.isroutine(value)) and getattr(
        value, "__module__", None
    ) not in (None, "typing")


def find_offenders(api_dir: Path = API_DIR) -> dict[str, list[str]]:
    """Public names without a docstring, and public names not in the reference.

    Returns:
      ``{"no docstring": [...], "not in the API reference": [...],
      "unknown reference": [...]}``, dotted names, each list sorted; all
      empty when everything is documented.
    """
    _trees.clear()  # ``mkdocs serve`` rebuilds in the same process
    paths: set[str] = set()
    objects: set[int] = set()
    unknown = []
    for identifier in documented_identifiers(api_dir):
        found, value = _lookup(identifier)
        if not found:
            unknown.append(identifier)
            continue
        paths.add(identifier)
        if _is_code(value):
            objects.add(id(value))
        if isinstance(value, types.ModuleType):
            # A module block renders the module's public names.
            for name in public_names(identifier):
                paths.add(f"{identifier}.{name}")
                member = getattr(value, name)
                if _is_code(member):
                    objects.add(id(member))

    missing_doc, missing_ref = [], []
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        if not (module.__doc__ or "").strip():
            missing_doc.append(module_name)
        for name in public_names(module_name):
            dotted = f"{module_name}.{name}"
            if not (docstring(module_name, name) or "").strip():
                missing_doc.append(dotted)
            value = getattr(module, name)
            if dotted not in paths and not (_is_code(value) and id(value) in objects):
                missing_ref.append(dotted)
    return {
        "no docstring": sorted(missing_doc),
        "not in the API reference": sorted(missing_ref),
        "unknown reference": sorted(unknown),
    }


def report(offenders: dict[str, list[str]]) -> str:
    """A readable listing of the offenders, one name a line."""
    lines = []
    for kind, names in offenders.items():
        if names:
            lines.append(f"{kind} ({len(names)}):")
            lines.extend(f"  {name}" for name in names)
    return "\n".join(lines)


def _use_checkout() -> None:
    """Import gradax from this checkout, not from another installed copy."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))


def on_pre_build(config: Any) -> None:
    """mkdocs hook: fail the build on any offender."""
    from mkdocs.exceptions import PluginError

    _use_checkout()
    offenders = find_offenders(Path(config["docs_dir"]) / "api")
    if any(offenders.values()):
        raise PluginError("API documentation check failed:\n" + report(offenders))


def main() -> int:
    """Print the offenders; the exit status is 1 when there are any."""
    _use_checkout()
    offenders = find_offenders()
    if any(offenders.values()):
        print(report(offenders))
        return 1
    count = sum(len(public_names(m)) for m in MODULES)
    print(f"all {count} public names have a docstring and a reference entry")
    return 0


if __name__ == "__main__":
    sys.exit(main())
