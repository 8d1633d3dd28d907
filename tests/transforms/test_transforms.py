"""Building blocks (gradax/transforms, gradax/optimizers/sgd.py) against optax.

Every comparison runs both libraries on the same pytree (a scalar, a vector, a
matrix and a 3-D array) for tens of steps, feeding each side its own updated
params, and checks updates and final states.

Tolerances: the gradax code does the same operations in the same order as
optax, so float32 results agree to a few ulps (not always bit for bit: XLA's
CPU division rounds differently in vectorized and scalar code, which depends on
buffer alignment). ``RTOL = 1e-6`` is about 8 ulps of float32. An element that
is small next to the rest of its leaf (a sum of updates that cancels, a
centralized row) carries the rounding of its large neighbours, so the absolute
tolerance is ``RTOL`` times the leaf's largest magnitude (plus ``ATOL``, one
ulp at 1.0, for leaves that are all near zero). Looser tolerances are stated
where they are used.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradax
import gradax.tree as gt

RTOL = 1e-6
ATOL = 1e-7
STEPS = 30
SCALES = (0.1, 1.0, 5.0)  # gradients small, unit and large, so clips both trigger


# ---------------------------------------------------------------------------
# Trees.
# ---------------------------------------------------------------------------


def make_tree(
    dtype: Any = jnp.float32, seed: int = 0, scale: float = 1.0, positive=False
) -> dict:
    """A scalar, a vector, a matrix and a 3-D array."""
    rng = np.random.default_rng(seed)

    def arr(shape):
        x = rng.normal(size=shape) * scale
        if jnp.issubdtype(dtype, jnp.complexfloating):
            x = x + 1j * rng.normal(size=shape) * scale
        if positive:
            x = np.abs(x) + 0.1
        return jnp.asarray(x, dtype)

    return {
        "scalar": arr(()),
        "vector": arr((3,)),
        "matrix": arr((4, 3)),
        "cube": arr((2, 3, 4)),
    }


def grads_at(step: int, dtype: Any = jnp.float32, nans: bool = False) -> dict:
    g = make_tree(dtype, seed=100 + step, scale=SCALES[step % len(SCALES)])
    if nans and step % 2:
        g["matrix"] = g["matrix"].at[1, 2].set(jnp.nan)
        g["scalar"] = jnp.asarray(jnp.nan, dtype)
    return g


def assert_close(actual: Any, expected: Any, rtol=RTOL, atol=ATOL) -> None:
    """Same leaves (count, dtypes, shapes), values close."""
    leaves_a = jax.tree.leaves(gt.unwrap_random_key_data(actual))
    leaves_e = jax.tree.leaves(optax.tree.unwrap_random_key_data(expected))
    assert len(leaves_a) == len(leaves_e)
    for a, e in zip(leaves_a, leaves_e, strict=True):
        a, e = jnp.asarray(a), jnp.asarray(e)
        assert a.dtype == e.dtype
        assert a.shape == e.shape
        scale = 0.0
        if e.size and jnp.issubdtype(e.dtype, jnp.inexact):
            scale = float(jnp.max(jnp.abs(e)))
            scale = scale if math.isfinite(scale) else 0.0
        np.testing.assert_allclose(a, e, rtol=rtol, atol=atol + rtol * scale)


def _is_schedule_count(node: Any) -> bool:
    return isinstance(
        node,
        (gradax.ScheduleState, gradax.ScaleByScheduleState, gradax.WeightDecaySchedule),
    )


def without_schedule_counts(state: Any, count: int) -> Any:
    """``state`` without the step counts that only schedules add.

    A transformation with no count of its own keeps one while a field holds
    a schedule (as optax does for a scheduled learning rate or weight decay):
    ``ScaleByScheduleState(count)`` in place of ``EmptyState()``, or a
    ``ScheduleState(count, inner_state)`` around its state. Each such count
    must equal the number of updates done.
    """

    def strip(node):
        if not _is_schedule_count(node):
            return node
        assert int(node.count) == count, (node, count)
        if isinstance(node, gradax.ScheduleState):
            return without_schedule_counts(node.inner_state, count)
        return gradax.EmptyState()

    return jax.tree.map(strip, state, is_leaf=_is_schedule_count)


def avals(tree: Any) -> Any:
    return jax.tree.map(lambda x: (x.shape, x.dtype, jax.typeof(x).weak_type), tree)


# ---------------------------------------------------------------------------
# The cases: (id, gradax transformation, optax twin).
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    build: Callable[[], Any]
    build_optax: Callable[[], Any]
    complex_ok: bool = True
    positive_params: bool = False
    nans: bool = False
    # States to compare, found by name: a scheduled learning rate makes the
    # state structures differ (gradax's ScheduleState holds a count and an
    # empty state, optax's ScaleByScheduleState a count), so that case
    # compares its trace only.
    state_key: str | None = None

    def __str__(self) -> str:
        return self.id


CASES = [
    Case("trace", lambda: gradax.trace(0.9), lambda: optax.trace(0.9)),
    Case(
        "trace_nesterov",
        lambda: gradax.trace(0.8, True),
        lambda: optax.trace(0.8, True),
    ),
    # decay=1 keeps a running sum; optax accepts it, so gradax does too.
    Case("trace_running_sum", lambda: gradax.trace(1.0), lambda: optax.trace(1.0)),
    Case(
        "trace_running_sum_nesterov",
        lambda: gradax.trace(1.0, True),
        lambda: optax.trace(1.0, True),
    ),
    Case(
        "ema_decay_one",
        lambda: gradax.ema(1.0, debias=False),
        lambda: optax.ema(1.0, debias=False),
    ),
    Case(
        "trace_bf16_accumulator",
        lambda: gradax.trace(0.9, accumulator_dtype=jnp.bfloat16),
        lambda: optax.trace(0.9, accumulator_dtype=jnp.bfloat16),
        complex_ok=False,
    ),
    Case("ema", lambda: gradax.ema(0.9), lambda: optax.ema(0.9)),
    Case(
        "ema_no_debias",
        lambda: gradax.ema(0.7, False),
        lambda: optax.ema(0.7, False),
    ),
    Case(
        "ema_bf16_accumulator",
        lambda: gradax.ema(0.99, accumulator_dtype="bfloat16"),
        lambda: optax.ema(0.99, accumulator_dtype="bfloat16"),
        complex_ok=False,
    ),
    Case("clip", lambda: gradax.clip(0.5), lambda: optax.clip(0.5), complex_ok=False),
    Case(
        "clip_by_block_rms",
        lambda: gradax.clip_by_block_rms(0.7),
        lambda: optax.clip_by_block_rms(0.7),
    ),
    Case(
        "clip_by_global_norm",
        lambda: gradax.clip_by_global_norm(3.0),
        lambda: optax.clip_by_global_norm(3.0),
    ),
    Case(
        "adaptive_grad_clip",
        lambda: gradax.adaptive_grad_clip(0.3),
        lambda: optax.adaptive_grad_clip(0.3),
    ),
    Case(
        "adaptive_grad_clip_eps",
        lambda: gradax.adaptive_grad_clip(0.05, eps=0.5),
        lambda: optax.adaptive_grad_clip(0.05, eps=0.5),
    ),
    Case(
        "add_noise",
        lambda: gradax.add_noise(0.3, 0.55, 7),
        lambda: optax.add_noise(0.3, 0.55, 7),
    ),
    Case(
        "add_noise_typed_key",
        lambda: gradax.add_noise(0.1, 1.0, key=jax.random.key(3)),
        lambda: optax.add_noise(0.1, 1.0, key=jax.random.key(3)),
    ),
    Case(
        "add_noise_seed",
        lambda: gradax.add_noise(0.2, 0.5, seed=11),
        lambda: optax.add_noise(0.2, 0.5, key=11),
    ),
    Case("centralize", gradax.centralize, optax.centralize),
    Case("zero_nans", gradax.zero_nans, optax.zero_nans, nans=True),
    Case(
        "keep_params_nonnegative",
        gradax.keep_params_nonnegative,
        optax.keep_params_nonnegative,
        complex_ok=False,
        positive_params=True,
    ),
    Case("sgd", lambda: gradax.sgd(0.1), lambda: optax.sgd(0.1)),
    Case(
        "sgd_momentum",
        lambda: gradax.sgd(0.05, 0.9),
        lambda: optax.sgd(0.05, 0.9),
    ),
    Case(
        "sgd_nesterov",
        lambda: gradax.sgd(0.05, 0.9, True),
        lambda: optax.sgd(0.05, 0.9, True),
    ),
    Case(
        "sgd_bf16_accumulator",
        lambda: gradax.sgd(0.05, momentum=0.5, accumulator_dtype=jnp.bfloat16),
        lambda: optax.sgd(0.05, momentum=0.5, accumulator_dtype=jnp.bfloat16),
        complex_ok=False,
    ),
    Case(
        "sgd_lr_schedule",
        lambda: gradax.sgd(lambda c: 0.1 / (1.0 + c), 0.9),
        lambda: optax.sgd(lambda c: 0.1 / (1.0 + c), 0.9),
        state_key="trace",
    ),
]
COMPLEX_CASES = [c for c in CASES if c.complex_ok]


def params_for(case: Case) -> Any:
    """pytest params for ``case``, named by its id."""
    return pytest.param(case, id=case.id)


def run_both(
    case: Case, dtype: Any = jnp.float32, steps: int = STEPS, jit: bool = False
):
    """Run gradax and optax side by side; with ``jit``, both are jitted.

    Under jit the gradax transformation is a traced argument (its numbers are
    leaves); the optax one is closed over.
    """
    ours, theirs = case.build(), case.build_optax()
    init_ours, init_theirs = type(ours).init, theirs.init
    update_ours, update_theirs = type(ours).update, theirs.update
    if jit:
        init_ours, init_theirs = jax.jit(init_ours), jax.jit(init_theirs)
        update_ours, update_theirs = jax.jit(update_ours), jax.jit(update_theirs)
    params = make_tree(dtype, seed=1, positive=case.positive_params)
    p_ours = p_theirs = params
    s_ours, s_theirs = init_ours(ours, params), init_theirs(params)
    for step in range(steps):
        g = grads_at(step, dtype, nans=case.nans)
        u_ours, s_ours = update_ours(ours, g, s_ours, p_ours)
        u_theirs, s_theirs = update_theirs(g, s_theirs, p_theirs)
        assert_close(u_ours, u_theirs)
        p_ours = gradax.apply_updates(p_ours, u_ours)
        p_theirs = optax.apply_updates(p_theirs, u_theirs)
    if case.state_key is None:
        assert_close(without_schedule_counts(s_ours, steps), s_theirs)
    else:
        assert_close(
            gt.get(s_ours, case.state_key), optax.tree.get(s_theirs, case.state_key)
        )
    assert_close(p_ours, p_theirs)


@pytest.mark.parametrize("case", [params_for(c) for c in CASES])
def test_matches_optax(case):
    run_both(case)


@pytest.mark.parametrize("case", [params_for(c) for c in COMPLEX_CASES])
def test_matches_optax_complex(case):
    run_both(case, jnp.complex64)


def test_comparisons_can_fail():
    # A different hyperparameter must be caught by the same comparison.
    case = Case("wrong", lambda: gradax.trace(0.9), lambda: optax.trace(0.899))
    with pytest.raises(AssertionError):
        run_both(case, steps=3)


def test_keep_params_nonnegative_clamps_at_zero():
    tx = gradax.keep_params_nonnegative()
    params = make_tree(seed=1, positive=True)
    state = tx.init(params)
    for step in range(10):
        updates, state = tx.update(grads_at(step), state, params)
        params = gradax.apply_updates(params, updates)
        assert all(bool(jnp.all(p >= 0)) for p in jax.tree.leaves(params))


def test_zero_nans_state_reports_nans():
    tx = gradax.zero_nans()
    params = make_tree()
    updates, state = tx.update(grads_at(1, nans=True), tx.init(params))
    assert {k: bool(v) for k, v in state.found_nan.items()} == {
        "scalar": True,
        "vector": False,
        "matrix": True,
        "cube": False,
    }
    assert not any(bool(jnp.any(jnp.isnan(u))) for u in jax.tree.leaves(updates))


def test_add_noise_keys():
    g = make_tree()

    def first(tx):
        return tx.update(g, tx.init(g))[0]["matrix"]

    same = first(gradax.add_noise(1.0, 0.5, 0)), first(gradax.add_noise(1.0, 0.5))
    np.testing.assert_array_equal(*same)  # key None is seed 0, as in optax
    other = first(gradax.add_noise(1.0, 0.5, 1))
    assert not np.allclose(same[0], other)
    raw = first(gradax.add_noise(1.0, 0.5, jax.random.PRNGKey(0)))
    typed = first(gradax.add_noise(1.0, 0.5, jax.random.key(0)))
    np.testing.assert_array_equal(raw, typed)


# ---------------------------------------------------------------------------
# Schedules, jit, dtypes.
# ---------------------------------------------------------------------------


def constant_schedules(tx: Any) -> Any:
    """``tx`` with every float hyperparameter replaced by a constant schedule."""
    changes = {
        name: (lambda v: lambda count: v)(getattr(tx, name))
        for name in type(tx)._data_fields
        if isinstance(getattr(tx, name), float)
    }
    assert changes, f"{tx!r} has no float hyperparameter"
    return tx.replace(**changes)


SCHEDULABLE = [
    c
    for c in CASES
    if c.id not in {"centralize", "zero_nans", "keep_params_nonnegative"}
    and c.id != "sgd_lr_schedule"
]


@pytest.mark.parametrize("case", [params_for(c) for c in SCHEDULABLE])
def test_constant_schedule_equals_number(case):
    plain = case.build()
    scheduled = constant_schedules(plain)
    params = make_tree(seed=1, positive=case.positive_params)
    s_plain, s_sched = plain.init(params), scheduled.init(params)
    # The same state but for the counts the schedules add.
    assert jax.tree.structure(without_schedule_counts(s_sched, 0)) == (
        jax.tree.structure(s_plain)
    )
    for step in range(10):
        g = grads_at(step)
        u_plain, s_plain = plain.update(g, s_plain, params)
        u_sched, s_sched = scheduled.update(g, s_sched, params)
        assert_close(u_sched, u_plain, rtol=0, atol=0)
    assert_close(without_schedule_counts(s_sched, 10), s_plain, rtol=0, atol=0)


@pytest.mark.parametrize("case", [params_for(c) for c in CASES])
def test_matches_optax_under_jit(case):
    # Compared with jitted optax: XLA computes bfloat16 arithmetic in float32
    # under jit but rounds each eager operation, so jit need not equal eager.
    run_both(case, steps=10, jit=True)


DTYPES = [jnp.bfloat16, jnp.float16, jnp.float32]


def dtype_params(dtype: Any) -> dict:
    tree = make_tree(dtype, seed=1, positive=True)
    tree["weak"] = jnp.asarray(0.5)  # a weakly typed float32 scalar
    return tree


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: jnp.dtype(d).name)
@pytest.mark.parametrize("case", [params_for(c) for c in CASES])
def test_state_and_update_dtypes(case, dtype):
    tx = case.build()
    params = dtype_params(dtype)
    state = tx.init(params)
    before = avals(gt.unwrap_random_key_data(state))
    step = jax.jit(lambda s, g: tx.update(g, s, params))
    for k in range(3):
        g = jax.tree.map(
            lambda p, x: x.astype(p.dtype),
            params,
            grads_at(k) | {"weak": jnp.asarray(0.25)},
        )
        updates, state = step(state, g)
        assert avals(gt.unwrap_random_key_data(state)) == before
        assert jax.tree.map(lambda u: u.dtype, updates) == jax.tree.map(
            lambda x: x.dtype, g
        )


def test_accumulator_dtype_is_kept():
    params = dtype_params(jnp.bfloat16)
    for tx, field in (
        (gradax.trace(0.9, accumulator_dtype=jnp.float32), "trace"),
        (gradax.ema(0.9, accumulator_dtype=jnp.float32), "ema"),
    ):
        state = tx.init(params)
        state = tx.update(params, state)[1]
        assert {x.dtype for x in jax.tree.leaves(getattr(state, field))} == {
            jnp.dtype(jnp.float32)
        }


def test_float64_accumulator_is_canonicalized():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        state = gradax.trace(0.9, accumulator_dtype=jnp.float64).init(make_tree())
    expected = jax.dtypes.canonicalize_dtype(jnp.float64)
    assert {x.dtype for x in jax.tree.leaves(state.trace)} == {jnp.dtype(expected)}


# ---------------------------------------------------------------------------
# Validation and the surface.
# ---------------------------------------------------------------------------

BAD = [
    (lambda: gradax.trace(1.5), "decay"),
    (lambda: gradax.trace(-0.1), "decay"),
    (lambda: gradax.ema(1.5), "decay"),
    (lambda: gradax.ema(-0.5), "decay"),
    (lambda: gradax.clip(-1.0), "max_delta"),
    (lambda: gradax.clip_by_block_rms(-0.1), "threshold"),
    (lambda: gradax.clip_by_global_norm(-2.0), "max_norm"),
    (lambda: gradax.clip_by_global_norm(math.nan), "max_norm"),
    (lambda: gradax.adaptive_grad_clip(-0.1), "clipping"),
    (lambda: gradax.adaptive_grad_clip(0.1, eps=-1e-3), "eps"),
    (lambda: gradax.add_noise(-0.1, 0.5), "eta"),
    (lambda: gradax.add_noise(0.1, -0.5), "gamma"),
    (lambda: gradax.add_noise(0.1, 0.5, 1, seed=2), "key or seed"),
    (lambda: gradax.add_noise(0.1, 0.5, seed=1.5), "seed"),
    (lambda: gradax.sgd(0.1, 1.5), "momentum"),
    (lambda: gradax.sgd(0.1, -0.9), "momentum"),
    (lambda: gradax.trace(0.9).replace(decay=2.0), "decay"),
    (
        lambda: gradax.per_example_global_norm_clip([jnp.ones((2, 3))], -1.0),
        "l2_norm_clip",
    ),
    (
        lambda: gradax.per_example_layer_norm_clip([jnp.ones((2, 3))], -1.0),
        "global_l2_norm_clip",
    ),
]


@pytest.mark.parametrize("make,name", BAD, ids=[b[1] for b in BAD])
def test_bad_hyperparameters_raise(make, name):
    with pytest.raises(ValueError, match=name):
        make()


def test_error_message_names_value_and_range():
    # The message names the argument and its range, then the value.
    with pytest.raises(ValueError, match=r"decay must be in \[0, 1\] .*got 1\.01"):
        gradax.trace(1.01)
    with pytest.raises(ValueError, match=r"decay must be in \[0, 1\] .*got 1\.5"):
        gradax.ema(1.5)


def test_edge_values_are_accepted():
    gradax.trace(0.0)
    gradax.trace(1.0)  # a running sum, as optax allows
    gradax.ema(1.0)
    gradax.ema(0.0)
    gradax.sgd(0.1, None)
    gradax.sgd(0.1, 0.0)
    gradax.clip(0.0)
    gradax.clip_by_global_norm(math.inf)
    gradax.add_noise(0.0, 0.0)
    # Schedules and arrays of valid values are not rejected.
    gradax.trace(lambda count: 0.9)
    gradax.clip_by_global_norm(jnp.asarray(1.0))


def test_needs_params():
    g = make_tree()
    for tx in (gradax.adaptive_grad_clip(0.1), gradax.keep_params_nonnegative()):
        with pytest.raises(ValueError, match="params"):
            tx.update(g, tx.init(g))


PUBLIC = [
    "trace",
    "ema",
    "clip",
    "clip_by_block_rms",
    "clip_by_global_norm",
    "adaptive_grad_clip",
    "per_example_global_norm_clip",
    "per_example_layer_norm_clip",
    "global_norm",
    "add_noise",
    "centralize",
    "zero_nans",
    "keep_params_nonnegative",
    "sgd",
]


@pytest.mark.parametrize("name", PUBLIC)
def test_same_signature_as_optax(name):
    ours = inspect.signature(getattr(gradax, name)).parameters
    theirs = inspect.signature(getattr(optax, name)).parameters
    assert list(ours) == list(theirs)
    for p, q in zip(ours.values(), theirs.values(), strict=True):
        assert p.kind == q.kind, p.name
        assert p.default is q.default or p.default == q.default, p.name


@pytest.mark.parametrize(
    "name",
    ["TraceState", "EmaState", "AddNoiseState", "ZeroNansState"],
)
def test_state_fields_as_optax(name):
    assert getattr(gradax, name)._fields == getattr(optax, name)._fields


@pytest.mark.parametrize(
    "name",
    [
        "ClipState",
        "ClipByGlobalNormState",
        "AdaptiveGradClipState",
        "NonNegativeParamsState",
    ],
)
def test_empty_state_aliases(name):
    assert getattr(gradax, name) is gradax.EmptyState


def test_repr_and_equality_show_hyperparameters():
    tx = gradax.sgd(0.1, 0.9, True)
    assert repr(tx) == (
        "sgd(learning_rate=0.1, momentum=0.9, nesterov=True, accumulator_dtype=None)"
    )
    assert tx == gradax.sgd(0.1, 0.9, nesterov=True)
    assert tx != gradax.sgd(0.1, 0.8, nesterov=True)
    assert jax.tree.leaves(gradax.trace(0.9, True)) == [0.9]


def test_sgd_without_momentum_has_no_trace():
    state = gradax.sgd(0.1).init(make_tree())
    # optax's tree: two empty states; a scheduled rate keeps a count.
    assert state == (gradax.EmptyState(), gradax.EmptyState())
    scheduled = gradax.sgd(gradax.linear_schedule(0.1, 0.0, 10)).init(make_tree())
    assert isinstance(scheduled[1], gradax.ScaleByScheduleState)
    state = gradax.sgd(0.1, 0.9).init(make_tree())
    assert isinstance(state[0], gradax.TraceState)


def test_hyperparameter_change_under_jit_does_not_recompile():
    params = make_tree()
    traces = []

    @jax.jit
    def step(tx, g, state):
        traces.append(None)
        return tx.update(g, state)

    tx = gradax.clip_by_global_norm(1.0)
    u1, _ = step(tx, grads_at(2), tx.init(params))
    u2, _ = step(gradax.clip_by_global_norm(2.0), grads_at(2), tx.init(params))
    assert len(traces) == 1
    np.testing.assert_allclose(gt.norm(u1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(gt.norm(u2), 2.0, rtol=1e-6)


# ---------------------------------------------------------------------------
# Functions: global_norm, unitwise_norm, per-example clipping.
# ---------------------------------------------------------------------------


def test_global_norm():
    tree = make_tree(jnp.complex64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        expected = optax.global_norm(tree)
    assert_close(gradax.global_norm(tree), expected)


@pytest.mark.parametrize(
    "shape", [(), (5,), (1, 5), (3, 4), (2, 3, 4), (2, 2, 3, 4), (2, 2, 2, 3, 4)]
)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.complex64])
def test_unitwise_norm(shape, dtype):
    x = make_tree(dtype)["cube"].ravel()
    x = jnp.resize(x, shape)
    assert_close(gradax.unitwise_norm(x), optax.transforms.unitwise_norm(x))
    if len(shape) >= 2:
        axis = (0, len(shape) - 1)
        assert_close(
            gradax.unitwise_norm(x, axis),
            optax.transforms.unitwise_norm(x, axis=axis),
        )


def test_unitwise_norm_rank_6_needs_axis():
    with pytest.raises(ValueError, match="axis"):
        gradax.unitwise_norm(jnp.ones((1, 2, 1, 2, 1, 2)))


def test_unitwise_clip_shapes():
    with pytest.raises(ValueError, match="max_norm"):
        gradax.unitwise_clip(jnp.ones(3), jnp.ones(2), jnp.ones(3))


def test_adaptive_grad_clip_axis():
    params = {"a": make_tree(seed=3)["matrix"], "b": make_tree(seed=4)["cube"]}
    ours, theirs = (
        gradax.adaptive_grad_clip(0.2, axis=-1),
        optax.adaptive_grad_clip(0.2, axis=-1),
    )
    for k in range(5):
        g = {"a": grads_at(k)["matrix"], "b": grads_at(k)["cube"]}
        assert_close(
            ours.update(g, ours.init(params), params)[0],
            theirs.update(g, theirs.init(params), params)[0],
        )


def batched_tree(dtype: Any = jnp.float32, batch: int = 6) -> dict:
    rng = np.random.default_rng(5)

    def arr(shape):
        scales = rng.choice([0.01, 0.5, 3.0], size=(batch,) + (1,) * len(shape))
        x = rng.normal(size=(batch, *shape)) * scales
        if jnp.issubdtype(dtype, jnp.complexfloating):
            x = x + 1j * rng.normal(size=(batch, *shape)) * scales
        return jnp.asarray(x, dtype)

    tree = {"scalar": arr(()), "vector": arr((3,)), "matrix": arr((4, 3))}
    tree["cube"] = arr((2, 3, 4))
    tree["cube"] = tree["cube"].at[0].set(0.0)  # a zero-norm example
    return tree


@pytest.mark.parametrize("clip", [0.0, 0.3, 1.0, 1e3, math.inf])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.complex64])
def test_per_example_global_norm_clip(clip, dtype):
    grads = batched_tree(dtype)
    ours = gradax.per_example_global_norm_clip(grads, clip)
    theirs = optax.per_example_global_norm_clip(grads, clip)
    # A per-example weighted sum over the batch; XLA may reorder it: 1e-6.
    assert_close(ours, theirs, rtol=1e-6, atol=1e-6)
    jitted = jax.jit(gradax.per_example_global_norm_clip)(grads, clip)
    assert_close(jitted, theirs, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("uniform", [True, False])
@pytest.mark.parametrize("clip", [0.0, 0.3, 1.0, math.inf])
def test_per_example_layer_norm_clip(uniform, clip):
    grads = batched_tree()
    ours = gradax.per_example_layer_norm_clip(grads, clip, uniform)
    theirs = optax.per_example_layer_norm_clip(grads, clip, uniform)
    assert jax.tree.structure(ours) == jax.tree.structure(theirs)
    assert_close(ours, theirs, rtol=1e-6, atol=1e-6)


def test_per_example_integer_grads_as_optax_docs():
    grads = [jnp.array([[0, 0, 0], [0, 3, 4], [4, 0, 3], [3, 4, 0]])]
    for clip in (jnp.inf, 0.0, 1.25):
        assert_close(
            gradax.per_example_global_norm_clip(grads, clip),
            optax.per_example_global_norm_clip(grads, clip),
        )
        assert_close(
            gradax.per_example_layer_norm_clip(grads, clip),
            optax.per_example_layer_norm_clip(grads, clip),
        )


def test_per_example_needs_batch_axis():
    for fn in (gradax.per_example_global_norm_clip, gradax.per_example_layer_norm_clip):
        with pytest.raises(ValueError, match="batch"):
            fn({"a": jnp.ones((3, 2)), "b": jnp.ones((4, 2))}, 1.0)
        with pytest.raises(ValueError, match="batch"):
            fn({"a": jnp.ones((3, 2)), "b": jnp.ones(())}, 1.0)
