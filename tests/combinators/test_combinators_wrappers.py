"""MultiSteps, apply_if_finite, conditionally_*, lookahead, flatten, freeze,
selective_transform and apply_every: optax's numbers, stable state, clear errors.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradax

STEPS = 24


def make_params(dtype=jnp.float32) -> dict[str, Any]:
    """A small pytree with mixed shapes (a scalar, a vector, a matrix, nesting)."""
    key = jax.random.key(0)
    k1, k2, k3 = jax.random.split(key, 3)
    return {
        "w": jax.random.normal(k1, (3, 2), dtype),
        "b": jax.random.normal(k2, (2,), dtype),
        "inner": {"s": jax.random.normal(k3, (), dtype)},
    }


def grads_at(step: int, params: Any, bad: dict[int, float] | None = None) -> Any:
    """Deterministic gradients for a step; ``bad[step]`` poisons one leaf."""
    key = jax.random.fold_in(jax.random.key(1), step)
    leaves, treedef = jax.tree.flatten(params)
    keys = jax.random.split(key, len(leaves))
    grads = [
        jax.random.normal(k, x.shape, x.dtype) + 0.1 * x
        for k, x in zip(keys, leaves, strict=True)
    ]
    if bad and step in bad:
        grads[0] = grads[0].at[(0,) * grads[0].ndim].set(bad[step])
    return jax.tree.unflatten(treedef, grads)


def assert_trees_close(a: Any, b: Any, rtol: float = 2e-6, atol: float = 1e-6):
    leaves_a, def_a = jax.tree.flatten(a)
    leaves_b, def_b = jax.tree.flatten(b)
    assert len(leaves_a) == len(leaves_b), (def_a, def_b)
    for x, y in zip(leaves_a, leaves_b, strict=True):
        np.testing.assert_allclose(
            np.asarray(x, np.float64),
            np.asarray(y, np.float64),
            rtol=rtol,
            atol=atol,
            equal_nan=True,
        )


def like_optax(state: Any) -> Any:
    """A gradax state without the step counts optax does not keep.

    gradax keeps a step count (a ScheduleState around the inner state) for
    every transformation with a schedulable hyperparameter, such as the
    learning-rate stage of adam, even when it is given a number.
    """

    def strip(node):
        if isinstance(node, gradax.ScheduleState):
            return like_optax(node.inner_state)
        return node

    return jax.tree.map(
        strip, state, is_leaf=lambda x: isinstance(x, gradax.ScheduleState)
    )


def run_both(gtx, otx, steps=STEPS, bad=None, extra=None, compare_state=None):
    """Run gradax and optax side by side under jit, comparing every step."""
    params_g = params_o = make_params()
    state_g, state_o = gtx.init(params_g), otx.init(params_o)
    extra = extra or {}
    update_g = jax.jit(lambda g, s, p: gtx.update(g, s, p, **extra))
    update_o = jax.jit(lambda g, s, p: otx.update(g, s, p, **extra))
    for step in range(steps):
        grads = grads_at(step, params_g, bad)
        upd_g, state_g = update_g(grads, state_g, params_g)
        upd_o, state_o = update_o(grads, state_o, params_o)
        assert_trees_close(upd_g, upd_o)
        if compare_state is not None:
            assert_trees_close(
                like_optax(compare_state(state_g)), compare_state(state_o)
            )
        params_g = gradax.apply_updates(params_g, upd_g)
        params_o = optax.apply_updates(params_o, upd_o)
    assert_trees_close(params_g, params_o)
    return params_g, state_g


def same_signature(gradax_obj, optax_obj):
    g = inspect.signature(gradax_obj).parameters
    o = inspect.signature(optax_obj).parameters
    assert list(g) == list(o)
    for name in o:
        assert g[name].kind == o[name].kind, name
        if o[name].default is not inspect.Parameter.empty:
            assert g[name].default == o[name].default, name


@pytest.mark.parametrize(
    "name",
    [
        "MultiSteps",
        "apply_if_finite",
        "conditionally_mask",
        "conditionally_transform",
        "lookahead",
        "flatten",
        "freeze",
        "selective_transform",
        "apply_every",
        "skip_not_finite",
        "skip_large_updates",
    ],
)
def test_signature_matches_optax(name):
    same_signature(getattr(gradax, name), getattr(optax, name))


@pytest.mark.parametrize(
    "name",
    [
        "MultiStepsState",
        "ApplyIfFiniteState",
        "ConditionallyMaskState",
        "ConditionallyTransformState",
        "LookaheadState",
        "LookaheadParams",
        "ApplyEvery",
    ],
)
def test_state_fields_match_optax(name):
    assert getattr(gradax, name)._fields == getattr(optax, name)._fields


# ---------------------------------------------------------------------------
# MultiSteps.


@pytest.mark.parametrize("use_grad_mean", [True, False])
@pytest.mark.parametrize("inner", ["gradax", "optax"])
def test_multi_steps_k3_matches_optax(use_grad_mean, inner):
    opt = gradax.adam(0.05) if inner == "gradax" else optax.adam(0.05)
    gtx = gradax.MultiSteps(opt, 3, use_grad_mean=use_grad_mean)
    otx = optax.MultiSteps(optax.adam(0.05), 3, use_grad_mean=use_grad_mean)
    _, state = run_both(
        gtx,
        otx,
        compare_state=lambda s: (s.mini_step, s.gradient_step, s.acc_grads),
    )
    assert int(state.gradient_step) == STEPS // 3


def test_multi_steps_emits_every_k_and_zeros_between():
    tx = gradax.MultiSteps(gradax.sgd(1.0), every_k_schedule=3)
    params = make_params()
    state = tx.init(params)
    update = jax.jit(tx.update)
    emitted = []
    for step in range(9):
        updates, state = update(grads_at(step, params), state, params)
        nonzero = any(bool(jnp.any(u != 0)) for u in jax.tree.leaves(updates))
        assert nonzero == bool(tx.has_updated(state))
        emitted.append(nonzero)
    assert emitted == [False, False, True] * 3
    # Emitted updates are minus the mean of the last three gradients.
    mean = jax.tree.map(
        lambda *g: -sum(g) / 3, *[grads_at(s, params) for s in range(6, 9)]
    )
    assert_trees_close(updates, mean)


def test_multi_steps_schedule_of_k_matches_optax():
    def every_k(step):
        return jnp.where(step < 2, 2, 4)

    gtx = gradax.MultiSteps(gradax.adam(0.05), every_k)
    otx = optax.MultiSteps(optax.adam(0.05), every_k)
    assert isinstance(gtx.every_k_schedule, gradax.FunctionSchedule)
    _, state = run_both(gtx, otx, compare_state=lambda s: (s.mini_step,))
    # 2 updates of k=2 (4 mini-steps), then (24 - 4) / 4 = 5 of k=4.
    assert int(state.gradient_step) == 7
    # The schedule is evaluated at MultiSteps' own counter, not wrapped around
    # the state as a hyperparameter schedule.
    assert isinstance(state, gradax.MultiStepsState)


def test_multi_steps_gradax_schedule_object():
    sched = gradax.piecewise_constant_schedule(2, {3: 2.0})  # k = 2, then 4
    gtx = gradax.MultiSteps(gradax.sgd(0.1), sched)
    otx = optax.MultiSteps(optax.sgd(0.1), lambda s: sched(s).astype(jnp.int32))
    run_both(gtx, otx)


@pytest.mark.parametrize("skip_fn", ["not_finite", "large"])
def test_multi_steps_skip_matches_optax(skip_fn):
    if skip_fn == "not_finite":
        g_fn, o_fn = gradax.skip_not_finite, optax.skip_not_finite
        bad = {2: jnp.nan, 5: jnp.inf, 6: -jnp.inf, 11: jnp.nan}
    else:
        g_fn = functools.partial(gradax.skip_large_updates, max_squared_norm=30.0)
        o_fn = functools.partial(optax.skip_large_updates, max_squared_norm=30.0)
        bad = {2: 50.0, 7: 1e3, 8: jnp.nan}
    gtx = gradax.MultiSteps(gradax.adam(0.05), 3, should_skip_update_fn=g_fn)
    otx = optax.MultiSteps(optax.adam(0.05), 3, should_skip_update_fn=o_fn)
    params, state = run_both(
        gtx,
        otx,
        bad=bad,
        compare_state=lambda s: (
            s.mini_step,
            s.gradient_step,
            s.acc_grads,
            s.skip_state,
        ),
    )
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(params))
    assert int(state.gradient_step) < STEPS // 3  # some mini-steps were skipped


def test_skip_functions_match_optax():
    params = make_params()
    for bad in [None, {0: jnp.nan}, {0: jnp.inf}, {0: 100.0}]:
        grads = grads_at(0, params, bad)
        for g_fn, o_fn in [
            (gradax.skip_not_finite, optax.skip_not_finite),
            (
                functools.partial(gradax.skip_large_updates, max_squared_norm=20.0),
                functools.partial(optax.skip_large_updates, max_squared_norm=20.0),
            ),
        ]:
            skip_g, info_g = g_fn(grads, 0, params)
            skip_o, info_o = o_fn(grads, 0, params)
            assert bool(skip_g) == bool(skip_o)
            assert jax.tree.structure(info_g) == jax.tree.structure(info_o)
            assert_trees_close(info_g, info_o)
            assert jax.tree.map(lambda x: x.dtype, info_g) == jax.tree.map(
                lambda x: x.dtype, info_o
            )


def test_multi_steps_extra_args_reach_inner():
    seen = []

    class probe(gradax.GradientTransformation):
        def init_state(self, params):
            return gradax.EmptyState()

        def update_state(self, updates, state, params=None, **extra_args):
            seen.append(sorted(extra_args))
            return updates, state

    tx = gradax.MultiSteps(probe(), 1)
    params = make_params()
    tx.update(params, tx.init(params), params, value=jnp.ones([]))
    assert ["value"] in seen


def test_multi_steps_bad_skip_fn_output():
    tx = gradax.MultiSteps(
        gradax.sgd(0.1), 2, should_skip_update_fn=lambda u, s, p: (jnp.zeros(2), ())
    )
    params = make_params()
    with pytest.raises(ValueError, match="boolean scalar"):
        tx.update(params, tx.init(params))


def test_multi_steps_protocol_methods():
    tx = gradax.MultiSteps(optax.sgd(0.1), 2)
    assert tx.gradient_transformation() is tx
    assert isinstance(tx.inner_opt, gradax.GradientTransformation)
    # It works inside optax.chain too.
    chained = optax.chain(optax.clip(1.0), tx)
    params = make_params()
    chained.update(params, chained.init(params), params)


def test_multi_steps_k_is_a_leaf_no_recompile():
    params = make_params()
    traces = []

    @jax.jit
    def step(tx, state, grads):
        traces.append(1)
        return tx.update(grads, state, params)

    for k in (2, 3):
        tx = gradax.MultiSteps(gradax.sgd(1.0), k)
        state = tx.init(params)
        for _ in range(k):
            assert not bool(tx.has_updated(state))
            _, state = step(tx, state, params)
        assert bool(tx.has_updated(state))
    assert len(traces) == 1


# ---------------------------------------------------------------------------
# apply_if_finite.


@pytest.mark.parametrize("max_errors", [0, 2])
@pytest.mark.parametrize("inner", ["gradax", "optax"])
def test_apply_if_finite_matches_optax(max_errors, inner):
    opt = gradax.adam(0.05) if inner == "gradax" else optax.adam(0.05)
    gtx = gradax.apply_if_finite(opt, max_errors)
    otx = optax.apply_if_finite(optax.adam(0.05), max_errors)
    # One NaN, one inf, then a run of 3 that exceeds max_errors=2 only at the
    # last of the run (the inner state then becomes NaN in both libraries).
    bad = {3: jnp.nan, 7: jnp.inf, 15: jnp.nan, 16: -jnp.inf, 17: jnp.nan}
    run_both(
        gtx,
        otx,
        bad=bad,
        compare_state=lambda s: (
            s.notfinite_count,
            s.last_finite,
            s.total_notfinite,
            s.inner_state,
        ),
    )


def test_apply_if_finite_skips_exactly():
    tx = gradax.apply_if_finite(gradax.adam(0.1), max_consecutive_errors=3)
    params = make_params()
    state = tx.init(params)
    updates, new_state = tx.update(grads_at(0, params, {0: jnp.nan}), state, params)
    assert all(bool(jnp.all(u == 0)) for u in jax.tree.leaves(updates))
    assert jax.tree.all(
        jax.tree.map(np.array_equal, new_state.inner_state, state.inner_state)
    )
    assert int(new_state.notfinite_count) == 1
    assert int(new_state.total_notfinite) == 1
    assert not bool(new_state.last_finite)


# ---------------------------------------------------------------------------
# conditionally_mask / conditionally_transform.


def every_third(step):
    return step % 3 == 0


@pytest.mark.parametrize("name", ["conditionally_mask", "conditionally_transform"])
@pytest.mark.parametrize("inner", ["gradax", "optax"])
def test_conditionally_matches_optax(name, inner):
    opt = gradax.adam(0.05) if inner == "gradax" else optax.adam(0.05)
    gtx = getattr(gradax, name)(opt, every_third)
    otx = getattr(optax, name)(optax.adam(0.05), every_third)
    run_both(gtx, otx, compare_state=lambda s: (s.step, s.inner_state))


@pytest.mark.parametrize("name", ["conditionally_mask", "conditionally_transform"])
def test_conditionally_forward_extra_args(name):
    def fn(step, *, flag):
        return jnp.logical_and(flag, step >= 0)

    gtx = getattr(gradax, name)(gradax.sgd(0.1), fn, forward_extra_args=True)
    otx = getattr(optax, name)(optax.sgd(0.1), fn, forward_extra_args=True)
    for flag in (True, False):
        run_both(gtx, otx, steps=4, extra={"flag": jnp.array(flag)})


# ---------------------------------------------------------------------------
# lookahead.


@pytest.mark.parametrize("reset_state", [False, True])
@pytest.mark.parametrize("inner", ["gradax", "optax"])
def test_lookahead_matches_optax(reset_state, inner):
    opt = gradax.adam(0.05) if inner == "gradax" else optax.adam(0.05)
    gtx = gradax.lookahead(opt, 4, 0.6, reset_state)
    otx = optax.lookahead(optax.adam(0.05), 4, 0.6, reset_state)
    pg = po = gradax.LookaheadParams.init_synced(make_params())
    po = optax.LookaheadParams.init_synced(make_params())
    sg, so = gtx.init(pg), otx.init(po)
    step_g = jax.jit(gtx.update)
    step_o = jax.jit(otx.update)
    for step in range(STEPS):
        grads = grads_at(step, pg.fast)
        ug, sg = step_g(grads, sg, pg)
        uo, so = step_o(grads, so, po)
        assert isinstance(ug, gradax.LookaheadParams)
        assert_trees_close(ug.fast, uo.fast)
        assert_trees_close(ug.slow, uo.slow)
        assert_trees_close(like_optax(sg.fast_state), so.fast_state)
        assert int(sg.steps_since_sync) == int(so.steps_since_sync)
        pg = gradax.apply_updates(pg, ug)
        po = optax.apply_updates(po, uo)
        assert_trees_close(pg.fast, po.fast)
        assert_trees_close(pg.slow, po.slow)
        if step % 4 == 3:  # synced: fast and slow are the same point
            assert_trees_close(pg.fast, pg.slow)
        else:
            assert not np.allclose(pg.fast["w"], pg.slow["w"])


def test_lookahead_init_synced():
    p = make_params()
    lp = gradax.LookaheadParams.init_synced(p)
    assert lp.fast is p and lp.slow is p


def test_lookahead_requires_lookahead_params():
    tx = gradax.lookahead(gradax.sgd(0.1), 2, 0.5)
    params = make_params()
    state = tx.init(gradax.LookaheadParams.init_synced(params))
    with pytest.raises(ValueError, match="LookaheadParams"):
        tx.update(params, state, params)
    with pytest.raises(ValueError, match="LookaheadParams"):
        tx.update(params, state)
    bad_grads = {"w": params["w"], "b": params["b"]}
    with pytest.raises(ValueError, match="inner"):
        tx.update(bad_grads, state, gradax.LookaheadParams.init_synced(params))


# ---------------------------------------------------------------------------
# flatten, freeze, selective_transform, apply_every.


@pytest.mark.parametrize("inner", ["gradax", "optax"])
def test_flatten_matches_optax(inner):
    opt = gradax.adam(0.05) if inner == "gradax" else optax.adam(0.05)
    gtx = gradax.flatten(opt)
    otx = optax.flatten(optax.adam(0.05))
    _, state = run_both(gtx, otx)
    assert gradax.tree.get(state, "mu").shape == (9,)


def test_flatten_errors_name_the_problem():
    tx = gradax.flatten(gradax.adam(0.1))
    params = make_params()
    state = tx.init(params)
    wrong = {"w": params["w"], "b": params["b"]}
    with pytest.raises(ValueError, match=r"\['inner'\]"):
        tx.update(wrong, state, params)
    with pytest.raises(ValueError, match="flatten"):
        tx.update(wrong, state)


@pytest.mark.parametrize(
    "mask",
    [
        {"w": True, "b": False, "inner": {"s": True}},
        {"w": False, "b": True, "inner": False},
    ],
)
def test_freeze_matches_optax_and_leaves_frozen_untouched(mask):
    gtx = gradax.chain(gradax.freeze(mask), gradax.adam(0.1))
    otx = optax.chain(optax.freeze(mask), optax.adam(0.1))
    params, _ = run_both(gtx, otx)
    start = make_params()
    flat_mask = jax.tree.leaves(
        jax.tree.map(lambda m, p: jax.tree.map(lambda _: m, p), mask, start)
    )
    for frozen, new, old in zip(
        flat_mask, jax.tree.leaves(params), jax.tree.leaves(start), strict=True
    ):
        assert np.array_equal(new, old) == frozen


@pytest.mark.parametrize("mask", [True, False, jnp.array(True)])
def test_freeze_scalar_mask(mask):
    gtx, otx = gradax.freeze(mask), optax.freeze(mask)
    run_both(gtx, otx, steps=2)


@pytest.mark.parametrize(
    "mask", [{"w": True, "b": False, "inner": {"s": False}}, False, True]
)
def test_selective_transform_matches_optax(mask):
    gtx = gradax.selective_transform(gradax.adam(0.1), freeze_mask=mask)
    otx = optax.selective_transform(optax.adam(0.1), freeze_mask=mask)
    params, state = run_both(gtx, otx)
    start = make_params()
    if mask is True:
        assert jax.tree.all(jax.tree.map(np.array_equal, params, start))
    if isinstance(mask, dict):
        assert np.array_equal(params["w"], start["w"])
        assert not np.array_equal(params["b"], start["b"])
        assert isinstance(gradax.tree.get(state, "mu")["w"], gradax.MaskedNode)


@pytest.mark.parametrize("k", [1, 3])
def test_apply_every_matches_optax(k):
    gtx = gradax.chain(gradax.apply_every(k), gradax.sgd(0.1))
    otx = optax.chain(optax.apply_every(k), optax.sgd(0.1))
    run_both(gtx, otx, compare_state=lambda s: s[0])


def test_apply_every_default_k_is_one():
    assert gradax.apply_every().k == 1


# ---------------------------------------------------------------------------
# A masked group of a partition, with its hyperparameters injected.

_GROUP_LABELS = {"w": "train", "b": "frozen", "inner": {"s": "train"}}
# Inside the "train" group only w runs the optimizer; inner.s passes through.
_GROUP_MASK = {"w": True, "b": False, "inner": {"s": False}}


def _masked_group_builds(lib):
    def group(adam):
        return lib.partition(
            {"train": lib.masked(adam, _GROUP_MASK), "frozen": lib.set_to_zero()},
            _GROUP_LABELS,
        )

    def injected_partition(learning_rate):
        transforms = {
            "train": lib.masked(lib.adam(learning_rate), _GROUP_MASK),
            "frozen": lib.set_to_zero(),
        }
        return lib.inject_hyperparams(lib.partition)(transforms, _GROUP_LABELS)

    def injected_masked(learning_rate):
        inner = lib.inject_hyperparams(lib.masked)(lib.adam(learning_rate), _GROUP_MASK)
        return lib.partition(
            {"train": inner, "frozen": lib.set_to_zero()}, _GROUP_LABELS
        )

    return {
        "partition(masked(inject(adam)))": lambda lr: group(
            lib.inject_hyperparams(lib.adam)(learning_rate=lr)
        ),
        "partition(masked(inject(adam))) scheduled": lambda lr: group(
            lib.inject_hyperparams(lib.adam)(learning_rate=lambda count: lr)
        ),
        "inject(partition(masked(adam)))": injected_partition,
        "partition(inject(masked)(adam))": injected_masked,
    }


@pytest.mark.parametrize("name", list(_masked_group_builds(gradax)))
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_masked_group_inside_inject_hyperparams_gets_its_updates(name, jit):
    # A masked group with injected hyperparameters must not get silent zeros:
    # the leaves its mask selects get Adam's updates (as optax's), the others
    # exactly what masked and partition say: the gradient passed through, or
    # zeros for the frozen group.
    tx = _masked_group_builds(gradax)[name](0.1)
    reference = _masked_group_builds(optax)[name](0.1)
    params = make_params()
    update = jax.jit(tx.update) if jit else tx.update
    state, ref_state = tx.init(params), reference.init(params)
    for step in range(4):
        grads = grads_at(step, params)
        updates, state = update(grads, state, params)
        expected, ref_state = reference.update(grads, ref_state, params)
        assert bool(jnp.all(updates["w"] != 0))
        np.testing.assert_allclose(updates["w"], expected["w"], rtol=1e-6)
        np.testing.assert_array_equal(updates["inner"]["s"], grads["inner"]["s"])
        np.testing.assert_array_equal(updates["b"], jnp.zeros_like(params["b"]))
        params = gradax.apply_updates(params, updates)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_injected_half_precision_group_gets_its_updates(jit):
    # The bfloat16 group's injected hyperparameters are stored in float32: in
    # bfloat16 (optax's choice, the group's own dtype) b2 = 0.999 rounds to 1
    # and the group's updates become zeros or NaN (optax gives NaN here).
    params = {"w": jnp.ones(3, jnp.bfloat16), "b": jnp.ones(2, jnp.float32)}
    labels = {"w": "half", "b": "full"}
    tx = gradax.partition(
        {
            "half": gradax.inject_hyperparams(gradax.adam)(learning_rate=0.1),
            "full": gradax.inject_hyperparams(gradax.adam)(learning_rate=0.1),
        },
        labels,
    )
    plain = gradax.partition(
        {"half": gradax.adam(0.1), "full": gradax.adam(0.1)}, labels
    )
    init, update = (jax.jit(tx.init), jax.jit(tx.update)) if jit else tx
    state, plain_state = init(params), plain.init(params)
    for step in range(3):
        grads = jax.tree.map(lambda p, s=step: (0.5 + s) * p, params)
        updates, state = update(grads, state, params)
        expected, plain_state = plain.update(grads, plain_state, params)
        assert updates["w"].dtype == jnp.bfloat16
        assert bool(jnp.all(jnp.isfinite(updates["w"]) & (updates["w"] != 0)))
        np.testing.assert_allclose(
            np.asarray(updates["w"], np.float32),
            np.asarray(expected["w"], np.float32),
            rtol=2e-2,
        )
        np.testing.assert_allclose(updates["b"], expected["b"], rtol=1e-5)
    for _, value in gradax.tree.get_all_with_path(state, "b2"):
        assert value.dtype == jnp.float32


def test_injected_learning_rate_of_a_masked_group_can_be_changed():
    tx = _masked_group_builds(gradax)["partition(masked(inject(adam)))"](0.1)
    params = make_params()
    state = tx.init(params)
    assert float(gradax.tree.get(state, "learning_rate")) == pytest.approx(0.1)
    state = gradax.tree.set(state, learning_rate=jnp.asarray(0.0))
    grads = grads_at(0, params)
    updates, _ = tx.update(grads, state, params)
    np.testing.assert_array_equal(updates["w"], jnp.zeros_like(params["w"]))
    np.testing.assert_array_equal(updates["inner"]["s"], grads["inner"]["s"])


# ---------------------------------------------------------------------------
# tree.map_params through masked and partition.

_MAP_PARAMS = {"a": jnp.ones(2), "b": [jnp.ones(1), jnp.ones(3)]}
_MAP_MASK = {"a": True, "b": [False, True]}


def _masked_momentum(lib):
    return lib.masked(lib.sgd(1.0, momentum=0.9), _MAP_MASK)


def _partition_momentum(lib):
    return lib.partition(
        {"x": lib.sgd(1.0, momentum=0.9), "y": lib.adam(1.0)},
        {"a": "x", "b": ["y", "x"]},
    )


@pytest.mark.parametrize("build", [_masked_momentum, _partition_momentum])
def test_map_params_through_masked_matches_optax(build):
    # map_params calls init on a stand-in for the params, which no mask fits;
    # masked passes it through, as optax does.
    def shapes(lib):
        tx = build(lib)
        state = tx.init(_MAP_PARAMS)
        return lib.tree.map_params(tx, lambda p: f"shape {p.shape}", state)

    ours, theirs = shapes(gradax), shapes(optax)
    for key in ["trace", "mu", "nu"]:
        found = gradax.tree.get_all_with_path(ours, key)
        expected = optax.tree.get_all_with_path(theirs, key)
        assert len(found) == len(expected)
        for (_, value), (_, want) in zip(found, expected, strict=True):
            # Equal leaves; the masked-out ones are empty nodes (each library's
            # own MaskedNode, so the structures are not compared).
            assert jax.tree.leaves(value) == jax.tree.leaves(want)
            assert jax.tree.leaves(value)


def test_map_params_through_masked_with_extra_tree():
    # optax's recipe for sharding specs: skip the masked leaves with is_leaf.
    specs = {"a": 1, "b": [2, 3]}

    def mapped(lib):
        tx = _masked_momentum(lib)
        return lib.tree.map_params(
            tx,
            lambda p, spec: None if isinstance(p, lib.MaskedNode) else spec,
            tx.init(_MAP_PARAMS),
            specs,
            is_leaf=lambda v: isinstance(v, lib.MaskedNode),
            transform_non_params=lambda _: None,
        )

    ours, theirs = mapped(gradax), mapped(optax)
    assert gradax.tree.get(ours, "trace") == {"a": 1, "b": [None, 3]}
    assert gradax.tree.get(ours, "trace") == optax.tree.get(theirs, "trace")


def test_map_params_through_masked_gives_init_of_mapped_params():
    tx = _masked_momentum(gradax)
    state = tx.init(_MAP_PARAMS)
    grow = jax.tree.map(lambda p: jnp.zeros(p.shape + (1,)), _MAP_PARAMS)
    mapped = gradax.tree.map_params(tx, lambda p: jnp.zeros(p.shape + (1,)), state)
    want = tx.init(grow)
    assert jax.tree.structure(mapped) == jax.tree.structure(want)
    for a, b in zip(jax.tree.leaves(mapped), jax.tree.leaves(want), strict=True):
        assert a.shape == b.shape


# ---------------------------------------------------------------------------
# A stateful schedule inside inject_hyperparams.


class _TotalState(NamedTuple):
    total: jax.Array


def _summing_schedule(lib):
    """optax's test schedule: its value is the sum of an extra argument."""

    base = (
        gradax.StatefulSchedule if lib is gradax else optax.schedules.StatefulSchedule
    )

    class Summing(base):
        def init(self):
            return _TotalState(total=jnp.zeros([], dtype=jnp.int32))

        def update(self, state, **extra_args):
            return _TotalState(total=state.total + extra_args["addendum"])

        def __call__(self, state, **extra_args):
            return state.total

    return Summing()


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_stateful_schedule_state_is_promoted_as_in_optax(jit):
    # optax's total turns float32 when a float is added; gradax's state keeps
    # init's dtypes, so it starts as float32 (an int32 total would cast 0.3
    # back to 0 and the step size would stay 0).
    grads = (jnp.ones(3), jnp.ones(2))
    extra = {"addendum": 0.3 * jnp.ones((), jnp.float32)}

    def run(lib):
        tx = lib.inject_hyperparams(lib.scale)(step_size=_summing_schedule(lib))
        init, update = (jax.jit(tx.init), jax.jit(tx.update)) if jit else tx
        state = init(grads)
        outs = []
        for _ in range(3):
            updates, state = update(grads, state, params=grads, **extra)
            outs.append(updates)
        return outs, state

    (ours, state), (theirs, their_state) = run(gradax), run(optax)
    for u, v in zip(ours, theirs, strict=True):
        for a, b in zip(jax.tree.leaves(u), jax.tree.leaves(v), strict=True):
            np.testing.assert_array_equal(a, b)
    for name in ["hyperparams", "hyperparams_states"]:
        a, b = (
            getattr(state, name)["step_size"],
            getattr(their_state, name)["step_size"],
        )
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
            assert x.dtype == y.dtype == jnp.float32
            np.testing.assert_array_equal(x, y)
    # The value used by the third update is the total after two.
    two = np.float32(0.3) + np.float32(0.3)
    np.testing.assert_array_equal(state.hyperparams["step_size"], two)


