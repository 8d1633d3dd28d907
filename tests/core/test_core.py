"""The protocol: transformations as pytrees, schedules, state stability, errors."""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax_versions import enable_x64

import gradax
from gradax import GradientTransformation


def params_tree():
    return {"w": jnp.arange(6.0).reshape(2, 3) / 6, "b": jnp.array([0.5, -1.0])}


def grads_tree(params):
    return jax.tree.map(lambda p: 0.3 * p + 0.1, params)


def run(tx, params, steps=5):
    state = tx.init(params)
    for _ in range(steps):
        updates, state = tx.update(grads_tree(params), state, params)
        params = gradax.apply_updates(params, updates)
    return params


def assert_trees_close(a, b, rtol=1e-6, atol=1e-7):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(x, y, rtol=rtol, atol=atol)


# --- Transformations are data -------------------------------------------------


def test_repr_shows_hyperparameters():
    text = repr(gradax.adamw(3e-4, b1=0.8, weight_decay=0.05))
    assert text.startswith("adamw(")
    for shown in ("learning_rate=0.0003", "b1=0.8", "weight_decay=0.05"):
        assert shown in text


def test_equal_optimizers_compare_equal():
    assert gradax.adamw(3e-4, b1=0.8) == gradax.adamw(3e-4, b1=0.8)
    assert hash(gradax.adamw(3e-4)) == hash(gradax.adamw(3e-4))
    assert gradax.adamw(3e-4, b1=0.8) != gradax.adamw(3e-4, b1=0.7)
    assert gradax.adam(1e-3) != gradax.adam(1e-3, nesterov=True)
    mask = {"w": True, "b": False}
    assert gradax.adamw(1e-3, mask=mask) == gradax.adamw(1e-3, mask=dict(mask))


def test_numeric_hyperparameters_are_leaves_and_flags_static():
    tx = gradax.adamw(3e-4, b1=0.8, weight_decay=0.05, nesterov=True)
    leaves = jax.tree.leaves(tx)
    assert 3e-4 in leaves and 0.8 in leaves and 0.05 in leaves
    assert True not in leaves  # nesterov is static


def test_jitted_step_with_optimizer_argument_traces_once():
    traces = []

    @jax.jit
    def train_step(tx, params, state):
        traces.append(None)
        updates, state = tx.update(grads_tree(params), state, params)
        return gradax.apply_updates(params, updates), state

    params = params_tree()
    state = gradax.adamw(1e-3).init(params)
    for lr in (1e-3, 5e-4, 2.5e-4, 1e-4):
        params, state = train_step(gradax.adamw(lr), params, state)
    assert len(traces) == 1


def test_grad_with_respect_to_learning_rate_matches_finite_differences():
    def loss_after_steps(lr):
        params = run(gradax.adam(lr, b1=0.5), params_tree(), steps=4)
        return sum(jnp.sum(p**2) for p in jax.tree.leaves(params))

    with enable_x64(True):
        lr = 0.05
        grad = jax.grad(loss_after_steps)(lr)
        h = 1e-6
        fd = (loss_after_steps(lr + h) - loss_after_steps(lr - h)) / (2 * h)
        np.testing.assert_allclose(grad, fd, rtol=1e-6)
        assert abs(grad) > 1e-3


# --- Interop with optax ---------------------------------------------------------


def test_gradax_inside_optax_chain():
    params = params_tree()
    ours = optax.chain(optax.clip_by_global_norm(1.0), gradax.adamw(0.1))
    theirs = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(0.1))
    assert_trees_close(run(ours, params), run(theirs, params))


def test_optax_inside_gradax_chain():
    params = params_tree()
    ours = gradax.chain(optax.clip_by_global_norm(1.0), gradax.scale(-0.1))
    theirs = optax.chain(optax.clip_by_global_norm(1.0), optax.scale(-0.1))
    assert_trees_close(run(ours, params), run(theirs, params))
    jitted = jax.jit(lambda p, s: ours.update(grads_tree(p), s, p))
    jitted(params, ours.init(params))


def test_optax_factory_inside_inject_hyperparams():
    params = params_tree()
    ours = gradax.inject_hyperparams(optax.adam)(learning_rate=0.1)
    theirs = optax.inject_hyperparams(optax.adam)(learning_rate=0.1)
    assert_trees_close(run(ours, params), run(theirs, params))


# --- Hyperparameters: number, array or schedule ---------------------------------


@pytest.mark.parametrize(
    "learning_rate",
    [0.1, np.float32(0.1), jnp.asarray(0.1), lambda count: 0.1 + 0.0 * count],
    ids=["float", "numpy", "jax", "schedule"],
)
def test_learning_rate_forms_give_same_numbers(learning_rate):
    params = params_tree()
    assert_trees_close(
        run(gradax.adam(learning_rate), params), run(optax.adam(0.1), params)
    )


