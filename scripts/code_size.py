"""How big the core is, and how much of gradax repeats itself: issue 45's sizes.

Prints, for this checkout:

- the kernel's code lines: the modules issue 45 counts as the kernel, as
  they are named now in `gradax/_core/` (its `_quantized` and `_float_code`
  moved to their domain, `gradax/precision/`), and all of `gradax/_core/`;
- optax's `_src/base.py`, counted the same way, where optax is installed;
- the code lines of `gradax/optimizers/`, `gradax/orthogonal/` and
  `gradax/contrib/`;
- the repeated blocks of six or more lines in `gradax/`, from the
  `duplicates` tool where it is on the PATH (it is not a Python package;
  without it that line says so).

A code line holds code: not blank, not only a comment, not inside a module,
class or function docstring.

Run: python scripts/code_size.py [--json FILE]
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import io
import json
import shutil
import subprocess
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gradax"

# Issue 45's kernel: _protocol, _pytree, _declare, _hyper, _state_guard,
# _treecheck, _half and _sharding (now axes), and the hook left in place of
# _quantized/_float_code (storage).
KERNEL = (
    "protocol",
    "pytree",
    "declarations",
    "hyper",
    "state_guard",
    "treecheck",
    "half",
    "storage",
    "axes",
)
DOMAINS = ("optimizers", "orthogonal", "contrib")
_NOT_CODE = {
    tokenize.COMMENT,
    tokenize.NL,
    tokenize.NEWLINE,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENDMARKER,
}


def _docstring_lines(tree: ast.AST) -> set[int]:
    """The line numbers of every module, class and function docstring."""
    lines: set[int] = set()
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    for node in ast.walk(tree):
        if not isinstance(node, kinds) or not node.body:
            continue
        first = node.body[0]
        if (
            isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
        ):
            lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def code_lines(source: str) -> int:
    """How many lines of `source` hold code (see the module's docstring)."""
    docstrings = _docstring_lines(ast.parse(source))
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in _NOT_CODE:
            continue
        lines.update(range(token.start[0], token.end[0] + 1))
    return len(lines - docstrings)


def _count(paths) -> int:
    return sum(code_lines(Path(p).read_text()) for p in paths)


def repeated_pairs() -> int | None:
    """Pairs of 6+-line repeats in gradax/, from `duplicates`; None without it."""
    tool = shutil.which("duplicates")
    if tool is None:
        return None
    result = subprocess.run(
        [tool, "--repo", str(PACKAGE), "--most", "1", "--seconds", "120"],
        capture_output=True,
        text=True,
        check=True,
    )
    first = result.stdout.split()
    return int(first[0]) if first and first[0].isdigit() else 0


def sizes(repeats: bool = True) -> dict[str, int | None]:
    """The figures above; `repeats=False` skips the `duplicates` run."""
    core = PACKAGE / "_core"
    spec = importlib.util.find_spec("optax")
    optax_base = None
    if spec is not None and spec.origin is not None:
        base = Path(spec.origin).parent / "_src" / "base.py"
        optax_base = _count([base]) if base.exists() else None
    return {
        "kernel": _count(core / f"{name}.py" for name in KERNEL),
        "core_all": _count(sorted(core.glob("*.py"))),
        "optax_base": optax_base,
        "domains": _count(p for d in DOMAINS for p in (PACKAGE / d).rglob("*.py")),
        "repeated_pairs": repeated_pairs() if repeats else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = sizes()
    optax_base = result["optax_base"]
    pairs = result["repeated_pairs"]
    print(f"kernel ({', '.join(KERNEL)}): {result['kernel']} code lines")
    print(f"all of gradax/_core: {result['core_all']} code lines")
    print(
        "optax _src/base.py: "
        + (f"{optax_base} code lines" if optax_base is not None else "optax not found")
    )
    print(f"{', '.join(DOMAINS)}: {result['domains']} code lines")
    print(
        "repeated 6+-line blocks in gradax/: "
        + (f"{pairs} pairs" if pairs is not None else "the duplicates tool is not here")
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
