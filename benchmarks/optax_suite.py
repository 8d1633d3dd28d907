"""optax's own test suite, pointed at gradax: how many of its tests pass.

optax ships its ``*_test.py`` files inside its wheel. This script copies them
to a scratch folder and points their imports of optax at gradax, then runs
them twice with pytest: once unchanged (against optax, the baseline) and once
pointed at gradax. It prints, per area, how many of the tests that pass with
optax also pass with gradax.

How imports are pointed at gradax. Each ``import optax...`` / ``from
optax... import x`` of a module becomes a *proxy* of that module. Reading a
public name from a proxy gives gradax's object (``alias.adam`` is
``gradax.adam``, ``optax.losses.l2_loss`` is ``gradax.losses.l2_loss``); a
public name gradax lacks is an AttributeError, so the test fails. A name
that optax does not make public anywhere (``base.some_private``,
``alias._helper``, ``utils.canonicalize_dtype`` which only ``optax._src``
has) is optax-private: the proxy hands out optax's own object and the test
is counted apart, as "touches optax internals". optax's test helpers
(``optax._src.test_utils``, ``alias_test``) stay optax's own.

The target of the issue is on the public tests: at least 99% of those that
pass with optax also pass with gradax, in every area.

Run: python benchmarks/optax_suite.py [--areas losses,projections] [-k EXPR]
     [--workers N] [--json FILE]
This takes a while (the whole suite, twice); it is not part of CI. It needs
the test extra and scikit-learn (optax's ``alias_test`` imports it):
``pip install -e ".[test]" scikit-learn``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import optax

OPTAX_ROOT = Path(optax.__file__).parent

# Test helpers that stay optax's own (they are not under test).
OWN_HELPERS = {"optax._src.test_utils", "optax._src.alias_test"}

_IMPORT = re.compile(
    r"^(?P<indent>\s*)(?:from (?P<from>optax[\w.]*) import (?P<names>[^\n(]+|\([^)]*\))"
    r"|import (?P<mod>optax[\w.]*)(?: as (?P<alias>\w+))?)\s*$",
    re.MULTILINE,
)


def area_of(path: Path) -> str:
    """The area a test file belongs to (its folder under optax)."""
    parts = path.relative_to(OPTAX_ROOT).parts
    if parts[0] == "_src":
        return "core"
    return parts[0] if len(parts) > 1 else "core"


def _rewrite_import(match: re.Match) -> str:
    indent = match.group("indent")
    if match.group("mod"):
        module, alias = match.group("mod"), match.group("alias")
        if module in OWN_HELPERS:
            return match.group(0)
        if alias:
            return f"{indent}{alias} = _gradax_proxy({module!r})"
        return f"{indent}optax = _gradax_proxy('optax')"
    module = match.group("from")
    names = match.group("names").strip().strip("()")
    lines = []
    for item in (n.strip() for n in names.split(",")):
        if not item or item.startswith("#"):
            continue
        name, _, alias = item.partition(" as ")
        name, alias = name.strip(), (alias.strip() or name.strip())
        full = f"{module}.{name}"
        if full in OWN_HELPERS:
            lines.append(f"{indent}from {module} import {name} as {alias}")
        else:
            lines.append(f"{indent}{alias} = _gradax_proxy({module!r}, {name!r})")
    return "\n".join(lines)


def rewrite(source: str) -> str:
    """A test module's source with its optax imports pointed at gradax."""
    body = _IMPORT.sub(_rewrite_import, source)
    return "from optax_suite_proxy import proxy as _gradax_proxy  # noqa\n" + body


PROXY_MODULE = '''
"""Proxies of optax modules that resolve public names in gradax."""
import importlib
import types

import optax
import gradax

PUBLIC_AREAS = [
    "contrib", "losses", "tree_utils", "tree", "transforms", "schedules",
    "projections", "perturbations", "assignment", "second_order",
    "experimental", "microbatching",
]
TOUCHED = set()  # node ids of tests that read an optax-private name
CURRENT = {"test": None}


def _public_names():
    names = {n for n in dir(optax) if not n.startswith("_")}
    for area in PUBLIC_AREAS:
        module = getattr(optax, area, None)
        if module is not None:
            names |= {n for n in dir(module) if not n.startswith("_")}
    return names


PUBLIC = _public_names()


def _gradax_home(module_name):
    """The gradax namespace that stands for an optax module."""
    parts = module_name.split(".")
    if len(parts) > 1 and parts[1] in PUBLIC_AREAS and hasattr(gradax, parts[1]):
        sub = getattr(gradax, parts[1])
        if isinstance(sub, types.ModuleType):
            return sub
    return gradax


class _Proxy(types.ModuleType):
    def __init__(self, module_name):
        super().__init__(module_name)
        self._name = module_name
        self._real = importlib.import_module(module_name)
        self._home = _gradax_home(module_name)

    def __getattr__(self, name):
        real = getattr(self._real, name)
        if isinstance(real, types.ModuleType) and real.__name__.startswith("optax"):
            if real.__name__ in ("optax._src.test_utils",):
                return real
            return _Proxy(real.__name__)
        if name.startswith("_") or name not in PUBLIC:
            TOUCHED.add(CURRENT["test"] or "<import>:" + self._name)
            return real
        for home in (self._home, gradax):
            if hasattr(home, name):
                return getattr(home, name)
        raise AttributeError(f"gradax has no {name} (optax: {self._name}.{name})")


def proxy(module_name, name=None):
    if name is None:
        return _Proxy(module_name)
    full = f"{module_name}.{name}"
    try:
        importlib.import_module(full)
        return _Proxy(full)
    except ImportError:
        return getattr(_Proxy(module_name), name)
'''