def test_schedule_is_evaluated_at_update_count():
    seen = []

    def schedule(count):
        seen.append(count)
        return 0.1 * (count + 1)

    tx = gradax.scale_by_learning_rate(schedule)
    params = jnp.ones(2)
    state = tx.init(params)
    out = []
    for _ in range(3):
        updates, state = tx.update(jnp.ones(2), state)
        out.append(float(updates[0]))
    np.testing.assert_allclose(out, [-0.1, -0.2, -0.3], rtol=1e-6)


def test_every_numeric_hyperparameter_accepts_a_schedule():
    params = params_tree()
    plain = gradax.adamw(0.1, b1=0.8, b2=0.99, eps=1e-6, weight_decay=0.01)
    scheduled = gradax.adamw(
        lambda c: 0.1,
        b1=lambda c: 0.8,
        b2=lambda c: 0.99,
        eps=lambda c: 1e-6,
        weight_decay=lambda c: 0.01,
    )
    assert_trees_close(run(plain, params), run(scheduled, params))


# --- State stability, enforced centrally ------------------------------------------


class _DriftState(NamedTuple):
    acc: Any


class _drifting(GradientTransformation):
    """A deliberately sloppy transformation: its update promotes the state."""

    def init_state(self, params):
        return _DriftState(jax.tree.map(jnp.zeros_like, params))

    def update_state(self, updates, state, params=None, **extra_args):
        acc = jax.tree.map(lambda a, g: a + g.astype(jnp.float32), state.acc, updates)
        return jax.tree.map(lambda g: g.astype(jnp.float32), updates), _DriftState(acc)


class _reshaping(GradientTransformation):
    def init_state(self, params):
        return _DriftState(jax.tree.map(jnp.zeros_like, params))

    def update_state(self, updates, state, params=None, **extra_args):
        return updates, _DriftState(jax.tree.map(lambda a: a[None], state.acc))


def test_state_dtype_is_restored_by_the_base_class():
    params = {"w": jnp.ones(3, jnp.bfloat16)}
    tx = _drifting()
    state = tx.init(params)
    updates, new_state = tx.update(params, state)
    assert new_state.acc["w"].dtype == jnp.bfloat16
    assert updates["w"].dtype == jnp.bfloat16
    jax.lax.while_loop(
        lambda c: c[0] < 3,
        lambda c: (c[0] + 1, tx.update(params, c[1])[1]),
        (0, state),
    )


def test_weak_type_of_state_is_kept():
    tx = gradax.scale(2.0)

    class _weak(GradientTransformation):
        def init_state(self, params):
            return _DriftState(jnp.asarray(0.0))  # weakly typed

        def update_state(self, updates, state, params=None, **extra_args):
            return updates, _DriftState(state.acc + jnp.float32(1.0))

    weak = gradax.chain(tx, _weak())
    state = weak.init(jnp.ones(2))
    _, new_state = weak.update(jnp.ones(2), state)
    assert new_state[1].acc.weak_type == state[1].acc.weak_type is True


def test_state_shape_change_names_the_leaf():
    tx = _reshaping()
    params = {"w": jnp.ones(3)}
    with pytest.raises(TypeError, match=r"\['w'\]"):
        tx.update(params, tx.init(params))


def test_no_recompile_with_low_precision_params_and_other_value_dtype():
    params = {"w": jnp.ones((3, 2), jnp.float16), "b": jnp.ones(2, jnp.bfloat16)}
    tx = gradax.adamw(gradax.FunctionSchedule(lambda c: 1e-3 / (1.0 + c)))
    traces = []

    @jax.jit
    def step(state, params, value):
        traces.append(None)
        updates, state = tx.update(params, state, params, value=value)
        return gradax.apply_updates(params, updates), state

    state = tx.init(params)
    for _ in range(3):
        params, state = step(state, params, jnp.float32(1.0))
    assert len(traces) == 1
    assert params["w"].dtype == jnp.float16


# --- Utilities ----------------------------------------------------------------


def test_apply_updates_keeps_dtype_and_skips_none():
    params = {"a": jnp.ones(2, jnp.bfloat16), "b": None}
    out = gradax.apply_updates(params, {"a": jnp.full(2, 0.5, jnp.float32), "b": None})
    assert out["a"].dtype == jnp.bfloat16 and out["b"] is None
    np.testing.assert_array_equal(out["a"].astype(jnp.float32), [1.5, 1.5])


def test_incremental_and_periodic_update_match_optax():
    new, old = params_tree(), grads_tree(params_tree())
    assert_trees_close(
        gradax.incremental_update(new, old, 0.3),
        optax.incremental_update(new, old, 0.3),
    )
    for step in (0, 1, 4):
        assert_trees_close(
            gradax.periodic_update(new, old, jnp.asarray(step), 2),
            optax.periodic_update(new, old, jnp.asarray(step), 2),
        )


def test_identity_set_to_zero_stateless():
    params = params_tree()
    grads = grads_tree(params)
    assert_trees_close(
        gradax.identity().update(grads, gradax.identity().init(params))[0], grads
    )
    zeros = gradax.set_to_zero().update(grads, ())[0]
    assert all(float(jnp.abs(z).sum()) == 0 for z in jax.tree.leaves(zeros))
    double = gradax.stateless(lambda u, p: jax.tree.map(lambda x: 2 * x, u))
    assert_trees_close(
        double.update(grads, double.init(params))[0],
        jax.tree.map(lambda g: 2 * g, grads),
    )
    add_p = gradax.stateless_with_tree_map(lambda g, p: g + p)
    assert_trees_close(
        add_p.update(grads, add_p.init(params), params)[0],
        jax.tree.map(jnp.add, grads, params),
    )