def test_wrapped_schedule_keeps_its_int_count():
    tx = gradax.inject_hyperparams(gradax.scale)(
        step_size=gradax.WrappedSchedule(gradax.linear_schedule(1.0, 0.0, 10))
    )
    state = tx.init(jnp.ones(2))
    _, state = tx.update(jnp.ones(2), state)
    count = state.hyperparams_states["step_size"].count
    assert count.dtype == jnp.int32 and int(count) == 1


# ---------------------------------------------------------------------------
# Leaf shapes are checked by the part that receives the updates.


def test_wrappers_pass_per_example_gradients_to_the_part_that_takes_them():
    params = {"w": jnp.ones((3, 2)), "b": jnp.ones(2)}
    per_example = jax.tree.map(lambda x: jnp.ones((4, *x.shape)), params)

    def dpsgd():
        return gradax.contrib.dpsgd(0.1, 1.0, 0.5, seed=0)

    for tx in [
        gradax.masked(dpsgd(), {"w": True, "b": True}),
        gradax.partition({"x": dpsgd()}, {"w": "x", "b": "x"}),
        gradax.inject_hyperparams(gradax.contrib.dpsgd)(0.1, 1.0, 0.5, seed=0),
    ]:
        updates, _ = tx.update(per_example, tx.init(params), params)
        assert jax.tree.map(jnp.shape, updates) == jax.tree.map(jnp.shape, params)
    # An inner transformation that needs params-shaped updates still says so.
    tx = gradax.masked(gradax.adam(0.1), {"w": True, "b": False})
    with pytest.raises(ValueError, match=r"\['w'\]"):
        tx.update({"w": jnp.ones(5), "b": jnp.ones(2)}, tx.init(params), params)


