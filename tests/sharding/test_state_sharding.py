"""State built under ``jit`` on Auto mesh axes is sharded like the parameters.

The registry checks every entry (tests/conformance/test_conformance.py); these check the
mechanism itself: the leaf keeps its exact values, dtype and weak type, and
takes the parameter's sharding, on any jax gradax supports (it used
``jax.experimental.shard_alike`` until jax 0.11.2 removed it).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax_versions import set_mesh

import gradax
from gradax._core.axes import shard_state_like_params

P = jax.sharding.PartitionSpec


def auto_mesh():
    assert len(jax.devices()) >= 8, "conftest sets XLA_FLAGS for 8 CPU devices"
    auto = jax.sharding.AxisType.Auto
    return jax.make_mesh((4, 2), ("a", "b"), axis_types=(auto, auto))


LEAVES = {
    "zeros": jnp.zeros_like,
    "negative zeros": lambda p: jnp.full(p.shape, -0.0, jnp.float32),
    "copy": lambda p: p,
    "ones": jnp.ones_like,
    "int8": lambda p: jnp.zeros(p.shape, jnp.int8),
    "uint32": lambda p: jnp.full(p.shape, 7, jnp.uint32),
    "bool": lambda p: jnp.zeros(p.shape, bool),
    "weak": lambda p: jax.lax.full(p.shape, 0.5),
    "complex": lambda p: jnp.zeros(p.shape, jnp.complex64),
}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "complex64"])
@pytest.mark.parametrize("kind", list(LEAVES))
def test_tied_leaf_keeps_its_values_and_takes_the_sharding(kind, dtype):
    make = LEAVES[kind]
    mesh = auto_mesh()
    values = jnp.asarray([[-2.0, 0.0, jnp.nan, jnp.inf, -jnp.inf, 1.0]] * 8)
    with set_mesh(mesh):
        sharding = jax.NamedSharding(mesh, P("a", None))
        param = jax.device_put(values.astype(dtype), sharding)

        def tied(p):
            return shard_state_like_params({"mu": {"w": make(p)}}, {"w": p})["mu"]["w"]

        leaf = jax.jit(tied)(param)
        expected = jax.jit(make)(param)
        assert leaf.sharding.is_equivalent_to(sharding, leaf.ndim)
    # Bit for bit: NaN where it was, and the sign of zero.
    np.testing.assert_array_equal(
        np.asarray(leaf).view(np.uint8), np.asarray(expected).view(np.uint8)
    )
    traced, plain = jax.eval_shape(tied, param), jax.eval_shape(make, param)
    assert (traced.dtype, traced.weak_type) == (plain.dtype, plain.weak_type)


def test_init_under_jit_shards_state_like_params_and_update_agrees():
    mesh = auto_mesh()
    params = {"m": jnp.arange(48.0).reshape(8, 6), "v": jnp.linspace(-1, 1, 8)}
    specs = {"m": P("a", "b"), "v": P("b")}
    tx = gradax.adamw(1e-2)
    with set_mesh(mesh):
        shardings = {k: jax.NamedSharding(mesh, s) for k, s in specs.items()}
        sharded = jax.device_put(params, shardings)
        state = jax.jit(tx.init)(sharded)
        mu = state[0].mu
        for key, sharding in shardings.items():
            assert mu[key].sharding.is_equivalent_to(sharding, mu[key].ndim), key
        updates, _ = jax.jit(tx.update)(sharded, state, sharded)
    expected, _ = tx.update(params, tx.init(params), params)
    for key in params:
        np.testing.assert_allclose(updates[key], expected[key], rtol=1e-6)


def test_integer_parameters_are_left_alone():
    # No NaN to reason about: the state stays the compiler's choice, unchanged.
    mesh = auto_mesh()
    with set_mesh(mesh):
        param = jax.device_put(
            jnp.arange(8, dtype=jnp.int32), jax.NamedSharding(mesh, P("a"))
        )
        leaf = jax.jit(
            lambda p: shard_state_like_params({"w": jnp.zeros_like(p)}, {"w": p})["w"]
        )(param)
    np.testing.assert_array_equal(leaf, np.zeros(8, np.int32))
