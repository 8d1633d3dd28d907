"""Contrib optimizers whose update needs more than gradients and params.

``momo``, ``momo_adam`` and ``reduce_on_plateau`` need ``value=``; ``sophia``
with its default Hutchinson estimator needs ``obj_fn=``; ``sam`` in opaque mode
needs ``grad_fn=``. The generic conformance suite cannot call them, so this
file runs its checks on them with those arguments supplied, grouped as
test_conformance groups them: equal to optax, constant schedule == scalar and
inject == plain in one program; state stable under cond/while/scan for every
dtype; the protocol (abstract init, no device work at construction, pytree
and jit argument, built in one trace and used in another, unknown extra
arguments, no recompile); sharded == unsharded under Auto and Explicit axes.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance_base import (
    avals,
    control_flow_dtypes,
    make_params,
    meshes_and_shardings,
    sharding_params,
    state_type_problems,
)
from jax_versions import set_mesh
from registry import EXTRA_ARG_CASES
from registry_base import grad_fn, loss_fn
from registry_contrib import PLATEAU, sam_opaque

import gradax

CASES = EXTRA_ARG_CASES
CASE_IDS = [c.name for c in CASES]
over_cases = pytest.mark.parametrize("case", CASES, ids=CASE_IDS)


def trajectory(tx, case, params, steps, *, history=False):
    """``steps`` updates in one scan; the loss value is float32.

    Returns the final params and every step's updates, or with ``history``
    the params after every step and every step's updates.
    """

    def body(carry, step):
        p, s = carry
        value, grads = jax.value_and_grad(loss_fn)(p)
        value = value.astype(jnp.float32) + 0.01 * jnp.sin(step)
        u, s = tx.update(grads, s, p, **case.extra(p, value))
        p = gradax.apply_updates(p, u)
        return (p, s), ((p, u) if history else u)

    (params, _), out = jax.lax.scan(
        body, (params, tx.init(params)), jnp.arange(steps, dtype=jnp.float32)
    )
    return out if history else (params, out)


def _assert_close(a, b, rtol=1e-5, atol=1e-6):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(x, y, rtol=rtol, atol=atol)


@over_cases
def test_same_numbers_in_every_form(case):
    """Equal to optax's twin (20 steps); a constant schedule and
    inject_hyperparams equal the plain optimizer (5 steps). One program."""
    forms = {"plain": (case.make(), 20)}
    if case.build_optax is not None:
        forms["optax"] = (case.build_optax(), 20)
    if case.schedule_arg:
        value = case.kwargs.get(case.schedule_arg)
        assert value is not None, "give the scheduled argument a value in kwargs"

        def constant(count):
            return jnp.asarray(value, jnp.float32) + 0.0 * count

        forms["scheduled"] = (case.make(**{case.schedule_arg: constant}), 5)
    if case.injectable:
        forms["injected"] = (gradax.inject_hyperparams(case.build)(**case.kwargs), 5)
    results = jax.jit(
        lambda p: {
            name: trajectory(tx, case, p, n, history=True)
            for name, (tx, n) in forms.items()
        }
    )(make_params())
    for path, leaf in jax.tree_util.tree_flatten_with_path(results)[0]:
        assert np.all(np.isfinite(leaf)), f"not finite: {jax.tree_util.keystr(path)}"
    plain = results["plain"]
    first_five = jax.tree.map(lambda h: h[:5], plain)
    if "optax" in results:
        _assert_close(plain, results["optax"], rtol=case.rtol)
    if "scheduled" in results:
        # Two programs computing the same math: see test_conformance.
        _assert_close(first_five, results["scheduled"], rtol=case.rtol)
    if "injected" in results:
        # float32 hyperparameters against Python floats; see test_conformance.
        _assert_close(first_five, results["injected"], rtol=2e-5)


def test_reduce_on_plateau_really_reduces():
    # Guards the optax comparison above: the scale must change in 20 steps.
    tx = gradax.reduce_on_plateau(**PLATEAU)
    params = make_params()
    state = tx.init(params)
    scales = []
    for i in range(12):
        _, state = tx.update(params, state, params, value=jnp.float32(1.0 + 0 * i))
        scales.append(float(state.scale))
    assert scales[-1] < 0.2, scales


@over_cases
def test_state_stable_under_control_flow(case):
    """As test_conformance's: the state keeps its types through ``update``
    with the case's extra arguments, for every parameter dtype."""
    problems = state_type_problems(
        case.make,
        control_flow_dtypes(case.complex_ok),
        jax.grad(loss_fn),
        case.extra,
    )
    assert not problems, "\n".join(problems)