# ---------------------------------------------------------------------------
# Validation at construction.


@pytest.mark.parametrize(
    "build, name",
    [
        (lambda: gradax.MultiSteps(gradax.sgd(0.1), 2.5), "every_k_schedule"),
        (lambda: gradax.MultiSteps(gradax.sgd(0.1), True), "every_k_schedule"),
        (lambda: gradax.lookahead(gradax.sgd(0.1), 0, 0.5), "sync_period"),
        (lambda: gradax.lookahead(gradax.sgd(0.1), 2, 1.5), "slow_step_size"),
        (lambda: gradax.lookahead(gradax.sgd(0.1), 2, -0.1), "slow_step_size"),
        (lambda: gradax.freeze({"w": "yes"}), "mask"),
    ],
)
def test_bad_arguments_raise(build, name):
    with pytest.raises(ValueError, match=name):
        build()


def test_not_a_transformation_raises():
    with pytest.raises(TypeError, match="inner"):
        gradax.apply_if_finite(3, 1)
    with pytest.raises(TypeError, match="opt"):
        gradax.MultiSteps("adam", 2)


# ---------------------------------------------------------------------------
# State stability: bf16 params, lax.cond, lax.scan.

WRAPPERS = {
    "MultiSteps": lambda: gradax.MultiSteps(gradax.adam(0.1), 2),
    "MultiSteps_schedule": lambda: gradax.MultiSteps(
        gradax.adam(0.1), lambda s: jnp.where(s < 1, 1, 2)
    ),
    "MultiSteps_skip": lambda: gradax.MultiSteps(
        gradax.adam(0.1), 2, should_skip_update_fn=gradax.skip_not_finite
    ),
    "MultiSteps_large": lambda: gradax.MultiSteps(
        optax.adam(0.1),
        2,
        should_skip_update_fn=functools.partial(
            gradax.skip_large_updates, max_squared_norm=10.0
        ),
        accumulator_dtype=None,
    ),
    "apply_if_finite": lambda: gradax.apply_if_finite(gradax.adam(0.1), 2),
    "apply_if_finite_optax": lambda: gradax.apply_if_finite(optax.adam(0.1), 2),
    "conditionally_mask": lambda: gradax.conditionally_mask(
        gradax.adam(0.1), every_third
    ),
    "conditionally_transform": lambda: gradax.conditionally_transform(
        optax.adam(0.1), every_third
    ),
    "flatten": lambda: gradax.flatten(gradax.adam(0.1)),
    "freeze": lambda: gradax.freeze({"w": True, "b": False, "inner": True}),
    "selective_transform": lambda: gradax.selective_transform(
        gradax.adam(0.1), freeze_mask={"w": True, "b": False, "inner": False}
    ),
    "apply_every": lambda: gradax.apply_every(3),
}


