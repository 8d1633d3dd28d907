"""Check every ``jax.*`` name gradax uses against a released jax's sources.

    python .ci/jax_names.py                  # the newest jax on the package index
    python .ci/jax_names.py --version 0.8.0  # a given release
    python .ci/jax_names.py --sources DIR    # a jax already unpacked or installed

The names are read from the code (by its syntax tree, never by importing it):
``jax.a.b`` attribute chains, ``import jax.a as x`` and ``from jax.a import b``,
in gradax/, gradax_cli/, tests/ and examples/. Each name is looked up in the wheel's own
source files: a module, or a name that module binds (``def``, ``class``,
assignment, import), followed through re-exports into ``jax._src`` and into
class bodies (``AxisType.Explicit``). A name listed in a module's deprecation
table (``_deprecations``) fails too: deprecated names are removed a few
releases later (``jax.experimental.shard_alike`` went without one, which is
why names are checked against the newest release rather than trusted).

Names under ``jax._src`` are private and reported, not failed (the code that
uses one must fall back when it is missing). So is a name used only under
``if hasattr(jax.a, "b"):``: ``jax.a.b`` (and names under it) in its first
branch, any name in the other (the path for a jax without ``jax.a.b``). A
file with a line ``# jax_names: needs jax X`` (one gradax imports only on
jax X or newer) is left out of the check of an older jax. So are
``gradax/_compat.py`` and ``tests/jax_versions.py``, the shims whose branches
each name what one end of the range has: CI runs them on the oldest
supported jax and the newest. A chain that leaves the sources'
reach (an attribute of an instance, of a class with other bases) is reported
as checked as far as it goes.

Exit status: 0 when every name is found; 1 when one is missing or removed,
or deprecated and used outside tests/; 2 when the wheel could not be
downloaded (the message says why). A deprecated name used only by the tests
is printed as a WARNING: a new jax release that deprecates a name it still
ships must not fail CI with no change of ours, and the tests can move off it
before it is removed (when the check fails on it as missing).
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PATHS = ("gradax", "gradax_cli", "tests", "examples")
# The version-guarded shims (see the module's docstring).
VERSIONED = {ROOT / "gradax" / "_compat.py", ROOT / "tests" / "jax_versions.py"}
MODULE_ATTRIBUTES = {"__file__", "__name__", "__path__", "__spec__", "__doc__"}


# -- the names the code uses ---------------------------------------------------


def _is_jax(module: str | None) -> bool:
    return module is not None and (module == "jax" or module.startswith("jax."))


def _chain(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """``a.b.c`` with ``a`` replaced by the jax name it stands for, or None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id in aliases:
        return ".".join([aliases[node.id], *reversed(parts)])
    return None


def _hasattr_guard(test: ast.AST, aliases: dict[str, str]) -> str | None:
    """``jax.a.b`` for an ``if hasattr(jax.a, "b"):`` test, else None."""
    if (
        isinstance(test, ast.Call)
        and isinstance(test.func, ast.Name)
        and test.func.id == "hasattr"
        and len(test.args) == 2
        and isinstance(test.args[1], ast.Constant)
        and isinstance(test.args[1].value, str)
    ):
        owner = test.args[0]
        base = (
            aliases.get(owner.id) if isinstance(owner, ast.Name) else None
        ) or _chain(owner, aliases)
        return f"{base}.{test.args[1].value}" if base else None
    return None


