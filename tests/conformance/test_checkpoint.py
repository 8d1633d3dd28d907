"""Sharded optimizer state round-trips through orbax; resuming is bit-identical."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from jax_versions import set_mesh

import gradax

P = jax.sharding.PartitionSpec


def _setup(mesh):
    rng = np.random.default_rng(0)
    params = {
        "w1": jnp.asarray(rng.standard_normal((16, 32)), jnp.float32) / 4,
        "w2": jnp.asarray(rng.standard_normal((32, 8)), jnp.float32) / 6,
        "b": jnp.zeros(8, jnp.float32),
    }
    shardings = {
        "w1": jax.NamedSharding(mesh, P(None, "d")),
        "w2": jax.NamedSharding(mesh, P("d", None)),
        "b": jax.NamedSharding(mesh, P()),
    }
    return jax.device_put(params, shardings)


def _train(tx, params, state, steps, start):
    @jax.jit
    def step(p, s, i):
        x = jnp.sin(jnp.arange(64 * 16, dtype=jnp.float32).reshape(64, 16) + i)
        y = jnp.cos(jnp.arange(64 * 8, dtype=jnp.float32).reshape(64, 8) - i)

        def loss_fn(p):
            return jnp.mean((jnp.tanh(x @ p["w1"]) @ p["w2"] + p["b"] - y) ** 2)

        updates, s = tx.update(jax.grad(loss_fn)(p), s, p)
        return gradax.apply_updates(p, updates), s

    for i in range(start, start + steps):
        params, state = step(params, state, jnp.float32(i))
    return params, state


def test_resume_from_orbax_checkpoint_is_bit_identical(tmp_path):
    mesh = jax.make_mesh((8,), ("d",), axis_types=(jax.sharding.AxisType.Auto,))
    tx = gradax.chain(
        gradax.clip_by_global_norm(1.0),
        gradax.muon(gradax.cosine_decay_schedule(0.02, 20), weight_decay=0.01),
    )
    with set_mesh(mesh):
        params = _setup(mesh)
        state = jax.jit(tx.init)(params)
        params, state = _train(tx, params, state, 3, 0)

        checkpointer = ocp.StandardCheckpointer()
        path = tmp_path / "ckpt"
        checkpointer.save(path, {"params": params, "opt_state": state})
        checkpointer.wait_until_finished()

        straight = _train(tx, params, state, 4, 3)

        abstract = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
            {"params": params, "opt_state": state},
        )
        restored = checkpointer.restore(path, abstract)
        assert jax.tree.structure(restored) == jax.tree.structure(abstract)
        for a, b in zip(
            jax.tree.leaves(restored), jax.tree.leaves(abstract), strict=True
        ):
            assert a.sharding.is_equivalent_to(b.sharding, a.ndim)
        resumed = _train(tx, restored["params"], restored["opt_state"], 4, 3)

    for a, b in zip(jax.tree.leaves(straight), jax.tree.leaves(resumed), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