def avals(tree):
    return jax.tree.map(
        lambda x: (jnp.asarray(x).dtype, jnp.asarray(x).weak_type), tree
    )


def shapes(tree):
    return jax.tree.map(lambda x: (jnp.shape(x), jnp.asarray(x).dtype), tree)


@pytest.mark.parametrize("name", sorted(WRAPPERS))
@pytest.mark.parametrize("grad_dtype", [jnp.bfloat16, jnp.float32])
def test_state_dtypes_stable_bf16(name, grad_dtype):
    tx = WRAPPERS[name]()
    params = make_params(jnp.bfloat16)
    state = tx.init(params)
    update = jax.jit(tx.update)
    for step in range(4):
        grads = jax.tree.map(lambda g: g.astype(grad_dtype), grads_at(step, params))
        updates, new_state = update(grads, state, params)
        assert avals(new_state) == avals(state)
        assert avals(updates) == avals(grads)
        state = new_state


@pytest.mark.parametrize("name", sorted(WRAPPERS))
def test_update_inside_cond_and_scan(name):
    tx = WRAPPERS[name]()
    params = make_params(jnp.bfloat16)
    state = tx.init(params)
    grads = grads_at(0, params, {0: jnp.nan})

    @jax.jit
    def in_cond(pred, state):
        return jax.lax.cond(
            pred,
            lambda s: tx.update(grads, s, params),
            lambda s: (grads, s),
            state,
        )

    for pred in (True, False):
        updates, new_state = in_cond(pred, state)
        assert avals(new_state) == avals(state)

    def body(carry, step):
        p, s = carry
        g = grads_at(0, p)
        g = jax.tree.map(lambda x: x * (1 + step).astype(x.dtype), g)
        u, s = tx.update(g, s, p)
        return (gradax.apply_updates(p, u), s), None

    (p_end, s_end), _ = jax.jit(
        lambda c: jax.lax.scan(body, c, jnp.arange(5, dtype=jnp.bfloat16))
    )((params, state))
    assert avals(s_end) == avals(state)
    assert shapes(p_end) == shapes(params)