def names_in_file(path: Path, guarded: dict[str, int] | None = None) -> dict[str, int]:
    """Each jax name the file uses, with the first line that uses it.

    Under ``if hasattr(jax.a, "b"):`` (or ``x if hasattr(jax.a, "b") else
    y``) a use of ``jax.a.b`` (or a name under it) in the first branch, and
    any use in the other (the path for a jax without it), go to ``guarded``
    instead, when given.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    aliases: dict[str, str] = {}
    found: dict[str, int] = {}
    # id(node) -> the guarded name it may use ("" under the other branch).
    guards: dict[int, str] = {}

    def note(name: str, line: int, node: ast.AST | None = None) -> None:
        guard = guards.get(id(node))
        if guarded is not None and guard is not None:
            if guard == "" or (name + ".").startswith(guard + "."):
                guarded.setdefault(name, line)
                return
        found.setdefault(name, line)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _is_jax(alias.name):
                    note(alias.name, node.lineno)
                    if alias.asname:
                        aliases[alias.asname] = alias.name
                    else:
                        aliases["jax"] = "jax"
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            if _is_jax(node.module):
                for alias in node.names:
                    name = f"{node.module}.{alias.name}"
                    note(name, node.lineno)
                    aliases[alias.asname or alias.name] = name
    for node in ast.walk(tree):
        if isinstance(node, (ast.If, ast.IfExp)):  # a statement or `a if t else b`
            guard = _hasattr_guard(node.test, aliases)
            if guard is None:
                continue
            for branch, name in ((node.body, guard), (node.orelse, "")):
                for part in branch if isinstance(branch, list) else [branch]:
                    for inner_node in ast.walk(part):
                        guards.setdefault(id(inner_node), name)
    # Only the longest chains: ``jax.sharding.AxisType.Explicit`` checks its
    # prefixes on the way.
    inner = {
        id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Attribute)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in inner:
            name = _chain(node, aliases)
            if name is not None:
                note(name, node.lineno, node)
    return found


PRAGMA = re.compile(r"^# jax_names: needs jax (\d+(?:\.\d+)*)", re.MULTILINE)


def needs_newer(path: Path, version: str | None) -> str | None:
    """The jax a file declares it needs (``# jax_names: needs jax 0.6.1``:
    gradax imports it only on that jax), where ``version`` is older."""
    match = PRAGMA.search(path.read_text(encoding="utf-8"))
    if match is None or version is None:
        return None
    return match.group(1) if _release(version) < _release(match.group(1)) else None


def _release(version: str) -> tuple[int, ...]:
    match = re.match(r"\d+(?:\.\d+)*", version)
    return tuple(int(n) for n in match.group(0).split(".")) if match else ()


def used_names(
    paths: list[Path],
    version: str | None = None,
    guarded: dict[str, list[str]] | None = None,
) -> dict[str, list[str]]:
    """Each jax name used under ``paths``, with where (``file:line``).

    Checking ``version``, a file that declares it needs a newer jax is left
    out (and said). Uses under a ``hasattr`` guard go to ``guarded``.
    """
    uses: dict[str, list[str]] = {}
    for top in paths:
        files = [top] if top.is_file() else sorted(top.rglob("*.py"))
        for path in files:
            if path in VERSIONED:
                continue
            shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
            newer = needs_newer(path, version)
            if newer is not None:
                print(f"note: {shown}: left out, it needs jax {newer}")
                continue
            under_guard: dict[str, int] = {}
            for name, line in names_in_file(path, under_guard).items():
                uses.setdefault(name, []).append(f"{shown}:{line}")
            for name, line in under_guard.items():
                if guarded is not None:
                    guarded.setdefault(name, []).append(f"{shown}:{line}")
    return uses


# -- what a jax release defines -------------------------------------------------


@dataclass
class Binding:
    kind: str  # "import" (target: a dotted name), "class", "namespace" or "value"
    target: str = ""
    node: ast.ClassDef | None = None
    members: dict[str, str] = field(default_factory=dict)  # a namespace's


@dataclass
class Module:
    bindings: dict[str, Binding] = field(default_factory=dict)
    star_imports: list[str] = field(default_factory=list)
    deprecations: dict[str, str] = field(default_factory=dict)  # name -> status
    text: str = ""
    parsed: bool = True


def _absolute(module: str, is_package: bool, level: int, name: str | None) -> str:
    """The absolute module of ``from <level dots><name> import``."""
    if level == 0:
        return name or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def _deprecation_table(node: ast.AST) -> dict[str, str]:
    """``{name: "removed" | "deprecated"}`` from ``_deprecations = {...}``."""
    table = {}
    if isinstance(node, ast.Dict):
        for key, value in zip(node.keys, node.values, strict=True):
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                gone = (
                    isinstance(value, ast.Tuple)
                    and len(value.elts) == 2
                    and isinstance(value.elts[1], ast.Constant)
                    and value.elts[1].value is None
                )
                table[key.value] = "removed" if gone else "deprecated"
    return table


def _value_binding(value: ast.expr | None) -> Binding:
    """An assignment's binding; ``SimpleNamespace(a=x)`` keeps its members."""
    if (
        isinstance(value, ast.Call)
        and ast.unparse(value.func).endswith("SimpleNamespace")
        and all(k.arg for k in value.keywords)
    ):
        members = {str(k.arg): ast.unparse(k.value) for k in value.keywords}
        return Binding("namespace", members=members)
    return Binding("value")