def test_with_extra_args_support_wraps_optax():
    tx = gradax.with_extra_args_support(optax.sgd(0.1))
    params = params_tree()
    updates, _ = tx.update(grads_tree(params), tx.init(params), params, loss=1.0)
    assert_trees_close(updates, jax.tree.map(lambda g: -0.1 * g, grads_tree(params)))


def test_a_value_optax_s_wrapper_dropped_is_named_as_the_cause():
    """optax.with_extra_args_support (numpyro's optax_to_numpyro, optax's
    chain) drops the keyword arguments of a transformation that is not
    optax's: the error of an update that needs value= says so."""
    params = params_tree()
    grads = grads_tree(params)
    cases = [
        (gradax.contrib.reduce_on_plateau(), ValueError),  # contrib's own check
        (gradax.polyak_sgd(), TypeError),  # the base class's required arguments
    ]
    for tx, error in cases:
        state = tx.init(params)
        wrapped = optax.with_extra_args_support(tx)
        with pytest.raises(error, match="through optax.with_extra_args_support"):
            wrapped.update(grads, state, params, value=1.0)
        with pytest.raises(error, match="value") as direct:
            tx.update(grads, state, params)
        assert "with_extra_args_support" not in str(direct.value)
        tx.update(grads, state, params, value=1.0)  # given directly, it works


# --- Parameter groups -----------------------------------------------------------


def _groups():
    params = {"enc": jnp.ones(3), "dec": jnp.ones(3), "head": jnp.ones(3)}
    names = list(params)
    rates = {"enc": 0.1, "dec": 0.01, "head": 0.001}
    return params, names, rates


def test_masked_inject_groups_each_get_their_own_update():
    params, names, rates = _groups()
    parts = []
    for name in names:
        # Bind the rate now: a bare `lambda c: rates[name]` would see only the
        # loop's last name (the late-binding trap the docs warn about).
        schedule = functools.partial(lambda c, r: r + 0.0 * c, r=rates[name])
        mask = {k: k == name for k in names}
        parts.append(
            gradax.masked(
                gradax.inject_hyperparams(gradax.adam)(learning_rate=schedule), mask
            )
        )
    tx = gradax.chain(*parts)
    state = tx.init(params)
    grads = jax.tree.map(jnp.ones_like, params)
    updates, _ = jax.jit(tx.update)(grads, state, params)
    for name in names:
        # Adam's first step is -lr * sign(g).
        np.testing.assert_allclose(updates[name], -rates[name], rtol=1e-5)


def test_partition_groups_match_separate_optimizers():
    params, names, rates = _groups()
    tx = gradax.partition(
        {n: gradax.adam(rates[n]) for n in names}, {n: n for n in names}
    )
    final = run(tx, params, steps=3)
    for name in names:
        alone = run(gradax.adam(rates[name]), {name: params[name]}, steps=3)
        np.testing.assert_allclose(final[name], alone[name], rtol=1e-6)


# --- Bad input ------------------------------------------------------------------


@pytest.mark.parametrize(
    "build, name",
    [
        (lambda: gradax.adam(0.1, b1=1.0), "b1"),
        (lambda: gradax.adam(0.1, b1=-0.1), "b1"),
        (lambda: gradax.adam(0.1, b2=1.5), "b2"),
        (lambda: gradax.adam(0.1, eps=-1e-8), "eps"),
        (lambda: gradax.adamw(0.1, weight_decay=-0.1), "weight_decay"),
        (lambda: gradax.scale_by_adam(eps_root=-1.0), "eps_root"),
        (lambda: gradax.add_decayed_weights(-1.0), "weight_decay"),
    ],
)
def test_invalid_hyperparameter_raises_at_construction(build, name):
    with pytest.raises(ValueError, match=rf"{name} must be in \[0, .*got"):
        build()


def test_mismatched_gradients_name_the_path():
    params = params_tree()
    tx = gradax.adam(0.1)
    state = tx.init(params)
    with pytest.raises(ValueError, match=r"\['b'\]"):
        tx.update({"w": params["w"]}, state, params)


def test_partition_label_without_transformation_is_named():
    with pytest.raises(ValueError, match="'dec'"):
        gradax.partition({"enc": gradax.adam(0.1)}, {"w": "enc", "b": "dec"}).init(
            params_tree()
        )


def test_mask_that_does_not_fit_names_where():
    tx = gradax.masked(gradax.adam(0.1), {"w": True, "x": False})
    with pytest.raises(ValueError, match=r"\['x'\]"):
        tx.init(params_tree())


def test_non_transformation_in_chain_is_rejected():
    with pytest.raises(TypeError, match=r"transforms\[1\]"):
        gradax.chain(gradax.adam(0.1), 3.0)