@over_cases
def test_protocol(case):
    """No device work at construction; a pytree that compares equal; ``init``
    on abstract arrays; built in one trace and used in another as a ``jit``
    argument; unknown extra arguments accepted; no recompile after the first
    step, even for a freshly built equal transformation."""
    with jax.transfer_guard("disallow"):
        case.make()
    tx = case.make()
    assert tx == case.make()
    assert jax.tree.unflatten(*reversed(jax.tree.flatten(tx))) == tx

    params = make_params()
    abstract = jax.tree.map(lambda p: jax.ShapeDtypeStruct(p.shape, p.dtype), params)
    abstract_state = jax.eval_shape(tx.init, abstract)

    holder = {}

    @jax.jit
    def build_and_init(p):
        holder["tx"] = case.make()
        return holder["tx"].init(p)

    state = build_and_init(params)
    assert avals(abstract_state) == avals(state), "init on ShapeDtypeStruct"

    traces = []

    @jax.jit
    def step(t, s, p, value):
        traces.append(None)
        extra = case.extra(p, value)
        return t.update(jax.grad(loss_fn)(p), s, p, unknown_arg=3, **extra)

    for i, t in enumerate([holder["tx"], case.make(), holder["tx"]]):
        _, state = step(t, state, params, jnp.float32(i))
    assert len(traces) == 1, "the step recompiled"


@over_cases
def test_sharded_equals_unsharded(case):
    params = sharding_params()
    tx = case.make()

    @jax.jit
    def first_step(p):
        value, grads = jax.value_and_grad(loss_fn)(p)
        return tx.update(grads, tx.init(p), p, **case.extra(p, value))[0]

    single = first_step(params)
    for _, mesh, shardings in meshes_and_shardings():
        with set_mesh(mesh):
            updates = first_step(jax.device_put(params, shardings))
        _assert_close(single, updates)


# ---------------------------------------------------------------------------
# Errors naming what is missing.


@pytest.mark.parametrize("name", ["momo", "momo_adam", "reduce_on_plateau"])
def test_missing_value_is_an_error(name):
    tx = getattr(gradax, name)()
    params = make_params()
    with pytest.raises(ValueError, match="value="):
        tx.update(params, tx.init(params), params)


def test_hutchinson_needs_obj_fn():
    tx = gradax.sophia(0.1)
    params = make_params()
    with pytest.raises(ValueError, match="obj_fn"):
        tx.update(params, tx.init(params), params)


def test_opaque_sam_needs_grad_fn():
    tx = sam_opaque()
    params = make_params()
    with pytest.raises(ValueError, match="grad_fn"):
        tx.update(params, tx.init(params), params)


# ---------------------------------------------------------------------------
# Behaviour.


def _descend(tx, steps, extra_fn):
    params = make_params()

    def body(carry, _):
        p, s = carry
        value, grads = jax.value_and_grad(loss_fn)(p)
        u, s = tx.update(grads, s, p, **extra_fn(value))
        return (gradax.apply_updates(p, u), s), None

    (final, _), _ = jax.lax.scan(body, (params, tx.init(params)), None, steps)
    return loss_fn(final) / loss_fn(params)


@pytest.mark.parametrize(
    "tx, extra_fn",
    [
        (gradax.momo(1.0), lambda v: dict(value=v)),
        (gradax.momo_adam(0.1), lambda v: dict(value=v)),
        (gradax.sophia(0.05, update_interval=2), lambda v: dict(obj_fn=loss_fn)),
        (sam_opaque(), lambda v: dict(grad_fn=grad_fn)),
    ],
    ids=["momo", "momo_adam", "sophia", "sam-opaque"],
)
def test_converges(tx, extra_fn):
    assert _descend(tx, 300, extra_fn) < 1e-3