def test_lookahead_state_stable_bf16_cond_scan():
    tx = gradax.lookahead(gradax.adam(0.1), 3, 0.5, reset_state=True)
    params = gradax.LookaheadParams.init_synced(make_params(jnp.bfloat16))
    state = tx.init(params)

    def body(carry, _):
        p, s = carry
        g = grads_at(0, p.fast)
        u, s = tx.update(g, s, p)
        return (gradax.apply_updates(p, u), s), None

    (p_end, s_end), _ = jax.jit(lambda c: jax.lax.scan(body, c, None, length=7))(
        (params, state)
    )
    assert avals(s_end) == avals(state)
    assert avals(p_end) == avals(params)

    updates, new_state = jax.jit(
        lambda pred: jax.lax.cond(
            pred,
            lambda: tx.update(grads_at(0, params.fast), state, params),
            lambda: (jax.tree.map(jnp.zeros_like, params), state),
        )
    )(True)
    assert avals(new_state) == avals(state)


def test_optax_wrapper_of_gradax_inner_and_back():
    # A gradax wrapper inside optax.chain, holding an optax optimizer.
    inner = gradax.apply_if_finite(optax.adam(0.05), 1)
    gtx = optax.chain(optax.clip_by_global_norm(1.0), inner)
    otx = optax.chain(
        optax.clip_by_global_norm(1.0), optax.apply_if_finite(optax.adam(0.05), 1)
    )
    run_both(gtx, otx, bad={4: jnp.nan})