def _collect(body: list[ast.stmt], module: str, is_package: bool, out: Module) -> None:
    """Record the names that module-level statements bind (into if/try too)."""
    for stmt in body:
        if isinstance(stmt, ast.ClassDef):
            out.bindings[stmt.name] = Binding("class", node=stmt)
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.bindings[stmt.name] = Binding("value")
        elif isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.asname:
                    out.bindings[alias.asname] = Binding("import", alias.name)
                else:
                    top = alias.name.split(".")[0]
                    out.bindings.setdefault(top, Binding("import", top))
        elif isinstance(stmt, ast.ImportFrom):
            source = _absolute(module, is_package, stmt.level, stmt.module)
            for alias in stmt.names:
                if alias.name == "*":
                    out.star_imports.append(source)
                else:
                    target = f"{source}.{alias.name}"
                    out.bindings[alias.asname or alias.name] = Binding("import", target)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for target in targets:
                for node in ast.walk(target):
                    if isinstance(node, ast.Name):
                        if node.id == "_deprecations" and stmt.value is not None:
                            out.deprecations.update(_deprecation_table(stmt.value))
                        else:
                            out.bindings[node.id] = _value_binding(stmt.value)
        elif isinstance(stmt, ast.If):
            _collect(stmt.body + stmt.orelse, module, is_package, out)
        elif isinstance(stmt, ast.Try):
            handlers = [s for h in stmt.handlers for s in h.body]
            _collect(stmt.body + handlers + stmt.orelse, module, is_package, out)
        elif isinstance(stmt, ast.With):
            _collect(stmt.body, module, is_package, out)


class Sources:
    """The ``jax`` package's source files under ``root``."""

    def __init__(self, root: Path):
        self.root = root
        self._modules: dict[str, Module | None] = {}

    def file(self, module: str) -> tuple[Path, bool] | None:
        base = self.root.joinpath(*module.split("."))
        if (base / "__init__.py").is_file():
            return base / "__init__.py", True
        if base.with_suffix(".py").is_file():
            return base.with_suffix(".py"), False
        return None

    def module(self, name: str) -> Module | None:
        if name not in self._modules:
            self._modules[name] = self._read(name)
        return self._modules[name]

    def _read(self, name: str) -> Module | None:
        found = self.file(name)
        if found is None:
            return None
        path, is_package = found
        text = path.read_text(encoding="utf-8")
        out = Module(text=text)
        try:
            tree = ast.parse(text)
        except SyntaxError:
            # Newer syntax than this Python reads (jax's private modules use
            # 3.12's): fall back to recognising bindings by their text.
            out.parsed = False
            return out
        _collect(tree.body, name, is_package, out)
        return out


def _bound_in_text(text: str, name: str) -> bool:
    """Whether ``name`` looks bound in source that could not be parsed."""
    word = re.escape(name)
    patterns = (
        rf"^\s*(?:async\s+)?(?:def|class)\s+{word}\b",
        rf"^\s*{word}\s*(?::[^=\n]*)?=(?!=)",
        rf"\bimport\s+(?:[\w.]+\s+as\s+)?{word}\b",
        rf"\bimport\s*\(?[^)\n]*\b{word}\b",
    )
    return any(re.search(p, text, re.MULTILINE) for p in patterns)


