"""Run every script in examples/ with few steps (marked ``examples``; CI runs them)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.examples

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# (file, steps, the final loss must be below this). Each example's loss starts
# well above its bound: log(2) = 0.69 for the spirals, about 0.5 for sin(2x).
CASES = [
    ("quickstart.py", 150, 0.1),
    ("plain_jax.py", 100, 0.3),
    ("flax_nnx.py", 150, 0.5),
    ("equinox_train.py", 150, 0.1),
]


@pytest.mark.parametrize(("name", "steps", "bound"), CASES)
def test_example_trains(name, steps, bound, capsys):
    loss = load(name).main(steps=steps)
    assert math.isfinite(loss)
    assert loss < bound
    assert "step" in capsys.readouterr().out


def test_every_example_is_tested():
    scripts = {path.name for path in EXAMPLES.glob("*.py")}
    tested = {case[0] for case in CASES} | {"muonclip.py"}
    assert scripts <= tested, f"examples without a test: {scripts - tested}"


def test_muonclip_example_runs():
    result = load("muonclip.py").main(steps=3)
    assert np.all(np.isfinite(np.asarray(result)))