def test_hutchinson_is_exact_for_a_diagonal_hessian():
    # u * (H u) = diag(H) when H is diagonal and u has entries +-1.
    tx = gradax.hutchinson_estimator_diag_hessian(jax.random.PRNGKey(3))
    params = {"a": jnp.array([1.0, -2.0, 0.5]), "b": jnp.ones((2, 2))}

    def obj_fn(p):
        return jnp.sum(jnp.array([1.0, 2.0, 3.0]) * p["a"] ** 2) + jnp.sum(p["b"] ** 4)

    state = tx.init(params)
    diag, new_state = tx.update(params, state, params, obj_fn=obj_fn)
    np.testing.assert_allclose(diag["a"], [2.0, 4.0, 6.0])
    np.testing.assert_allclose(diag["b"], 12.0 * np.ones((2, 2)))
    assert not np.array_equal(new_state.key, state.key)


def test_hutchinson_estimates_off_diagonal_hessians_without_bias():
    hessian = np.array([[2.0, 1.0, -0.5], [1.0, 3.0, 0.2], [-0.5, 0.2, 1.0]], "f4")

    def obj_fn(p):
        return 0.5 * p @ hessian @ p

    tx = gradax.hutchinson_estimator_diag_hessian()
    params = jnp.zeros(3)

    def body(state, _):
        diag, state = tx.update(params, state, params, obj_fn=obj_fn)
        return state, diag

    _, diags = jax.lax.scan(body, tx.init(params), None, 4000)
    np.testing.assert_allclose(diags.mean(0), np.diag(hessian), atol=0.05)


def test_sophia_refreshes_the_hessian_every_update_interval():
    tx = gradax.scale_by_sophia(update_interval=3, b2=0.5)
    params = jnp.array([1.0, 2.0])

    def obj_fn(p):
        return jnp.sum(p**2)

    state = tx.init(params)
    seen = []
    for _ in range(7):
        _, state = tx.update(params, state, params, obj_fn=obj_fn)
        seen.append(float(state.nu[0]))
    # Estimates at counts 0, 3, 6: nu = 1, 1.5, 1.75 (decay 0.5 towards 2).
    assert seen == [1.0, 1.0, 1.0, 1.5, 1.5, 1.5, 1.75]


def test_sam_opaque_equals_transparent():
    # One opaque update is one whole period of transparent updates.
    adv = gradax.chain(gradax.normalize(), gradax.sgd(0.1))
    opaque = gradax.sam(gradax.sgd(0.05), adv, sync_period=3, opaque_mode=True)
    transparent = gradax.sam(gradax.sgd(0.05), adv, sync_period=3)
    params = make_params()
    u, _ = opaque.update(
        grad_fn(params, 0), opaque.init(params), params, grad_fn=grad_fn
    )
    expected = gradax.apply_updates(params, u)
    p, state = params, transparent.init(params)
    for _ in range(3):
        u, state = transparent.update(grad_fn(p, 0), state, p)
        p = gradax.apply_updates(p, u)
    _assert_close(p, expected)


def test_sam_batch_axis_name_averages_adversarial_gradients():
    tx = gradax.sam(
        gradax.sgd(1.0),
        gradax.sgd(0.0),
        sync_period=2,
        opaque_mode=True,
        batch_axis_name="batch",
    )
    params = jnp.zeros(2)

    def per_device(scale):
        def grad_fn(p, i):
            del i
            return p + scale

        u, _ = tx.update(jnp.zeros(2), tx.init(params), params, grad_fn=grad_fn)
        return u

    updates = jax.vmap(per_device, axis_name="batch")(jnp.array([[1.0], [3.0]]))
    np.testing.assert_allclose(updates, -2.0 * np.ones((2, 2)))


def test_reduce_on_plateau_cooldown_and_min_scale():
    tx = gradax.reduce_on_plateau(factor=0.5, patience=2, cooldown=2, min_scale=0.2)
    state = tx.init(jnp.zeros(1))
    scales = []
    for _ in range(14):
        _, state = tx.update(jnp.ones(1), state, value=1.0)
        scales.append(float(state.scale))
    # The first value improves on inf; then 2 flat steps reduce, 2 cool down.
    expected = [1.0, 1.0, 0.5, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.25, 0.2, 0.2, 0.2]
    np.testing.assert_allclose(scales, expected + [0.2], rtol=1e-7)
