"""Every repository path the writing guide names exists.

docs/writing-a-transformation.md tells a contributor where each kind of
addition goes; a path there that moved is a wrong instruction. A path with a
placeholder (``gradax/optimizers/<name>.py``) names its folder, which must
exist.
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "writing-a-transformation.md"
TOP = ("gradax/", "tests/", "docs/", "benchmarks/", "examples/", "gradax_cli/")


def _paths(text: str) -> list[str]:
    spans = re.findall(r"`([^`\s]+)`", text)
    return sorted({s for s in spans if s.startswith(TOP)})


def test_the_guide_names_paths():
    # The page must keep naming paths, or the check below checks nothing.
    assert len(_paths(GUIDE.read_text())) >= 20


def test_every_path_in_the_guide_exists():
    missing = []
    for path in _paths(GUIDE.read_text()):
        if "*" in path:  # a pattern: something must match it
            if not list(ROOT.glob(path)):
                missing.append(path)
        elif "<" in path:  # a placeholder: its folder must exist
            folder = path.split("<", 1)[0].rsplit("/", 1)[0]
            if not (ROOT / folder).is_dir():
                missing.append(path)
        elif not (ROOT / path.rstrip("/")).exists():
            missing.append(path)
    assert not missing, f"docs/writing-a-transformation.md names {missing}"


def test_a_moved_path_is_caught():
    assert _paths("see `gradax/no_such_module.py` and `tests/x/`") == [
        "gradax/no_such_module.py",
        "tests/x/",
    ]
