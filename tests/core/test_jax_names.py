""".ci/jax_names.py: the static check of the jax names gradax uses.

CI runs it against the oldest supported and the newest jax wheels; these run
it against the installed jax's sources (no download).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import jax

ROOT = Path(__file__).resolve().parents[2]
SITE = str(Path(jax.__file__).resolve().parent.parent)


def _script():
    path = ROOT / ".ci" / "jax_names.py"
    spec = importlib.util.spec_from_file_location("jax_names", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("jax_names", module)  # its dataclasses look it up
    spec.loader.exec_module(sys.modules["jax_names"])
    return sys.modules["jax_names"]


def test_every_name_the_code_uses_exists_in_the_installed_jax(capsys):
    # The tests may use what a newer jax has (.ci/jax_range checks them
    # against the newest release only); the package must run on every jax.
    paths = [str(ROOT / p) for p in ("gradax", "gradax_cli", "examples")]
    assert _script().main(["--sources", SITE, *paths]) == 0
    assert f"exist in jax {jax.__version__}" in capsys.readouterr().out


def test_missing_and_deprecated_names_fail(tmp_path, capsys):
    script = _script()
    table = script.Sources(Path(SITE)).module("jax").deprecations
    deprecated = sorted(table)[0] if table else None
    lines = [
        "import jax",
        "import jax.numpy as jnp",
        "from jax import lax",
        "from jax.sharding import PartitionSpec as P",
        "a = jnp.zeros, lax.select, P, jax.sharding.AxisType.Explicit, jax.tree.map",
        "b = lax.no_such_primitive",
        "c = jax.sharding.AxisType.NoSuchAxisType",
        "from jax.experimental.no_such_module import thing",
    ]
    if deprecated:
        lines.append(f"d = jax.{deprecated}")
    source = tmp_path / "user.py"
    source.write_text("\n".join(lines) + "\n")
    assert script.main(["--sources", SITE, str(source)]) == 1
    out = capsys.readouterr().out
    failed = {
        line.split(":")[1].strip()
        for line in out.splitlines()
        if line.startswith("FAIL")
    }
    expected = {
        "jax.lax.no_such_primitive",
        "jax.sharding.AxisType.NoSuchAxisType",
        "jax.experimental.no_such_module.thing",
    }
    if deprecated:
        expected.add(f"jax.{deprecated}")
    assert failed == expected, out


def test_a_name_under_a_hasattr_guard_is_noted_not_failed(tmp_path, capsys):
    script = _script()
    source = tmp_path / "guarded.py"
    source.write_text(
        "import jax\n"
        "from jax import lax\n"
        "if hasattr(lax, 'no_such_cast'):\n"
        "    y = jax.lax.no_such_cast(1)\n"
        "if hasattr(jax.lax, 'no_such_vary'):\n"
        "    z = lax.no_such_vary(1)\n"
        "f = jax.no_such_fn if hasattr(jax, 'no_such_fn') else jax.no_such_old\n"
    )
    assert script.main(["--sources", SITE, str(source)]) == 0
    out = capsys.readouterr().out
    assert "note: jax.lax.no_such_cast: missing, used under a hasattr guard" in out
    assert "note: jax.lax.no_such_vary: missing, used under a hasattr guard" in out
    assert "note: jax.no_such_fn: missing, used under a hasattr guard" in out
    assert "note: jax.no_such_old: missing, used under a hasattr guard" in out
    # The same use outside the guard's block fails.
    source.write_text(source.read_text() + "w = jax.lax.no_such_cast(2)\n")
    assert script.main(["--sources", SITE, str(source)]) == 1
    assert "FAIL: jax.lax.no_such_cast" in capsys.readouterr().out


def test_a_file_that_needs_a_newer_jax_is_left_out_of_an_older_check(tmp_path, capsys):
    script = _script()
    source = tmp_path / "newer.py"
    body = "import jax\nx = jax.lax.no_such_primitive\n"
    source.write_text("# jax_names: needs jax 99.0\n" + body)
    assert script.main(["--sources", SITE, str(source)]) == 0
    assert "left out, it needs jax 99.0" in capsys.readouterr().out
    source.write_text("# jax_names: needs jax 0.1\n" + body)
    assert script.main(["--sources", SITE, str(source)]) == 1


def test_a_deprecated_name_fails_in_the_package_and_warns_in_the_tests(
    tmp_path, capsys, monkeypatch
):
    # A release that deprecates a name it still ships (jax 0.12.1's
    # SingleDeviceSharding) must not turn CI red through a test's use; in the
    # package, where users meet it, it fails. A missing name fails anywhere.
    script = _script()
    fake = tmp_path / "site" / "jax"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        "def _old(): pass\n"
        "def current(): pass\n"
        "_deprecations = {'old': ('jax.old is deprecated', _old)}\n"
    )
    (fake / "version.py").write_text('_version = "9.9.9"\n')
    monkeypatch.setattr(script, "ROOT", tmp_path)
    for folder in ("tests", "gradax"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "user.py").write_text("import jax\nx = jax.old\n")
    sources = ["--sources", str(fake.parent)]

    assert script.main([*sources, str(tmp_path / "tests")]) == 0
    out = capsys.readouterr().out
    assert "WARNING: jax.old: deprecated" in out and "tests/user.py:2" in out, out
    assert "FAIL" not in out, out

    assert (
        script.main([*sources, str(tmp_path / "tests"), str(tmp_path / "gradax")]) == 1
    )
    out = capsys.readouterr().out
    assert "FAIL: jax.old: deprecated" in out and "gradax/user.py:2" in out, out

    (tmp_path / "tests" / "user.py").write_text("import jax\nx = jax.gone\n")
    assert script.main([*sources, str(tmp_path / "tests")]) == 1
    assert "FAIL: jax.gone: missing" in capsys.readouterr().out
