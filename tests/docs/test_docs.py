"""The documentation: API reference completeness and runnable guides.

CI also builds the site (``mkdocs build --strict``), whose hook runs the same
check; these tests keep it in the fast suite, without mkdocs.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import sys
import textwrap
from pathlib import Path

import jax
import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _load_checker():
    path = DOCS / "hooks" / "api_check.py"
    spec = importlib.util.spec_from_file_location("gradax_docs_api_check", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


api_check = _load_checker()


def test_every_public_name_has_a_docstring_and_a_reference_entry():
    offenders = api_check.find_offenders()
    if any(offenders.values()):
        pytest.fail("\n" + api_check.report(offenders), pytrace=False)


def test_public_names_cover_the_top_level_exports():
    import gradax

    names = set(api_check.public_names("gradax"))
    assert {"adam", "chain", "muon", "ScaleByAdamState", "Params"} <= names
    assert not {"contrib", "tree", "annotations"} & names  # modules, imports
    assert {"get", "update_moment", "NamedTupleKey"} <= set(
        api_check.public_names("gradax.tree")
    )
    assert "P" not in api_check.public_names("gradax.sharding.distributed")
    assert all(hasattr(gradax, n) for n in names)


@pytest.fixture
def fake_package(tmp_path, monkeypatch):
    """A package with every way a public name can lack its own docstring."""
    package = tmp_path / "fakepkg"
    package.mkdir()
    (package / "__init__.py").write_text(
        textwrap.dedent(
            '''
            """A fake package."""
            from typing import Any, NamedTuple

            from ._impl import Base as Base
            from ._impl import Child as Child
            from ._impl import Documented as Documented

            Alias = Any
            """A documented alias."""

            Bare = Any


            class State(NamedTuple):
                count: int


            class DocState(NamedTuple):
                """State with a docstring."""

                count: int


            def f():
                pass


            def _private():
                pass
            '''
        )
    )
    (package / "_impl.py").write_text(
        textwrap.dedent(
            '''
            import dataclasses


            class Base:
                """The base's docstring."""


            @dataclasses.dataclass(frozen=True)
            class Child(Base):
                x: int = 0


            class Documented(Base):
                """Its own docstring."""
            '''
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "fakepkg"
    for name in [m for m in sys.modules if m.startswith("fakepkg")]:
        del sys.modules[name]


def test_checker_rejects_missing_and_inherited_docstrings(fake_package):
    names = api_check.public_names(fake_package)
    assert set(names) == {
        "Base",
        "Child",
        "Documented",
        "Alias",
        "Bare",
        "State",
        "DocState",
        "f",
    }
    missing = {n for n in names if not api_check.docstring(fake_package, n)}
    # Child inherits Base's docstring and gets one made up by dataclasses;
    # State gets one made up by NamedTuple: neither is its own.
    assert missing == {"Child", "Bare", "State", "f"}
    assert api_check.docstring(fake_package, "Alias") == "A documented alias."


def test_checker_reports_names_missing_from_the_reference(tmp_path):
    api = tmp_path / "api"
    api.mkdir()
    for page in (DOCS / "api").glob("*.md"):
        text = page.read_text().replace("::: gradax.adamw\n", "")
        text = text.replace("::: gradax.contrib.prodigy\n", "")
        (api / page.name).write_text(text)
    (api / "extra.md").write_text("::: gradax.no_such_name\n")
    offenders = api_check.find_offenders(api)
    assert "gradax.adamw" in offenders["not in the API reference"]
    # gradax.prodigy is gradax.contrib.prodigy: both go missing together.
    assert {"gradax.prodigy", "gradax.contrib.prodigy"} <= set(
        offenders["not in the API reference"]
    )
    assert offenders["unknown reference"] == ["gradax.no_such_name"]


def _python_blocks(page: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", page.read_text(), re.S | re.M)


def test_getting_started_code_runs_in_order():
    blocks = _python_blocks(DOCS / "getting-started.md")
    assert len(blocks) >= 5
    namespace: dict = {"__name__": "getting_started"}
    traces = []

    def run(i):
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(blocks[i], f"getting-started.md block {i}", "exec"), namespace)

    run(0)
    # Count traces of the page's jitted step (its C++ cache size is not a
    # reliable count: it read 0 in one CI run). Warm the counted copy with the
    # page's first optimizer, as the page's own loop did.
    traced_fn = namespace["step"].__wrapped__

    def counted(*args):
        traces.append(None)
        return traced_fn(*args)

    namespace["step"] = jax.jit(counted)
    ns = namespace
    ns["step"](ns["tx"], ns["params"], ns["opt_state"], ns["x"], ns["y"])
    run(1)
    assert len(traces) == 1  # another learning rate: no retrace
    for i in range(2, len(blocks)):
        run(i)
    # One trace per optimizer structure: adam, chain(clip, adamw), the same
    # chain with a scheduled rate, muon.
    assert len(traces) == 4
