"""gradax/_compat.py: the shims for older jax, and the features that refuse it.

A feature that needs a newer jax raises when it is used, naming the jax it
needs; these tests pretend an older jax (``_compat.JAX_VERSION``, which
every refusal reads) so they run on every jax in the range.
"""

from __future__ import annotations

import operator

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradax
from gradax import _compat


def _pretend(monkeypatch, version):
    monkeypatch.setattr(_compat, "JAX_VERSION", version)


def test_require_jax_names_the_version_and_the_feature(monkeypatch):
    _compat.require_jax((0, 5, 3), "anything")  # the floor: always there
    _pretend(monkeypatch, (0, 6, 2))
    with pytest.raises(RuntimeError, match=r"^Widgets needs jax 0\.7\.0 or newer;"):
        _compat.require_jax((0, 7, 0), "Widgets")
    _compat.require_jax((0, 6, 2), "Widgets")


def test_explicit_mesh_axes_refused_before_jax_0_7_at_init(monkeypatch):
    kind = jax.sharding.AxisType.Explicit
    mesh = jax.make_mesh((1,), ("d",), axis_types=(kind,))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    params = jax.device_put(jnp.ones(4), sharding)
    tx = gradax.adam(1e-3)
    _pretend(monkeypatch, (0, 6, 2))
    with pytest.raises(RuntimeError, match=r"Explicit axes.*needs jax 0\.7\.0"):
        tx.init(params)
    with pytest.raises(RuntimeError, match=r"needs jax 0\.7\.0"):
        _compat.are_all_axes_explicit(mesh)


def test_auto_axes_and_no_mesh_work_on_an_older_jax(monkeypatch):
    # Pretending only moves the refusals: this checks that nothing off an
    # Explicit mesh consults them.
    _pretend(monkeypatch, (0, 5, 3))
    kind = jax.sharding.AxisType.Auto
    mesh = jax.make_mesh((1,), ("d",), axis_types=(kind,))
    assert not _compat.are_all_axes_explicit(mesh)
    tx = gradax.adam(1e-3)
    state = tx.init(jnp.ones(4))
    updates, _ = tx.update(jnp.ones(4), state)
    assert updates.shape == (4,)


@pytest.mark.parametrize(
    "version, needed", [((0, 7, 0), r"0\.7\.1"), ((0, 10, 1), r"0\.10\.2")]
)
def test_offload_state_refused_where_jax_cannot_offload(monkeypatch, version, needed):
    if version >= (0, 7, 1) and jax.default_backend() != "cpu":
        pytest.skip("the 0.10.2 requirement is the CPU backend's")
    tx = gradax.offload_state(gradax.adam(1e-3))  # construction touches nothing
    _pretend(monkeypatch, version)
    with pytest.raises(RuntimeError, match=rf"offload_state.*needs jax {needed}"):
        tx.init(jnp.ones(3))


@pytest.mark.parametrize("count", [0, 1, 2, 3, 5, 8, 13])
def test_reduce_associative_fallback_keeps_the_order(monkeypatch, count):
    # The fallback for jax < 0.7.0; string concatenation is associative but
    # not commutative, so any reordering of leaves shows.
    monkeypatch.delattr(jax.tree, "reduce_associative", raising=False)
    leaves = {f"k{i:02d}": chr(ord("a") + i) for i in range(count)}
    calls = []

    def join(a, b):
        calls.append((a, b))
        return a + b

    out = _compat.tree_reduce_associative(join, leaves, identity="")
    assert out == "".join(leaves.values())
    assert len(calls) == max(count - 1, 0)


def test_tree_sum_associative_matches_plain_sum():
    tree = {"a": jnp.arange(3.0), "b": [jnp.ones((2, 2)), jnp.float32(4.0)]}
    plain = gradax.tree.sum(tree)
    balanced = gradax.tree.sum(tree, associative_reduction=True)
    np.testing.assert_array_equal(balanced, plain)  # integers: exact either way


def test_zeros_and_tensordot_without_a_sharding(monkeypatch):
    _pretend(monkeypatch, (0, 5, 3))
    z = _compat.zeros((2, 3), jnp.bfloat16, out_sharding=None)
    assert z.shape == (2, 3) and z.dtype == jnp.bfloat16 and not z.any()
    a = jnp.arange(6.0).reshape(2, 3)
    got = _compat.tensordot(a, a, axes=2, precision=None, out_sharding=None)
    assert float(got) == float(operator.mul(a, a).sum())