PLUGIN_MODULE = '''
"""Records each test's outcome, and which tests read an optax-private name."""
import json
import os
from pathlib import Path

OUT = Path(os.environ["OPTAX_SUITE_OUT"])
WORKER = os.environ.get("PYTEST_XDIST_WORKER")
OUTCOMES = {}


def _proxy():
    import optax_suite_proxy
    return optax_suite_proxy


def pytest_collectstart(collector):
    if collector.nodeid.endswith(".py"):
        _proxy().CURRENT["test"] = "<module>" + collector.nodeid


def pytest_runtest_setup(item):
    _proxy().CURRENT["test"] = item.nodeid


def pytest_runtest_logreport(report):
    if report.failed:
        OUTCOMES[report.nodeid] = "failed"
    elif report.skipped and report.nodeid not in OUTCOMES:
        OUTCOMES[report.nodeid] = "skipped"
    elif report.when == "call" and report.nodeid not in OUTCOMES:
        OUTCOMES[report.nodeid] = "passed"


def pytest_sessionfinish(session):
    touched = sorted(t for t in _proxy().TOUCHED if t)
    (OUT / f"touched-{WORKER or 'main'}.json").write_text(json.dumps(touched))
    if WORKER is None:
        (OUT / "outcomes.json").write_text(json.dumps(OUTCOMES))
'''


def _run_pytest(folder: Path, workers: int, keyword: str | None):
    """Run the copied tests: (outcome by test id, ids touching optax internals)."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    # One module that fails to import must not stop the others.
    cmd.append("--continue-on-collection-errors")
    if workers > 1:
        cmd += ["-n", str(workers)]
    if keyword:
        cmd += ["-k", keyword]
    cmd.append("tests")
    env = dict(os.environ, OPTAX_SUITE_OUT=str(folder))
    env["PYTHONPATH"] = f"{folder}{os.pathsep}{env.get('PYTHONPATH', '')}"
    subprocess.run(cmd, env=env, cwd=folder, check=False, capture_output=True)
    outcomes_file = folder / "outcomes.json"
    outcomes = json.loads(outcomes_file.read_text()) if outcomes_file.exists() else {}
    touched = set()
    for path in folder.glob("touched-*.json"):
        touched |= set(json.loads(path.read_text()))
    modules = {t[len("<module>") :] for t in touched if t.startswith("<module>")}
    touched_tests = {
        test_id
        for test_id in outcomes
        if test_id in touched or test_id.split("::")[0] in modules
    }
    return outcomes, touched_tests


def _copy_tests(dest: Path, areas: set[str] | None, pointed: bool) -> dict[str, str]:
    """Copy the test files; return test file name -> area."""
    tests = dest / "tests"
    tests.mkdir(parents=True)
    files = {}
    for path in sorted(OPTAX_ROOT.rglob("*_test.py")):
        area = area_of(path)
        if areas and area not in areas:
            continue
        rel = path.relative_to(OPTAX_ROOT)
        name = "__".join(rel.with_suffix("").parts) + ".py"
        source = path.read_text()
        (tests / name).write_text(rewrite(source) if pointed else source)
        files[f"tests/{name}"] = area
    (dest / "optax_suite_proxy.py").write_text(PROXY_MODULE)
    (dest / "conftest.py").write_text(PLUGIN_MODULE)
    return files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--areas", help="comma-separated areas (default: all)")
    parser.add_argument("-k", dest="keyword", help="pytest -k expression")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    areas = set(args.areas.split(",")) if args.areas else None

    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        baseline_dir, gradax_dir = scratch / "optax", scratch / "gradax"
        _copy_tests(baseline_dir, areas, pointed=False)
        files = _copy_tests(gradax_dir, areas, pointed=True)
        baseline, _ = _run_pytest(baseline_dir, args.workers, args.keyword)
        pointed, touched = _run_pytest(gradax_dir, args.workers, args.keyword)

    rows: dict[str, Counter] = {}
    failures = []
    for test_id, outcome in sorted(baseline.items()):
        if outcome != "passed":
            continue
        area = files.get(test_id.split("::")[0], "?")
        counts = rows.setdefault(area, Counter())
        kind = "private" if test_id in touched else "public"
        counts[f"{kind}_total"] += 1
        if pointed.get(test_id) == "passed":
            counts[f"{kind}_passed"] += 1
        elif kind == "public":
            failures.append(test_id)

    print(f"{'area':16} {'public':>16} {'%':>7}   {'touch internals':>16}")
    summary = {}
    for area, counts in sorted(rows.items()):
        pub_t, pub_p = counts["public_total"], counts["public_passed"]
        pri_t, pri_p = counts["private_total"], counts["private_passed"]
        share = 100.0 * pub_p / pub_t if pub_t else 100.0
        print(f"{area:16} {pub_p:>7}/{pub_t:<8} {share:6.1f}%   {pri_p:>7}/{pri_t:<8}")
        summary[area] = dict(counts, public_share=share)
    total_t = sum(c["public_total"] for c in rows.values())
    total_p = sum(c["public_passed"] for c in rows.values())
    if total_t:
        print(f"{'all':16} {total_p:>7}/{total_t:<8} {100.0 * total_p / total_t:6.1f}%")
    if failures:
        print("\npublic tests that pass with optax and fail with gradax:")
        for test_id in failures:
            print("  ", test_id)
    if args.json:
        args.json.write_text(json.dumps({"areas": summary, "failures": failures}))


if __name__ == "__main__":
    main()