def _class_in_text(text: str, name: str) -> ast.ClassDef | None:
    """The top-level class ``name`` parsed on its own, from unparsable source."""
    match = re.search(rf"^class\s+{re.escape(name)}\b.*?(?=^\S|\Z)", text, re.M | re.S)
    if match is None:
        return None
    try:
        tree = ast.parse(match.group(0))
    except SyntaxError:
        return None
    node = tree.body[0] if tree.body else None
    return node if isinstance(node, ast.ClassDef) else None


def _class_members(node: ast.ClassDef) -> set[str]:
    members = set()
    for stmt in node.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            members.add(stmt.name)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            members.update(
                n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)
            )
    return members


def _plain_bases(node: ast.ClassDef) -> bool:
    """Whether every member comes from the class body (enums, plain classes)."""
    plain = {"object", "Enum", "IntEnum", "enum.Enum", "enum.IntEnum"}
    return all(ast.unparse(base) in plain for base in node.bases)


@dataclass
class Result:
    status: str  # "ok", "partial", "private", "missing", "removed", "deprecated"
    detail: str = ""


def resolve(sources: Sources, name: str, depth: int = 0) -> Result:
    """Look ``name`` (``jax.a.b``) up in the sources."""
    parts = name.split(".")
    if parts[:2] == ["jax", "_src"] and depth == 0:
        inner = resolve(sources, name, depth + 1)
        found = "found" if inner.status in ("ok", "partial") else inner.status
        return Result("private", f"jax._src is private ({found})")
    module = parts[0]
    if sources.module(module) is None:
        return Result("missing", f"no module {module}")
    for i in range(1, len(parts)):
        attr = parts[i]
        info = sources.module(module)
        assert info is not None
        if attr in MODULE_ATTRIBUTES and i == len(parts) - 1:
            return Result("ok")  # every module has them
        status = info.deprecations.get(attr)
        if status is not None:
            return Result(status, f"in {module}'s deprecation table")
        binding = info.bindings.get(attr)
        if binding is None and not info.parsed and _bound_in_text(info.text, attr):
            node = _class_in_text(info.text, attr)
            binding = Binding("value") if node is None else Binding("class", node=node)
        if binding is None:
            for star in info.star_imports:
                if resolve(sources, f"{star}.{attr}", depth + 1).status == "ok":
                    binding = Binding("import", f"{star}.{attr}")
                    break
        submodule = f"{module}.{attr}"
        if binding is None:
            if sources.file(submodule) is not None:
                module = submodule
                continue
            return Result("missing", f"{module} has no {attr}")
        rest = parts[i + 1 :]
        if not rest:
            return Result("ok")
        if binding.kind == "import":
            if sources.file(binding.target) is not None:
                module = binding.target
                continue
            if depth > 8:
                return Result("partial", f"checked to {module}.{attr}")
            return resolve(sources, ".".join([binding.target, *rest]), depth + 1)
        if sources.file(submodule) is not None:  # a package binding a name
            module = submodule
            continue
        if binding.kind == "namespace":
            value = binding.members.get(rest[0])
            if value is None:
                return Result("missing", f"{module}.{attr} has no {rest[0]}")
            head, _, tail = value.partition(".")
            alias = info.bindings.get(head)
            if alias is None or alias.kind != "import" or depth > 8:
                return Result("partial", f"checked to {module}.{attr}.{rest[0]}")
            target = ".".join(p for p in (alias.target, tail) if p)
            return resolve(sources, ".".join([target, *rest[1:]]), depth + 1)
        if binding.kind == "class" and binding.node is not None:
            if rest[0] in _class_members(binding.node):
                return Result("ok" if len(rest) == 1 else "partial", "")
            if _plain_bases(binding.node):
                return Result("missing", f"class {module}.{attr} has no {rest[0]}")
        return Result("partial", f"checked to {module}.{attr}")
    return Result("ok")


# -- getting a release ------------------------------------------------------------


