"""Checks every registry entry gets (see tests/registry.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from registry import ENTRIES, Entry, entry_id

import gradax


def over(entries):
    """Parametrize a check over the registry entries it applies to."""
    return pytest.mark.parametrize("entry", list(entries), ids=entry_id)


ALL = over(ENTRIES)
OPTIMIZERS = over(e for e in ENTRIES if e.optimizer)
ROSENBROCK = over(e for e in ENTRIES if e.optimizer and e.rosenbrock_steps)
WITH_OPTAX_TWIN = over(e for e in ENTRIES if e.optax_name != "")
SCHEDULABLE = over(e for e in ENTRIES if e.schedule_arg)
INJECTABLE = over(e for e in ENTRIES if e.injectable)
DTYPES = ["float16", "bfloat16", "float32", "float64", "complex64"]
ENTRY_DTYPES = pytest.mark.parametrize(
    "entry, dtype",
    [
        pytest.param(e, d, id=f"{d}-{entry_id(e)}")
        for e in ENTRIES
        for d in DTYPES
        if d != "complex64" or e.complex_ok
    ],
)


def make_params(dtype=jnp.float32):
    """A tree mixing a scalar, a vector, a matrix and a 3-D array."""
    keys = jax.random.split(jax.random.key(0), 4)
    shapes = {"s": (), "v": (5,), "m": (4, 3), "t": (2, 3, 2)}
    real = jnp.float32 if jnp.issubdtype(dtype, jnp.complexfloating) else dtype
    out = {}
    for key, (name, shape) in zip(keys, shapes.items(), strict=True):
        x = jax.random.normal(key, shape, jnp.float32)
        if jnp.issubdtype(dtype, jnp.complexfloating):
            x = x + 0.5j * jnp.cos(x)
        out[name] = x.astype(dtype if dtype != real else real)
    return out


def target_like(params):
    return jax.tree.map(lambda p: jnp.full_like(p, 0.5), params)


def quadratic_grads(params, step):
    """Gradients of a quadratic around 0.5, perturbed by a step-dependent term."""
    return jax.tree.map(
        lambda p: (
            (p - 0.5)
            * (1.0 + 0.1 * jnp.sin(step + jnp.arange(p.size)))
            .reshape(p.shape)
            .astype(p.dtype)
        ),
        params,
    )


def trajectory(tx, params, steps):
    """Run ``steps`` updates in one compiled scan; return params and updates."""

    def body(carry, step):
        p, s = carry
        g = quadratic_grads(p, step.astype(jnp.float32))
        u, s = tx.update(g, s, p)
        return (gradax.apply_updates(p, u), s), u

    (params, _), updates = jax.lax.scan(
        body, (params, tx.init(params)), jnp.arange(steps)
    )
    return params, updates


# ---------------------------------------------------------------------------


@WITH_OPTAX_TWIN
def test_equal_to_optax(entry: Entry):
    reference = entry.build_optax()
    params = make_params()
    ours = jax.jit(lambda p: trajectory(entry.build(), p, 20))(params)
    theirs = jax.jit(lambda p: trajectory(reference, p, 20))(params)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True):
        np.testing.assert_allclose(a, b, rtol=entry.rtol, atol=1e-6)


def _loss_parabola(p):
    return sum(jnp.sum((x - 0.5) ** 2) for x in jax.tree.leaves(p))


def _run(tx, loss, params, steps):
    def body(carry, _):
        p, s = carry
        u, s = tx.update(jax.grad(loss)(p), s, p)
        return (gradax.apply_updates(p, u), s), None

    (params, _), _ = jax.lax.scan(body, (params, tx.init(params)), None, steps)
    return params


@OPTIMIZERS
def test_converges_on_parabola(entry: Entry):
    tx = entry.build(**(entry.converge_kwargs or {}))
    params = make_params()
    final = jax.jit(lambda p: _run(tx, _loss_parabola, p, 500))(params)
    assert _loss_parabola(final) < 1e-3 * _loss_parabola(params)


def _rosenbrock(p):
    x, y = p["xy"][0], p["xy"][1]
    return (1 - x) ** 2 + 100 * (y - x**2) ** 2


@ROSENBROCK
def test_converges_on_rosenbrock(entry: Entry):
    tx = entry.build(**(entry.converge_kwargs or {}))
    params = {"xy": jnp.array([-1.2, 1.0])}
    final = jax.jit(lambda p: _run(tx, _rosenbrock, p, entry.rosenbrock_steps))(params)
    assert _rosenbrock(final) < 1e-3, final


@ALL
def test_no_recompile(entry: Entry):
    tx = entry.build()
    params = make_params()
    traces = []

    @jax.jit
    def step(state, grads, params):
        traces.append(None)
        return tx.update(grads, state, params)

    state = tx.init(params)
    for i in range(3):
        _, state = step(state, quadratic_grads(params, float(i)), params)
    assert len(traces) == 1


def _avals(tree):
    return jax.tree.map(
        lambda x: (x.shape, x.dtype, bool(getattr(x, "weak_type", False))), tree
    )


@ENTRY_DTYPES
def test_state_stable_under_control_flow(entry: Entry, dtype: str):
    with jax.enable_x64(dtype == "float64"):
        params = make_params(jnp.dtype(dtype))
        # The objective's value deliberately has another precision.
        value = jnp.asarray(1.0, jnp.float16 if dtype == "float32" else jnp.float32)
        tx = entry.build()
        grads = quadratic_grads(params, 1.0)
        state = tx.init(params)

        def step(s):
            return tx.update(grads, s, params, value=value)[1]

        # One compiled program for the four uses (eager op-by-op dispatch
        # took 0.9 s of a check's 1.3 s). ``cond``, ``while_loop`` and
        # ``scan`` reject a step whose state types differ from its input's.
        @jax.jit
        def every_use(s):
            updates, new_state = tx.update(grads, s, params, value=value)
            jax.lax.cond(True, step, lambda s: s, s)
            jax.lax.while_loop(
                lambda c: c[0] < 2, lambda c: (c[0] + 1, step(c[1])), (0, s)
            )
            jax.lax.scan(lambda s, _: (step(s), None), s, None, length=2)
            return updates, new_state

        updates, new_state = every_use(state)
        assert _avals(new_state) == _avals(state)
        assert jax.tree.map(lambda u: u.dtype, updates) == jax.tree.map(
            lambda g: g.dtype, grads
        )


@SCHEDULABLE
def test_constant_schedule_equals_scalar(entry: Entry):
    value = entry.kwargs.get(entry.schedule_arg)
    if value is None:
        value = getattr(entry.build(), entry.schedule_arg)

    def constant(count):
        # Depends on the traced count, so the schedule path really runs.
        return jnp.asarray(value, jnp.float32) + 0.0 * count

    params = make_params()
    plain = jax.jit(lambda p: trajectory(entry.build(), p, 5))(params)
    scheduled_tx = entry.build(**{entry.schedule_arg: constant})
    # The state's tree is the same (a checkpoint survives the switch).
    plain_state = jax.eval_shape(entry.build().init, params)
    scheduled_state = jax.eval_shape(scheduled_tx.init, params)
    assert jax.tree.structure(plain_state) == jax.tree.structure(scheduled_state)
    scheduled = jax.jit(lambda p: trajectory(scheduled_tx, p, 5))(params)
    for a, b in zip(jax.tree.leaves(plain), jax.tree.leaves(scheduled), strict=True):
        # The scalar is folded into the compiled program as a constant, the
        # schedule's value is not; XLA may round the two differently by 1 ulp,
        # which Adam's near-cancelling moments amplify on tiny entries.
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


@INJECTABLE
def test_inject_hyperparams_equals_plain(entry: Entry):
    params = make_params()
    plain = jax.jit(lambda p: trajectory(entry.build(), p, 5))(params)
    injected_tx = gradax.inject_hyperparams(entry.factory)(**entry.kwargs)
    injected = jax.jit(lambda p: trajectory(injected_tx, p, 5))(params)
    for a, b in zip(jax.tree.leaves(plain), jax.tree.leaves(injected), strict=True):
        # Injected values are float32 arrays, so ``1 - b2`` is computed in
        # float32 (1.3e-5 relative error for b2=0.999) where a Python float is
        # folded in float64 first. optax's inject_hyperparams differs from
        # plain optax by the same 6.7e-6 on this test.
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)


@ALL
def test_unknown_extra_args_accepted(entry: Entry):
    tx = entry.build()
    params = make_params()
    state = tx.init(params)
    jax.jit(lambda s, g, p: tx.update(g, s, p, unknown_arg=3))(
        state, quadratic_grads(params, 0.0), params
    )


@ALL
def test_abstract_init(entry: Entry):
    tx = entry.build()
    params = make_params()
    abstract = jax.tree.map(lambda p: jax.ShapeDtypeStruct(p.shape, p.dtype), params)
    shapes = jax.eval_shape(tx.init, abstract)
    concrete = tx.init(params)
    assert jax.tree.map(lambda x: (x.shape, x.dtype), shapes) == jax.tree.map(
        lambda x: (x.shape, x.dtype), concrete
    )


@ALL
def test_construction_touches_no_device(entry: Entry):
    with jax.transfer_guard("disallow"):
        entry.build()


@ALL
def test_built_in_one_trace_used_in_another(entry: Entry):
    holder = {}
    params = make_params()

    @jax.jit
    def build_and_init(p):
        holder["tx"] = entry.build()
        return holder["tx"].init(p)

    state = build_and_init(params)
    grads = quadratic_grads(params, 0.0)
    jax.jit(lambda s, g, p: holder["tx"].update(g, s, p))(state, grads, params)


@ALL
def test_is_pytree_and_jit_argument(entry: Entry):
    tx = entry.build()
    assert tx == entry.build()
    assert jax.tree.unflatten(*reversed(jax.tree.flatten(tx))) == tx
    params = make_params()
    state = tx.init(params)
    jax.jit(lambda t, s, g, p: t.update(g, s, p))(
        tx, state, quadratic_grads(params, 0.0), params
    )


@ALL
@pytest.mark.parametrize("axis_type", ["Auto", "Explicit"])
def test_sharded_equals_unsharded(entry: Entry, axis_type: str):
    assert len(jax.devices()) >= 8, "conftest sets XLA_FLAGS for 8 CPU devices"
    kind = getattr(jax.sharding.AxisType, axis_type)
    mesh = jax.make_mesh((4, 2), ("a", "b"), axis_types=(kind, kind))
    spec = jax.sharding.PartitionSpec
    keys = jax.random.split(jax.random.key(1), 3)
    params = {
        "s": jnp.asarray(0.3),
        "v": jnp.linspace(-1.0, 1.0, 8),
        "m": jax.random.normal(keys[0], (8, 6)),
        "t": jax.random.normal(keys[1], (2, 6, 8)),
    }
    grads = quadratic_grads(params, 0.0)
    tx = entry.build()
    step = jax.jit(lambda s, g, p: tx.update(g, s, p))
    single, _ = step(jax.jit(tx.init)(params), grads, params)
    shardings = {
        "s": jax.NamedSharding(mesh, spec()),
        "v": jax.NamedSharding(mesh, spec("a")),
        "m": jax.NamedSharding(mesh, spec("a", None)),
        "t": jax.NamedSharding(mesh, spec(None, None, "b")),
    }
    with jax.set_mesh(mesh):
        sharded_params = jax.device_put(params, shardings)
        state = jax.jit(tx.init)(sharded_params)
        # State shaped like a parameter carries its sharding: from the types
        # under Explicit axes, from the init wrapper's shard_alike under Auto.
        for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]:
            key = getattr(path[-1], "key", None)
            if key in params and leaf.shape == params[key].shape and leaf.ndim:
                sharding = shardings[key]
                assert leaf.sharding.is_equivalent_to(sharding, leaf.ndim), path
        updates, _ = step(state, jax.device_put(grads, shardings), sharded_params)
    # Sharded sums add in another order (float32 rounding, ~1e-7 relative).
    # Matrix functions (Shampoo's inverse roots, Dion2's Newton-Schulz on a
    # small random matrix) amplify that by their conditioning: seen up to
    # 5e-6 absolute on leaves of size ~0.1, so they are compared at 1e-4 of
    # the leaf's largest entry (a sharding bug is off by order one).
    matrix_function = any(k in entry.name for k in ("shampoo", "soap", "dion"))
    for a, b in zip(jax.tree.leaves(single), jax.tree.leaves(updates), strict=True):
        scale = float(np.max(np.abs(a))) if np.size(a) else 0.0
        atol = max(1e-6, 1e-4 * scale) if matrix_function else 1e-6
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=atol)
