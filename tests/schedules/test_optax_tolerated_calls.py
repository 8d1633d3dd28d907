"""Calls optax 0.2.8 accepts that are usually a mistake: gradax accepts them
too, gives optax's numbers, and warns once, naming the argument.

Found by running each schedule with malformed-but-tolerated arguments under
both libraries; where both raise (``cosine_decay_schedule(1.0, 0)``) the
refusal stays (test_schedules.py's ``_BAD``).
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradax
from gradax.declare import HyperparameterWarning

# The same float32 formulas on the same inputs; XLA may fuse or reassociate
# a multiply-add differently between the two programs, each of a handful of
# operations rounding by half an ulp: 8 float32 ulps bound the difference.
RTOL = 8 * float(np.finfo(np.float32).eps)

# Integer steps, steps between the fractional boundaries, and one past the end.
STEPS = (0, 1, 2, 3, 5, 7, 10, 11, 15, 20, 50, 100, 101)

# (schedule, args, kwargs, the argument the warning names)
CASES = [
    # levanter and MaxText pass as many boundaries as schedules: optax pairs
    # boundaries[i] with schedules[i + 1] and ignores the last one.
    ("join_schedules", "three", ([10, 20, 30],), {}, "boundaries"),
    ("join_schedules", "three", ([10],), {}, "boundaries"),
    ("join_schedules", "one", ([10],), {}, "boundaries"),
    ("join_schedules", "three", ([20, 10, 5],), {}, "boundaries"),
    ("linear_schedule", None, (1.0, 0.0, 10.5), {}, "transition_steps"),
    ("linear_schedule", None, (1.0, 0.0, 10, 2.5), {}, "transition_begin"),
    ("polynomial_schedule", None, (1.0, 0.1, -1.0, 10), {}, "power"),
    ("polynomial_schedule", None, (1.0, 0.1, 2.0, 10.5), {}, "transition_steps"),
    ("exponential_decay", None, (1.0, 2.5, 0.5), {}, "transition_steps"),
    ("exponential_decay", None, (1.0, 10, -0.5), {"staircase": True}, "decay_rate"),
    ("exponential_decay", None, (1.0, 10, -0.5, 0, False, 0.2), {}, "decay_rate"),
    ("cosine_decay_schedule", None, (1.0, 10, 0.1, -1.0), {}, "exponent"),
    ("cosine_decay_schedule", None, (1.0, 10.5), {}, "decay_steps"),
    ("warmup_cosine_decay_schedule", None, (0.0, 1.0, -2, 20), {}, "warmup_steps"),
    ("warmup_cosine_decay_schedule", None, (0.0, 1.0, 2.5, 20.5), {}, "warmup_steps"),
    ("warmup_constant_schedule", None, (0.0, 1.0, -2), {}, "warmup_steps"),
    ("warmup_constant_schedule", None, (0.0, 1.0, 2.5), {}, "warmup_steps"),
    (
        "warmup_exponential_decay_schedule",
        None,
        (0.0, 1.0, -2, 10, 0.5),
        {},
        "warmup_steps",
    ),
    ("linear_onecycle_schedule", None, (100.5, 1.0), {}, "transition_steps"),
    ("linear_onecycle_schedule", None, (100, 1.0, 0.3, 1.5), {}, "pct_final"),
    ("cosine_onecycle_schedule", None, (100, 1.0, -0.1), {}, "pct_start"),
    (
        "sgdr_schedule",
        None,
        (
            [
                {
                    "init_value": 0.0,
                    "peak_value": 1.0,
                    "warmup_steps": -2,
                    "decay_steps": 8,
                }
            ],
        ),
        {},
        "warmup_steps",
    ),
]


def _schedules(lib, which):
    n = {"one": 1, "three": 3}[which]
    return [lib.linear_schedule(float(i), float(i + 1), 10) for i in range(n)]


def _build(lib, name, which, args, kwargs):
    if which is not None:
        args = (_schedules(lib, which), *args)
    return getattr(lib.schedules, name)(*args, **kwargs)


def _id(case):
    name, which, args, kwargs, _ = case
    return f"{name}-{which or ''}{args!r}{kwargs or ''}"


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_accepted_with_optax_numbers_and_a_warning(case):
    name, which, args, kwargs, argument = case
    with pytest.warns(HyperparameterWarning, match=argument) as caught:
        ours = _build(gradax, name, which, args, kwargs)
    assert len([w for w in caught if w.category is HyperparameterWarning]) == 1
    assert caught[0].filename == __file__  # at the user's line
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # optax's own notes
        theirs = _build(optax, name, which, args, kwargs)
    for step in STEPS:
        got, want = np.asarray(ours(step)), np.asarray(theirs(step))
        np.testing.assert_allclose(got, want, rtol=RTOL)
    # And traced, as a schedule runs inside a jitted update.
    count = jnp.int32(7)
    np.testing.assert_allclose(jax.jit(ours)(count), jax.jit(theirs)(count), rtol=RTOL)


def test_join_schedules_warning_says_what_is_ignored():
    with pytest.warns(HyperparameterWarning, match=r"boundaries=.*\[30\].*ignored"):
        gradax.join_schedules(_schedules(gradax, "three"), boundaries=[10, 20, 30])
    with pytest.warns(HyperparameterWarning, match=r"schedules\[2:\] never run"):
        gradax.join_schedules(_schedules(gradax, "three"), boundaries=[10])


def test_join_schedules_boundaries_as_arrays():
    for boundaries in (np.array([10, 20]), jnp.array([10, 20])):
        ours = gradax.join_schedules(_schedules(gradax, "three"), boundaries)
        theirs = optax.join_schedules(_schedules(optax, "three"), boundaries)
        assert ours.boundaries == (10, 20)
        for step in STEPS:
            np.testing.assert_allclose(ours(step), theirs(step), rtol=RTOL)


def test_usual_arguments_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gradax.join_schedules(_schedules(gradax, "three"), [10, 20])
        gradax.warmup_cosine_decay_schedule(0.0, 1.0, 10, 100.0)
        gradax.linear_onecycle_schedule(100, 1.0, 0.0, 1.0)