def download(version: str | None, python: str, dest: Path) -> Path:
    """The jax wheel for ``version`` (newest if None), from the package index."""
    requirement = "jax" if version is None else f"jax=={version}"
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        requirement,
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        python,
        "--dest",
        str(dest),
        "--quiet",
        "--disable-pip-version-check",
    ]
    done = subprocess.run(
        command, capture_output=True, text=True, stdin=subprocess.DEVNULL
    )
    wheels = sorted(dest.glob("jax-*.whl"))
    if done.returncode != 0 or not wheels:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-8:])
        raise SystemExit(
            f"jax_names: could not download {requirement} for Python {python} "
            f"from the package index (pip exit {done.returncode}).\n"
            f"The check needs the wheel; is the index reachable?\n{tail}"
        )
    return wheels[-1]


def unpack(wheel: Path, dest: Path) -> Path:
    with zipfile.ZipFile(wheel) as archive:
        members = [
            m for m in archive.namelist() if m.startswith("jax/") and m.endswith(".py")
        ]
        archive.extractall(dest, members)
    return dest


def _version_of(root: Path) -> str:
    text = (root / "jax" / "version.py").read_text(encoding="utf-8")
    match = re.search(r'^_version(?:: str)?\s*=\s*"([^"]+)"', text, re.MULTILINE)
    return match.group(1) if match else "?"


def _in_tests(use: str) -> bool:
    """Whether a use (``file:line``) lies under tests/."""
    return Path(use.rsplit(":", 1)[0]).parts[:1] == ("tests",)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", help=f"default: {' '.join(DEFAULT_PATHS)}")
    parser.add_argument("--version", help="a jax release (default: the newest)")
    parser.add_argument("--python", default="3.12", help="the Python the wheel is for")
    parser.add_argument("--wheel", type=Path, help="a jax wheel already downloaded")
    parser.add_argument(
        "--sources", type=Path, help="a folder holding jax/ (site-packages)"
    )
    args = parser.parse_args(argv)

    paths = [Path(p).resolve() for p in args.paths] or [ROOT / p for p in DEFAULT_PATHS]
    guarded: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        if args.sources is not None:
            root = args.sources
        else:
            wheel = args.wheel or download(args.version, args.python, Path(scratch))
            root = unpack(wheel, Path(scratch) / "src")
        sources = Sources(root)
        version = _version_of(root)
        uses = used_names([p for p in paths if p.exists()], version, guarded)
        results = {name: resolve(sources, name) for name in sorted(uses)}
        for name in sorted(set(guarded) - set(uses)):
            status = resolve(sources, name).status
            if status not in ("ok", "partial", "private"):
                print(f"note: {name}: {status}, used under a hasattr guard")

    failed = {
        n: r for n, r in results.items() if r.status not in ("ok", "partial", "private")
    }
    # A name a new release deprecates but still ships fails where users meet
    # it (the package, its command, the examples); used only by the tests it
    # is a warning, so a jax release alone cannot turn CI red.
    warned = {
        n: r
        for n, r in failed.items()
        if r.status == "deprecated" and all(_in_tests(u) for u in uses[n])
    }
    for name in warned:
        del failed[name]
    for name, result in results.items():
        if result.status in ("partial", "private"):
            print(f"note: {name}: {result.status}, {result.detail}")
    for name, result in warned.items():
        where = ", ".join(uses[name][:3]) + (" ..." if len(uses[name]) > 3 else "")
        print(f"WARNING: {name}: deprecated ({result.detail}), only in tests: {where}")
    for name, result in failed.items():
        where = ", ".join(uses[name][:3]) + (" ..." if len(uses[name]) > 3 else "")
        print(f"FAIL: {name}: {result.status} ({result.detail}); used at {where}")
    counted = len(results)
    print(
        f"jax_names: {counted - len(failed)} of {counted} jax names used by "
        f"{', '.join(p.name for p in paths)} exist in jax {version}"
        + ("" if not failed else f"; {len(failed)} missing or deprecated")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
