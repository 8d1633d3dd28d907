"""Schedules: the same numbers as optax, and pytrees with static step counts."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given
from hypothesis import strategies as st

import gradax
from gradax.declare import HyperparameterWarning

# Every step in this range is checked: before 0, each boundary and its
# neighbours, the steps between, and well past the end of every case below.
STEPS = tuple(range(-3, 64))
RTOL = 1e-6


def _lib_join(lib):
    return lib.join_schedules(
        [
            lib.linear_schedule(0.0, 1.0, 10),
            lib.cosine_decay_schedule(1.0, 15, alpha=0.2),
            lib.constant_schedule(0.2),
        ],
        [10, 25],
    )


def _mixed_join(lib):
    # A plain function inside gradax.join_schedules is wrapped, not refused.
    return lib.join_schedules(
        [lambda c: 0.5 * jnp.ones_like(c, jnp.float32), lib.linear_schedule(0.5, 0, 8)],
        [4],
    )


_CYCLES = [
    dict(init_value=0.0, peak_value=1.0, warmup_steps=3, decay_steps=12),
    dict(init_value=0.1, peak_value=0.5, warmup_steps=0, decay_steps=9, end_value=0.05),
    dict(init_value=0.0, peak_value=0.8, warmup_steps=4, decay_steps=20, exponent=2.0),
]

# (public name, positional args, keyword args); built in gradax and optax alike.
CASES = [
    ("constant_schedule", (0.3,), {}),
    ("linear_schedule", (1.0, 0.1, 20), {}),
    ("linear_schedule", (0.1, 1.0, 20), dict(transition_begin=5)),
    ("linear_schedule", (0.1, 1.0, 20), dict(transition_begin=-4)),
    ("linear_schedule", (1.0, 0.1, 0), {}),
    ("linear_schedule", (1.0, 0.1, -3), {}),
    ("polynomial_schedule", (1.0, 0.1, 2, 20), {}),
    ("polynomial_schedule", (1.0, 0.1), dict(power=0.5, transition_steps=30)),
    ("polynomial_schedule", (0.2, 1.5, 3.0, 17, 7), {}),
    ("polynomial_schedule", (1.0, 0.1, 2, 0), {}),
    ("piecewise_constant_schedule", (0.7,), {}),
    ("piecewise_constant_schedule", (1.0, {5: 0.5, 15: 0.1, 10: 2.0}), {}),
    ("piecewise_constant_schedule", (1.0, {0: 0.5, 30: 0.0}), {}),
    ("piecewise_constant_schedule", (2.0, {-2: 3.0}), {}),
    ("piecewise_constant_schedule", (2.0, {}), {}),
    ("piecewise_interpolate_schedule", ("linear", 1.0, {5: 2.0, 15: 0.1, 25: 1.0}), {}),
    ("piecewise_interpolate_schedule", ("cosine", 1.0, {5: 2.0, 15: 0.1, 25: 1.0}), {}),
    ("piecewise_interpolate_schedule", ("linear", 1.0, {0: 2.0, 10: 0.5}), {}),
    ("piecewise_interpolate_schedule", ("cosine", 0.5), {}),
    ("piecewise_interpolate_schedule", ("linear", 0.5, {}), {}),
    ("exponential_decay", (1.0, 5, 0.5), {}),
    ("exponential_decay", (1.0, 5, 0.5), dict(staircase=True)),
    ("exponential_decay", (1.0, 4, 0.7), dict(transition_begin=6, end_value=0.3)),
    ("exponential_decay", (0.5, 6, 1.5), dict(end_value=2.0)),
    ("exponential_decay", (0.5, 6, 1.5), dict(staircase=True, transition_begin=-2)),
    ("exponential_decay", (1.0, 5, 0.0), dict(end_value=0.3)),
    ("exponential_decay", (1.0, 0, 0.5), {}),
    ("cosine_decay_schedule", (1.0, 20), {}),
    ("cosine_decay_schedule", (2.0, 30), dict(alpha=0.1, exponent=2.0)),
    ("cosine_decay_schedule", (1.0, 1), dict(alpha=-0.5)),
    ("warmup_cosine_decay_schedule", (0.0, 1.0, 5, 25), {}),
    ("warmup_cosine_decay_schedule", (0.1, 2.0, 10, 40), dict(end_value=0.2)),
    ("warmup_cosine_decay_schedule", (0.0, 1.0, 0, 20), dict(exponent=3.0)),
    ("warmup_cosine_decay_schedule", (0.3, 0.0, 5, 20), dict(end_value=0.1)),
    ("warmup_cosine_decay_schedule", (0.0, 0.5, 5, 20), dict(end_value=1.0)),
    ("linear_onecycle_schedule", (30, 1.0), {}),
    ("linear_onecycle_schedule", (40, 2.0, 0.2, 0.5, 10.0, 100.0), {}),
    ("linear_onecycle_schedule", (1, 1.0), {}),
    ("linear_onecycle_schedule", (3, 1.0), {}),
    ("cosine_onecycle_schedule", (30, 1.0), {}),
    ("cosine_onecycle_schedule", (10, 3.0), dict(pct_start=0.0, div_factor=5.0)),
    ("cosine_onecycle_schedule", (1, 1.0), {}),
    ("warmup_constant_schedule", (0.0, 1.0, 7), {}),
    ("warmup_constant_schedule", (0.5, 1.0, 0), {}),
    ("warmup_exponential_decay_schedule", (0.0, 1.0, 5, 4, 0.5), {}),
    (
        "warmup_exponential_decay_schedule",
        (0.1, 1.0, 5, 4, 0.5),
        dict(transition_begin=3, staircase=True, end_value=0.2),
    ),
    ("warmup_exponential_decay_schedule", (0.1, 1.0, 0, 4, 2.0), dict(end_value=3.0)),
    ("sgdr_schedule", (_CYCLES,), {}),
    ("sgdr_schedule", (_CYCLES[:1],), {}),
    ("join_schedules", _lib_join, {}),
    ("join_schedules", _mixed_join, {}),
]


def _build(lib, case):
    name, args, kwargs = case
    if callable(args):
        return args(lib)
    return getattr(lib, name)(*args, **kwargs)


def _case_id(case):
    name, args, kwargs = case
    if callable(args):
        return f"{name}-{args.__name__}"
    return f"{name}-{args!r}-{kwargs!r}"


def _assert_close(got, want):
    """Equal to float32 rounding, relative to the schedule's own scale.

    Under jit XLA may round differently (it divides by multiplying with a
    reciprocal); values near 0 then differ by a few ulps of the largest one.
    """
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    atol = 1e-7 * max(1.0, float(np.max(np.abs(want))))
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=atol)


def _assert_same(ours, ref, where):
    ours_arr, ref_arr = jnp.asarray(ours), jnp.asarray(ref)
    assert (ours_arr.dtype, ours_arr.weak_type) == (ref_arr.dtype, ref_arr.weak_type), (
        where
    )
    np.testing.assert_allclose(ours_arr, ref_arr, rtol=RTOL, atol=0, err_msg=where)


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_matches_optax_python_int_counts(case):
    ours, ref = _build(gradax, case), _build(optax, case)
    for step in STEPS:
        _assert_same(ours(step), ref(step), f"step {step}")


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_matches_optax_traced_int32_counts(case):
    # The values are compared with optax's exact (eager) ones: where optax's
    # traced value is off at the end of a polynomial (see polynomial_value),
    # gradax's is not.
    ours, ref = _build(gradax, case), _build(optax, case)
    ours_jit, ref_jit = jax.jit(ours), jax.jit(ref)
    got, want = [], []
    for step in STEPS:
        count = jnp.asarray(step, jnp.int32)
        value, traced_ref = ours_jit(count), ref_jit(count)
        assert (value.dtype, value.weak_type) == (
            traced_ref.dtype,
            traced_ref.weak_type,
        )
        got.append(value)
        want.append(ref(step))
    _assert_close(got, want)


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_schedule_as_jit_argument(case):
    # The numbers become float32 tracers: optax's numbers to float32 rounding.
    ours, ref = _build(gradax, case), _build(optax, case)
    call = jax.jit(lambda schedule, count: schedule(count))
    got = [call(ours, jnp.int32(step)) for step in STEPS]
    _assert_close(got, [ref(step) for step in STEPS])


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_strict_dtype_promotion(case):
    ours = _build(gradax, case)
    expected = [np.asarray(ours(s)) for s in STEPS]
    with jax.numpy_dtype_promotion("strict"):
        eager = [np.asarray(ours(s)) for s in STEPS]
        traced = [np.asarray(jax.jit(ours)(jnp.int32(s))) for s in STEPS]
    np.testing.assert_array_equal(eager, expected)
    _assert_close(traced, expected)


def test_large_counts_do_not_overflow():
    big = 2**31 + 7
    ours = gradax.cosine_decay_schedule(1.0, big, alpha=0.1)
    ref = optax.cosine_decay_schedule(1.0, big, alpha=0.1)
    for step in (0, big // 2, big, 2 * big):
        _assert_same(ours(step), ref(step), f"step {step}")


def test_signatures_match_optax():
    import inspect

    names = [
        "constant_schedule",
        "linear_schedule",
        "polynomial_schedule",
        "piecewise_constant_schedule",
        "piecewise_interpolate_schedule",
        "exponential_decay",
        "cosine_decay_schedule",
        "linear_onecycle_schedule",
        "cosine_onecycle_schedule",
        "warmup_constant_schedule",
        "warmup_cosine_decay_schedule",
        "warmup_exponential_decay_schedule",
        "sgdr_schedule",
        "join_schedules",
    ]
    for name in names:
        ours = inspect.signature(getattr(gradax, name)).parameters
        ref = inspect.signature(getattr(optax, name)).parameters
        assert [(p.name, p.kind, p.default) for p in ours.values()] == [
            (p.name, p.kind, p.default) for p in ref.values()
        ], name
        assert issubclass(getattr(gradax, name), gradax.Schedule)


# --------------------------------------------------------------------------
# Pytree behaviour.
# --------------------------------------------------------------------------


def test_leaves_are_the_numbers():
    assert jax.tree.leaves(gradax.linear_schedule(1.0, 0.1, 20, 3)) == [1.0, 0.1]
    assert jax.tree.leaves(gradax.exponential_decay(1.0, 5, 0.5)) == [1.0, 0.5]
    assert jax.tree.leaves(gradax.exponential_decay(1.0, 5, 0.5, end_value=0.1)) == [
        1.0,
        0.5,
        0.1,
    ]
    pc = gradax.piecewise_constant_schedule(1.0, {10: 0.1, 5: 0.5})
    assert jax.tree.leaves(pc) == [1.0, 0.5, 0.1]
    onecycle = gradax.linear_onecycle_schedule(30, 1.0)
    assert jax.tree.leaves(onecycle) == [1.0, 25.0, 1e4]
    joined = _lib_join(gradax)
    assert jax.tree.leaves(joined) == [0.0, 1.0, 1.0, 0.2, 1.0, 0.2]
    sgdr = gradax.sgdr_schedule(_CYCLES[:2])
    assert jax.tree.leaves(sgdr) == [0.0, 1.0, 0.0, 1.0, 0.1, 0.5, 0.05, 1.0]


def test_new_numbers_do_not_retrace():
    traces = []

    @jax.jit
    def value(schedule, count):
        traces.append(None)
        return schedule(count)

    a = gradax.warmup_cosine_decay_schedule(0.0, 1.0, 5, 25, end_value=0.1)
    b = gradax.warmup_cosine_decay_schedule(0.2, 3.0, 5, 25, end_value=0.3)
    np.testing.assert_allclose(value(a, 3), a(3), rtol=RTOL)
    np.testing.assert_allclose(value(b, 3), b(3), rtol=RTOL)
    assert len(traces) == 1
    # Static step counts are part of the program: a new one retraces.
    value(gradax.warmup_cosine_decay_schedule(0.0, 1.0, 6, 25), 3)
    assert len(traces) == 2


def test_gradient_with_respect_to_numbers():
    schedule = gradax.linear_schedule(1.0, 0.2, 20)
    grads = jax.grad(lambda s: s(5))(schedule)
    np.testing.assert_allclose(grads.init_value, 0.75, rtol=RTOL)
    np.testing.assert_allclose(grads.end_value, 0.25, rtol=RTOL)
    # The peak_value == 0 branch of warmup_cosine_decay must stay finite.
    wc = gradax.warmup_cosine_decay_schedule(0.0, 0.0, 2, 10, end_value=0.1)
    grads = jax.grad(lambda s: s(6))(wc)
    assert all(np.isfinite(g) for g in jax.tree.leaves(grads))


def test_traced_decay_rate_keeps_optax_branches():
    # decay_rate decides the bound's side and the zero case; traced, it must
    # still give optax's numbers.
    call = jax.jit(lambda s, c: s(c))
    for rate, end in ((0.5, 0.2), (1.5, 2.0), (0.0, 0.3)):
        ours = gradax.exponential_decay(1.0, 4, rate, end_value=end)
        ref = optax.exponential_decay(1.0, 4, rate, end_value=end)
        for step in STEPS:
            np.testing.assert_allclose(call(ours, step), ref(step), rtol=1e-6)


def test_repr_shows_values():
    assert repr(gradax.linear_schedule(1.0, 0.1, 20)) == (
        "linear_schedule(init_value=1.0, end_value=0.1, transition_steps=20, "
        "transition_begin=0)"
    )
    text = repr(gradax.piecewise_constant_schedule(1.0, {10: 0.1, 5: 0.5}))
    assert text == (
        "piecewise_constant_schedule(init_value=1.0, "
        "boundaries_and_scales={5: 0.5, 10: 0.1})"
    )
    assert "peak_value=1.0" in repr(gradax.sgdr_schedule(_CYCLES[:1]))
    assert "linear_schedule(" in repr(_lib_join(gradax))


def test_equality_and_hash():
    a = gradax.warmup_cosine_decay_schedule(0.0, 1.0, 5, 25)
    b = gradax.warmup_cosine_decay_schedule(0.0, 1.0, 5, 25)
    assert a == b and hash(a) == hash(b)
    assert a != gradax.warmup_cosine_decay_schedule(0.0, 1.0, 5, 26)
    assert a != gradax.warmup_cosine_decay_schedule(0.0, 2.0, 5, 25)
    assert _lib_join(gradax) == _lib_join(gradax)
    pc = gradax.piecewise_constant_schedule(1.0, {5: 0.5})
    assert pc == gradax.piecewise_constant_schedule(1.0, {5: 0.5})
    assert pc != gradax.piecewise_constant_schedule(1.0, {5: 0.6})
    assert pc != gradax.piecewise_constant_schedule(1.0, {6: 0.5})
    assert a.replace(peak_value=2.0) == gradax.warmup_cosine_decay_schedule(
        0.0, 2.0, 5, 25
    )


def test_static_counts_become_python_numbers():
    schedule = gradax.linear_schedule(1.0, 0.0, np.int64(10), jnp.asarray(2))
    assert type(schedule.transition_steps) is int
    assert type(schedule.transition_begin) is int
    joined = gradax.join_schedules([gradax.constant_schedule(1.0)] * 2, (np.int32(4),))
    assert joined.boundaries == (4,) and type(joined.boundaries[0]) is int


def test_as_inner_hyperparameter():
    # A gradax schedule drives an optimizer exactly like optax's does.
    params = {"w": jnp.ones(3)}
    grads = {"w": jnp.asarray([0.1, -0.2, 0.3])}
    ours = gradax.scale_by_learning_rate(gradax.cosine_decay_schedule(0.1, 10))
    ref = optax.scale_by_learning_rate(optax.cosine_decay_schedule(0.1, 10))
    s_ours, s_ref = ours.init(params), ref.init(params)
    for _ in range(12):
        u_ours, s_ours = ours.update(grads, s_ours, params)
        u_ref, s_ref = ref.update(grads, s_ref, params)
        np.testing.assert_allclose(u_ours["w"], u_ref["w"], rtol=RTOL)


# --------------------------------------------------------------------------
# Validation.
# --------------------------------------------------------------------------

_BAD = [
    ("cosine_decay_schedule", (1.0, 0), "decay_steps", True),
    ("cosine_decay_schedule", (1.0, -5), "decay_steps", True),
    ("warmup_cosine_decay_schedule", (0.0, 1.0, 10, 10), "decay_steps", True),
    ("piecewise_constant_schedule", (1.0, {5: -0.1}), "boundaries_and_scales", True),
    ("piecewise_interpolate_schedule", ("cubic", 1.0), "interpolate_type", True),
    (
        "piecewise_interpolate_schedule",
        ("linear", 1.0, {5: 2.0, 9: -1.0}),
        "boundaries_and_scales",
        True,
    ),
    ("linear_onecycle_schedule", (0, 1.0), "transition_steps", True),
    ("cosine_onecycle_schedule", (-4, 1.0), "transition_steps", True),
    ("linear_onecycle_schedule", (10, 1.0, 0.3, 0.85, -2.0), "div_factor", True),
    ("cosine_onecycle_schedule", (10, 1.0, 0.3, 25.0, -1.0), "final_div_factor", True),
    # Mistakes optax only finds when the schedule is called, or never.
    ("sgdr_schedule", ([],), "cosine_kwargs", False),
    ("sgdr_schedule", ([1.0],), r"cosine_kwargs\[0\]", False),
    ("join_schedules", ([], []), "schedules", False),
    ("join_schedules", ([lambda c: c, 3.0], [1]), r"schedules\[1\]", False),
    ("linear_schedule", (1.0, 0.0, "10"), "transition_steps", False),
]


@pytest.mark.parametrize("name, args, match, optax_raises", _BAD)
def test_bad_arguments_raise(name, args, match, optax_raises):
    with pytest.raises(ValueError, match=match):
        getattr(gradax, name)(*args)
    if optax_raises:
        with pytest.raises((ValueError, ZeroDivisionError)):
            getattr(optax, name)(*args)


def test_traced_step_count_is_refused():
    with pytest.raises(ValueError, match="transition_steps"):
        jax.jit(lambda n: gradax.linear_schedule(1.0, 0.0, n)(3))(10)


def test_validation_skips_traced_numbers():
    # Numbers may be tracers when a schedule is built inside jit.
    @jax.jit
    def value(scale, count):
        return gradax.piecewise_constant_schedule(1.0, {3: scale})(count)

    np.testing.assert_allclose(value(-2.0, 5), -2.0)


# --------------------------------------------------------------------------
# Properties.
# --------------------------------------------------------------------------

_POS = st.floats(0.05, 10.0, allow_nan=False)
_DELTA = 1e-2


@given(
    init=st.floats(0.0, 1.0),
    peak=_POS,
    end_frac=st.floats(0.0, 1.0),
    warmup=st.integers(1, 500),
    decay=st.integers(1, 500),
    exponent=st.floats(0.5, 3.0),
)
def test_warmup_cosine_is_continuous_at_warmup_end(
    init, peak, end_frac, warmup, decay, exponent
):
    end = end_frac * peak
    args = (init, peak, warmup, warmup + decay, end, exponent)
    ours, ref = (
        gradax.warmup_cosine_decay_schedule(*args),
        optax.warmup_cosine_decay_schedule(*args),
    )
    at = float(ours(warmup))
    np.testing.assert_allclose(at, peak, rtol=1e-5)
    slope = abs(peak - init) / warmup + abs(peak - end) * math.pi / (2 * decay)
    tol = slope * _DELTA * 1.01 + 1e-5 * peak
    for t in (warmup - _DELTA, warmup + _DELTA):
        assert abs(float(ours(t)) - at) <= tol
        np.testing.assert_allclose(ours(t), ref(t), rtol=1e-6)


@given(
    values=st.lists(st.floats(-5.0, 5.0), min_size=3, max_size=3),
    n1=st.integers(1, 300),
    n2=st.integers(1, 300),
)
def test_join_of_meeting_linear_pieces_is_continuous(values, n1, n2):
    a, b, c = values
    schedule = gradax.join_schedules(
        [gradax.linear_schedule(a, b, n1), gradax.linear_schedule(b, c, n2)], [n1]
    )
    ref = optax.join_schedules(
        [optax.linear_schedule(a, b, n1), optax.linear_schedule(b, c, n2)], [n1]
    )
    at = float(schedule(n1))
    scale = 1e-6 * (abs(a) + abs(b) + abs(c) + 1)
    assert abs(at - b) <= scale
    slope = abs(b - a) / n1 + abs(c - b) / n2
    for t in (n1 - _DELTA, n1 + _DELTA):
        assert abs(float(schedule(t)) - at) <= slope * _DELTA * 1.01 + scale
        np.testing.assert_allclose(schedule(t), ref(t), rtol=1e-6, atol=1e-7)


@given(
    init=_POS,
    pairs=st.dictionaries(
        st.integers(1, 200),
        st.one_of(st.floats(0.1, 0.9), st.floats(1.1, 5.0)),
        min_size=1,
        max_size=4,
    ),
)
def test_piecewise_constant_jumps_exactly_at_boundaries(init, pairs):
    schedule = gradax.piecewise_constant_schedule(init, pairs)
    ref = optax.piecewise_constant_schedule(init, pairs)
    steps = sorted(pairs)
    for i, b in enumerate(steps):
        before, at = float(schedule(b - 1)), float(schedule(b))
        assert float(schedule(b - 0.5)) == before
        np.testing.assert_allclose(at, before * pairs[b], rtol=1e-6)
        assert at != before
        # Constant up to the next boundary.
        last = steps[i + 1] - 1 if i + 1 < len(steps) else b + 50
        assert float(schedule(last)) == at
        for t in (b - 1, b, last):
            _assert_same(schedule(t), ref(t), f"step {t}")


@given(
    init=_POS,
    steps=st.integers(-2, 40),
    rate=st.one_of(st.just(0.0), st.floats(0.05, 3.0)),
    begin=st.integers(-5, 20),
    staircase=st.booleans(),
    end=st.one_of(st.none(), st.floats(0.01, 20.0)),
    counts=st.lists(st.integers(-10, 300), min_size=1, max_size=8),
)
def test_exponential_decay_matches_optax(
    init, steps, rate, begin, staircase, end, counts
):
    args = (init, steps, rate, begin, staircase, end)
    ours, ref = gradax.exponential_decay(*args), optax.exponential_decay(*args)
    for count in counts:
        _assert_same(ours(count), ref(count), f"step {count}")


# --------------------------------------------------------------------------
# Bounds: known from the arguments, checked against a dense evaluation.
# --------------------------------------------------------------------------

# Steps 0 to 400: past the end of every case above (bounds are over steps >= 0).
DENSE = np.arange(0, 401)


def _dense_values(schedule):
    return np.asarray(jax.vmap(schedule)(jnp.asarray(DENSE, jnp.int32)), np.float64)


def _assert_bounds_hold(schedule, bounds):
    values = _dense_values(schedule)
    low, high = bounds
    assert low <= high
    slack = 1e-6 * max(1.0, abs(low), abs(high))
    assert values.min() >= low - slack, (schedule, bounds, values.min())
    assert values.max() <= high + slack, (schedule, bounds, values.max())
    return values, slack


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_bounds_hold_every_value(case):
    schedule = _build(gradax, case)
    bounds = schedule.bounds()
    if case[0] == "join_schedules" and case[1] is _mixed_join:
        assert bounds is None  # a plain function's values are unknown
        return
    if case[0] == "exponential_decay" and case[1][2] > 1 and "end_value" not in case[2]:
        assert bounds is None  # grows without bound
        return
    assert bounds is not None, case
    _assert_bounds_hold(schedule, bounds)


# Schedules whose smallest and largest values are reached within DENSE steps.
TIGHT = [
    gradax.constant_schedule(-0.3),
    gradax.linear_schedule(1.0, -0.5, 20, transition_begin=5),
    gradax.polynomial_schedule(0.1, 2.0, 0.5, 30),
    gradax.polynomial_schedule(0.1, 2.0, 0.0, 30),  # 0 ** 0: constant
    gradax.linear_schedule(1.0, 5.0, -3),  # constant init_value
    gradax.cosine_decay_schedule(2.0, 50, alpha=-0.5, exponent=2.0),
    gradax.cosine_decay_schedule(-1.0, 50, alpha=0.1),
    gradax.warmup_cosine_decay_schedule(0.0, 1.0, 10, 60, end_value=0.05),
    gradax.warmup_cosine_decay_schedule(0.5, 0.2, 0, 60, end_value=0.3),
    gradax.warmup_cosine_decay_schedule(-0.2, 0.0, 5, 60, end_value=0.3),
    gradax.warmup_constant_schedule(0.0, 3.0, 8),
    gradax.exponential_decay(1.0, 5, 0.5, end_value=0.1),
    gradax.exponential_decay(0.5, 6, 1.5, end_value=2.0),
    gradax.exponential_decay(0.5, 6, 1.5, end_value=0.2),  # capped from the start
    gradax.exponential_decay(1.0, 0, 3.0, end_value=0.5),  # constant, no cap
    gradax.warmup_exponential_decay_schedule(0.0, 1.0, 5, 4, 0.5, end_value=0.2),
    gradax.warmup_exponential_decay_schedule(0.1, 1.0, 0, 4, 2.0, end_value=3.0),
    gradax.piecewise_constant_schedule(1.0, {5: 0.5, 15: 4.0, 10: 0.1}),
    gradax.piecewise_constant_schedule(2.0, {-2: 3.0, 0: 0.5, 7: 0.0}),
    gradax.piecewise_interpolate_schedule("linear", 1.0, {5: 2.0, 15: 0.1, 25: 1.0}),
    gradax.piecewise_interpolate_schedule("cosine", -1.0, {0: 2.0, 10: 0.5}),
    gradax.linear_onecycle_schedule(40, 2.0, 0.2, 0.5, 10.0, 100.0),
    gradax.linear_onecycle_schedule(1, 1.0),  # two boundaries round to step 0
    gradax.cosine_onecycle_schedule(30, 1.0),
    gradax.cosine_onecycle_schedule(10, 3.0, pct_start=0.0, div_factor=5.0),
    gradax.sgdr_schedule(_CYCLES),
    _lib_join(gradax),
    gradax.join_schedules(
        [gradax.constant_schedule(2.0), gradax.linear_schedule(-1.0, 0.0, 10)], [5]
    ),
]


@pytest.mark.parametrize("schedule", TIGHT, ids=lambda s: type(s).__name__)
def test_bounds_are_the_smallest_and_largest_value(schedule):
    bounds = schedule.bounds()
    values, slack = _assert_bounds_hold(schedule, bounds)
    np.testing.assert_allclose(values.min(), bounds[0], rtol=1e-6, atol=slack)
    np.testing.assert_allclose(values.max(), bounds[1], rtol=1e-6, atol=slack)


def test_bounds_hold_but_may_be_loose_before_step_0():
    # A boundary before step 0: the level 4 is only passed through before
    # step 0, so the bounds hold the values from step 0 on without being met.
    schedule = gradax.piecewise_interpolate_schedule("linear", 1.0, {-3: 4.0, 6: 0.25})
    values, _ = _assert_bounds_hold(schedule, schedule.bounds())
    assert schedule.bounds() == (1.0, 4.0) and values.max() == 3.0


def test_bounds_unknown_for_arrays_and_growth():
    assert gradax.linear_schedule(jnp.asarray(1.0), 0.0, 10).bounds() is None
    assert gradax.exponential_decay(1.0, 5, 1.1).bounds() is None
    assert gradax.exponential_decay(-1.0, 5, 1.1, end_value=3.0).bounds() is None
    assert gradax.join_schedules([lambda c: c * 1.0], []).bounds() is None
    # Known again once the growth is capped.
    assert gradax.exponential_decay(1.0, 5, 1.1, end_value=3.0).bounds() == (1.0, 3.0)


def test_out_of_range_schedules_are_refused_at_construction():
    # A learning rate that turns negative is accepted, as optax accepts it,
    # with a warning (tests/core/test_declarations.py); other ranges refuse.
    with pytest.warns(HyperparameterWarning, match="learning_rate"):
        gradax.adam(learning_rate=gradax.linear_schedule(1e-3, -1e-3, 100))
    with pytest.raises(gradax.HyperparameterError, match="b1"):
        gradax.adam(1e-3, b1=gradax.linear_schedule(0.9, 1.0, 100))
    with pytest.raises(gradax.HyperparameterError, match="decay"):
        gradax.trace(gradax.constant_schedule(1.5))
    with pytest.raises(gradax.HyperparameterError, match="max_norm"):
        gradax.clip_by_global_norm(gradax.cosine_decay_schedule(-1.0, 10))
    # In range, or unknown (a growing schedule, an array): accepted.
    gradax.adam(gradax.warmup_cosine_decay_schedule(0.0, 1e-3, 10, 100))
    gradax.adam(gradax.exponential_decay(1e-7, 10, 1.5))
    gradax.adam(gradax.linear_schedule(jnp.asarray(1e-3), 0.0, 10))


def test_whole_float_step_counts_are_steps():
    # optax accepts transition_steps=1e4; gradax keeps it as the integer step.
    schedule = gradax.linear_schedule(1.0, 0.0, 1e4, transition_begin=2.0)
    assert schedule.transition_steps == 10_000 and schedule.transition_begin == 2
    ref = optax.linear_schedule(1.0, 0.0, 1e4, transition_begin=2.0)
    for step in (0, 3, 5000, 20_000):
        np.testing.assert_allclose(schedule(step), ref(step), rtol=RTOL)
    # Fractional steps, negative warmups, rates and exponents are accepted as
    # optax accepts them, with a warning: test_optax_tolerated_calls.py.
