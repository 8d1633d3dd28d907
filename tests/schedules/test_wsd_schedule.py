"""warmup_stable_decay_schedule at its boundaries, for each decay shape."""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest

import gradax

# warmup 10, total 100, decay the last 20% (steps 80..100), from 2.0 to 0.5.
INIT, PEAK, END = 0.0, 2.0, 0.5
SHAPES = {
    "linear": lambda p: 1 - p,
    "cosine": lambda p: 0.5 * (1 + math.cos(math.pi * p)),
    "1-sqrt": lambda p: 1 - math.sqrt(p),
}


@pytest.mark.parametrize("decay_type", list(SHAPES))
def test_boundaries(decay_type):
    schedule = gradax.warmup_stable_decay_schedule(
        INIT,
        PEAK,
        warmup_steps=10,
        total_steps=100,
        decay_fraction=0.2,
        end_value=END,
        decay_type=decay_type,
    )
    shape = SHAPES[decay_type]

    def decay(step):
        return END + (PEAK - END) * shape((step - 80) / 20)

    expected = {
        0: INIT,  # step 0
        5: PEAK / 2,  # half the warmup
        9: PEAK * 9 / 10,
        10: PEAK,  # end of warmup
        50: PEAK,  # plateau
        79: PEAK,
        80: PEAK,  # start of decay
        85: decay(85),
        99: decay(99),
        100: END,  # end of decay
        1000: END,  # past the end
    }
    steps = np.array(list(expected))
    got = jax.jit(jax.vmap(schedule))(steps)
    np.testing.assert_allclose(got, list(expected.values()), rtol=1e-6, atol=1e-7)
    for step, value in expected.items():  # Python ints take the same path
        assert float(schedule(step)) == pytest.approx(value, rel=1e-6, abs=1e-7)
    assert schedule.bounds() == (0.0, 2.0)


def test_no_warmup_no_decay_and_touching_phases():
    flat = gradax.warmup_stable_decay_schedule(
        1.0, 3.0, warmup_steps=0, total_steps=10, decay_fraction=0.0
    )
    assert [float(flat(t)) for t in (0, 5, 10, 20)] == [3.0] * 4
    assert flat.bounds() == (3.0, 3.0)
    # Warmup ends where the decay starts: no plateau.
    touching = gradax.warmup_stable_decay_schedule(
        0.0, 1.0, warmup_steps=5, total_steps=10, decay_fraction=0.5
    )
    assert [float(touching(t)) for t in (0, 5, 10)] == [0.0, 1.0, 0.0]


def test_consistency_checks_name_the_argument():
    with pytest.raises(ValueError, match="warmup_steps.*decay_fraction.*total_steps"):
        gradax.warmup_stable_decay_schedule(
            0.0, 1.0, warmup_steps=90, total_steps=100, decay_fraction=0.2
        )
    with pytest.raises(ValueError, match="decay_fraction"):
        gradax.warmup_stable_decay_schedule(0.0, 1.0, 0, 100, decay_fraction=1.5)
    with pytest.raises(ValueError, match="total_steps"):
        gradax.warmup_stable_decay_schedule(0.0, 1.0, 0, 0)
    with pytest.raises(ValueError, match="decay_type"):
        gradax.warmup_stable_decay_schedule(0.0, 1.0, 0, 10, decay_type="exp")
    # A learning rate schedule that goes negative is accepted, as in optax,
    # with a warning naming the argument (the optimizer will ascend).
    with pytest.warns(gradax.declare.HyperparameterWarning, match="learning_rate"):
        gradax.adam(gradax.warmup_stable_decay_schedule(0.0, 1.0, 0, 10, end_value=-1))
