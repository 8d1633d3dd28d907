"""Optimizer state in host memory (JAX memory kinds; the CPU backend has them)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax_versions import needs_jax, set_mesh

import gradax

P = jax.sharding.PartitionSpec

# Before jax 0.10.2 the CPU backend keeps "host" state in device memory;
# gradax.offload_state refuses it there (tests/core/test_compat.py).
pytestmark = needs_jax((0, 10, 2), "host offload on the CPU backend")


def test_cpu_backend_offers_pinned_host():
    kinds = {m.kind for m in jax.devices()[0].addressable_memories()}
    assert {"device", "pinned_host"} <= kinds


def _params():
    keys = jax.random.split(jax.random.key(0), 2)
    return {
        "w": jax.random.normal(keys[0], (8, 64)),
        "b": jax.random.normal(keys[1], (8,)),
    }


def _loss(p):
    return jnp.sum(jnp.tanh(p["w"]) ** 2) + jnp.sum(p["b"] ** 2)


@pytest.mark.parametrize("spec", [None, gradax.int8_blockwise(64)])
def test_state_on_host_results_identical(spec):
    inner = gradax.adamw(1e-2, mu_dtype=spec, nu_dtype=spec)
    tx = gradax.chain(gradax.clip_by_global_norm(1.0), gradax.offload_state(inner))
    ref = gradax.chain(gradax.clip_by_global_norm(1.0), inner)

    def run(tx):
        @jax.jit
        def step(p, s):
            u, s = tx.update(jax.grad(_loss)(p), s, p)
            return gradax.apply_updates(p, u), s

        params, state = _params(), tx.init(_params())
        for _ in range(3):
            params, state = step(params, state)
        return params, state

    params, state = run(tx)
    ref_params, ref_state = run(ref)
    host = state[1].inner_state
    assert {x.sharding.memory_kind for x in jax.tree.leaves(host)} == {"pinned_host"}
    assert {x.sharding.memory_kind for x in jax.tree.leaves(params)} == {"device"}
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(ref_params), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    for a, b in zip(jax.tree.leaves(host), jax.tree.leaves(ref_state[1]), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_under_control_flow_and_eager():
    tx = gradax.offload_state(gradax.adam(1e-2))
    params = _params()
    grads = jax.grad(_loss)(params)
    state = tx.init(params)

    @jax.jit
    def every_use(s):
        step = lambda s: tx.update(grads, s, params)[1]  # noqa: E731
        s = jax.lax.cond(True, step, lambda s: s, s)
        s = jax.lax.while_loop(
            lambda c: c[0] < 2, lambda c: (c[0] + 1, step(c[1])), (0, s)
        )[1]
        return jax.lax.scan(lambda s, _: (step(s), None), s, None, length=2)[0]

    state = every_use(state)
    _, state = tx.update(grads, state, params)  # eager
    assert {x.sharding.memory_kind for x in jax.tree.leaves(state)} == {"pinned_host"}
    assert int(state.inner_state[0].count) == 6


def test_sharded_state_keeps_sharding_on_host():
    mesh = jax.make_mesh((8,), ("d",), axis_types=(jax.sharding.AxisType.Auto,))
    tx = gradax.offload_state(gradax.adam(1e-2))
    params = _params()
    grads = jax.grad(_loss)(params)
    single = jax.jit(tx.update)(grads, tx.init(params), params)[0]
    shardings = {
        "w": jax.NamedSharding(mesh, P(None, "d")),
        "b": jax.NamedSharding(mesh, P()),
    }
    with set_mesh(mesh):
        sp, sg = jax.device_put(params, shardings), jax.device_put(grads, shardings)
        state = jax.jit(tx.init)(sp)
        updates, state = jax.jit(tx.update)(sg, state, sp)
    mu = state.inner_state[0].mu["w"]
    assert mu.sharding.memory_kind == "pinned_host"
    assert mu.sharding.with_memory_kind("device").is_equivalent_to(shardings["w"], 2)
    for a, b in zip(jax.tree.leaves(single), jax.tree.leaves(updates), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_device_memory_kind_and_bad_kind():
    tx = gradax.offload_state(gradax.adam(1e-2), memory_kind="device")
    state = tx.init(_params())
    assert {x.sharding.memory_kind for x in jax.tree.leaves(state)} == {"device"}
    with pytest.raises(ValueError, match="memory_kind"):
        gradax.offload_state(gradax.adam(1e-2), memory_kind="disk")


def test_donated_steps_keep_state_on_host():
    # JAX 0.10 hands a donated buffer to the first output of the same shape
    # and dtype, whatever its memory: the two orders documented in
    # docs/memory.md keep each host buffer on its own leaf. (Donating the
    # state alone while returning the parameters first aborts the process.)
    inner = gradax.adamw(1e-2)
    tx = gradax.offload_state(inner)

    def train(tx, donate, state_first):
        def step(p, s):
            u, s = tx.update(jax.grad(_loss)(p), s, p)
            p = gradax.apply_updates(p, u)
            return (s, p) if state_first else (p, s)

        step = jax.jit(step, donate_argnums=donate)
        params, state = _params(), tx.init(_params())
        for _ in range(3):
            out = step(params, state)
            state, params = out if state_first else out[::-1]
        return params, state

    ref_params, ref_state = train(inner, (), False)
    for donate, state_first in (((0, 1), False), ((1,), True)):
        params, state = train(tx, donate, state_first)
        host = jax.tree.leaves(state.inner_state)
        assert {x.sharding.memory_kind for x in host} == {"pinned_host"}
        for a, b in zip(host, jax.tree.leaves(ref_state), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        for a, b in zip(
            jax.tree.leaves(params), jax.tree.leaves(ref_params), strict=True
        ):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("jitted", [True, False])
def test_params_on_another_device_keep_the_state_there(jitted):
    """Params committed to device 3: every state leaf lives in device 3's
    host memory, the count included (made on the default device, it was
    moved to device 0's host memory, and the step then refused arrays on two
    devices)."""
    device = jax.devices()[3]
    params = jax.device_put(_params(), device)
    tx = gradax.offload_state(gradax.chain(gradax.clip(1.0), gradax.adamw(1e-2)))
    state = tx.init(params)
    update = jax.jit(tx.update) if jitted else tx.update
    for _ in range(2):
        grads = jax.grad(_loss)(params)
        updates, state = update(grads, state, params)
        params = gradax.apply_updates(params, updates)
    for leaf in jax.tree.leaves(state):
        assert leaf.devices() == {device}
        assert leaf.sharding.memory_kind == "pinned_host"
    assert all(leaf.devices() == {device} for leaf in jax.tree.leaves(params))