def test_wrappers_are_pytrees_with_visible_hyperparameters():
    tx = gradax.lookahead(gradax.adam(0.1), 5, 0.5)
    assert "slow_step_size=0.5" in repr(tx)
    leaves = jax.tree.leaves(tx)
    assert 0.5 in leaves and 5 in leaves
    assert tx == gradax.lookahead(gradax.adam(0.1), 5, 0.5)
    assert tx != gradax.lookahead(gradax.adam(0.1), 5, 0.4)


@pytest.mark.parametrize(
    "build",
    [
        lambda: gradax.apply_if_finite(gradax.adam(0.05), 3),
        lambda: gradax.MultiSteps(gradax.adam(0.05), 1),
        lambda: gradax.conditionally_transform(gradax.adam(0.05), lambda step: True),
    ],
    ids=["apply_if_finite", "MultiSteps", "conditionally_transform"],
)
def test_a_numpy_state_steps_as_its_jax_arrays_do(build):
    """A state of numpy arrays (a pickled checkpoint, resumed eagerly) gives
    the bits a state of jax arrays gives: the wrappers' lax.cond takes the
    inner state as an operand, not as constants it closes over (which XLA
    folds, 1 ulp apart)."""
    tx = build()
    params = {
        "w": jnp.linspace(-1.0, 1.0, 12).reshape(2, 3, 2),
        "b": jnp.linspace(0.3, 0.7, 5),
    }
    grads = jax.tree.map(lambda p: 0.37 * p - 0.11, params)
    _, state = tx.update(grads, tx.init(params), params)
    from_arrays, _ = tx.update(grads, state, params)
    from_numpy, _ = tx.update(grads, jax.device_get(state), params)
    for a, b in zip(
        jax.tree.leaves(from_arrays), jax.tree.leaves(from_numpy), strict=True
    ):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
