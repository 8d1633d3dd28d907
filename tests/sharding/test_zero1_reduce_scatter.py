"""ZeRO-1 at data parallelism's traffic: reduce-scattered gradients.

``data_parallel_value_and_grad`` gives each device the summed slice of each
gradient that ``shard_state`` updates there. These tests check the numbers
(the whole batch's mean gradient), the layout (``zero_spec``'s), a training
step against the unsharded one, and the compiled step's collectives: a
reduce-scatter and an all-gather in place of the gradients' all-reduce, the
bytes each device receives no more than plain data parallelism's.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax_versions import reshard, set_mesh

import gradax
from gradax.sharding import data_parallel_value_and_grad, zero_spec
from gradax_cli.benchmarks.distributed import collective_bytes

P = jax.sharding.PartitionSpec
VOCAB, WIDTH, BATCH = 64, 32, 32


def mesh_1d():
    auto = jax.sharding.AxisType.Auto
    return jax.make_mesh((8,), ("data",), axis_types=(auto,))


def make_params():
    keys = jax.random.split(jax.random.key(0), 3)
    return {
        "embed": jax.random.normal(keys[0], (VOCAB, WIDTH)) / 4,
        "w": jax.random.normal(keys[1], (WIDTH, WIDTH)) / 4,
        "head": jax.random.normal(keys[2], (WIDTH, VOCAB)) / 4,
        "bias": jnp.linspace(-0.5, 0.5, WIDTH),
        "odd": jnp.ones((3, 5)),  # no dimension 8 divides: averaged whole
    }


def loss_fn(p, tokens):
    h = p["embed"][tokens] + p["bias"]
    h = h + jnp.tanh(h @ p["w"]) + jnp.sum(p["odd"]) / 100
    logits = h @ p["head"]
    return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(tokens.size), tokens])


def tokens_for(step):
    return (jnp.arange(BATCH) * (step + 3) + step) % VOCAB


def test_gradients_are_the_whole_batchs_mean_split_like_the_state():
    params, tokens = make_params(), tokens_for(0)
    want_value, want = jax.value_and_grad(loss_fn)(params, tokens)
    mesh = mesh_1d()
    with set_mesh(mesh):
        split = jax.device_put(tokens, jax.NamedSharding(mesh, P("data")))
        fn = jax.jit(data_parallel_value_and_grad(loss_fn))
        value, grads = fn(params, split)
    # Sums in another order: float32 rounding of a 32-term mean, ~1e-7.
    np.testing.assert_allclose(value, want_value, rtol=1e-6)
    for name in params:
        np.testing.assert_allclose(grads[name], want[name], rtol=1e-5, atol=1e-7)
        spec = zero_spec(params[name].shape, P(), ("data",), {"data": 8})
        want_spec = () if spec is None else tuple(spec)
        while want_spec and want_spec[-1] is None:  # as shardings write it
            want_spec = want_spec[:-1]
        assert tuple(grads[name].sharding.spec) == want_spec, name


def _steps(tx, params, mesh, grads_fn, steps=3):
    state = jax.jit(tx.init)(params)

    @jax.jit
    def step(p, s, t):
        grads = grads_fn(p, t)
        updates, s = tx.update(grads, s, p)
        return gradax.apply_updates(p, updates), s

    for i in range(steps):
        tokens = jax.device_put(tokens_for(i), jax.NamedSharding(mesh, P("data")))
        params, state = step(params, state, tokens)
    return params, step.lower(params, state, tokens).compile().as_text()


@pytest.mark.parametrize(
    "make_tx",
    [
        lambda: gradax.adamw(1e-2, weight_decay=0.1),
        lambda: gradax.chain(gradax.clip_by_global_norm(0.5), gradax.adam(1e-2)),
    ],
    ids=["adamw", "clip+adam"],
)
def test_zero1_step_trains_like_the_unsharded_one(make_tx):
    params = make_params()
    want, _ = _steps(make_tx(), params, mesh_1d(), lambda p, t: jax.grad(loss_fn)(p, t))
    mesh = mesh_1d()
    with set_mesh(mesh):
        replicated = jax.device_put(params, jax.NamedSharding(mesh, P()))
        vg = data_parallel_value_and_grad(loss_fn)
        tx = gradax.shard_state(make_tx(), axis="data")
        got, _ = _steps(tx, replicated, mesh, lambda p, t: vg(p, t)[1])
    for name in params:
        # Elementwise updates of gradients summed in another order.
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6)


def _plain_data_parallel(p, t):
    # The usual data-parallel gradient: each device's own, then averaged.
    def local(p, t):
        p = jax.tree.map(lambda x: jax.lax.pcast(x, "data", to="varying"), p)
        return jax.lax.pmean(jax.grad(loss_fn)(p, t), "data")

    return jax.shard_map(local, in_specs=(P(), P("data")), out_specs=P())(p, t)


@pytest.mark.skipif(
    not hasattr(jax.lax, "pcast"), reason="the plain form here uses jax.lax.pcast"
)
def test_zero1_receives_what_plain_data_parallelism_receives():
    mesh = mesh_1d()
    with set_mesh(mesh):
        params = jax.device_put(make_params(), jax.NamedSharding(mesh, P()))
        tx = gradax.adamw(1e-2, weight_decay=0.1)
        _, plain = _steps(tx, params, mesh, _plain_data_parallel, steps=1)
        vg = data_parallel_value_and_grad(loss_fn)
        zero1 = gradax.shard_state(tx, axis="data")
        _, split = _steps(zero1, params, mesh, lambda p, t: vg(p, t)[1], steps=1)
    plain_bytes, split_bytes = collective_bytes(plain, 8), collective_bytes(split, 8)
    assert "reduce-scatter" in split_bytes and "all-gather" in split_bytes
    # What is still all-reduced: the loss and the one leaf 8 divides in no
    # dimension ("odd", 15 floats), not a gradient.
    odd_bytes = 15 * 4 * 2 * 7 / 8
    assert split_bytes.get("all-reduce", 0) <= odd_bytes + 8, split_bytes
    # A reduce-scatter and an all-gather move an all-reduce's bytes.
    total = sum(split_bytes.values())
    assert total <= sum(plain_bytes.values()) * 1.001, (split_bytes, plain_bytes)


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match=r"data_parallel_value_and_grad\(axis=\.\.\.\)"):
        data_parallel_value_and_grad(loss_fn, axis=3)
    with pytest.raises(TypeError, match=r"data_parallel_value_and_grad\(fun=\.\.\.\)"):
        data_parallel_value_and_grad("loss")
    fn = data_parallel_value_and_grad(loss_fn)
    with pytest.raises(ValueError, match="needs a mesh"):
        fn(make_params(), tokens_for(0))
    with set_mesh(mesh_1d()):
        other = data_parallel_value_and_grad(loss_fn, axis="batch")
        with pytest.raises(ValueError, match="no axis 'batch'"):
            other(make_params(), tokens_for(0))


# -- a plain jax.grad on Explicit axes, parameters reduced over "data" -------

REDUCED_AXES = hasattr(P(), "reduced")
needs_reduced_axes = pytest.mark.skipif(
    not REDUCED_AXES,
    reason=f"reduced/unreduced sharding types are not in jax {jax.__version__}",
)


def explicit_mesh():
    explicit = jax.sharding.AxisType.Explicit
    return jax.make_mesh((8,), ("data",), axis_types=(explicit,))


def explicit_loss(p, tokens):
    """`loss_fn` as Explicit axes write it: the embedding's rows split like
    the tokens, and the vectors added to split activations made ordinary
    first (jax refuses a reduced operand beside a split one)."""
    rows = p["embed"].at[tokens].get(out_sharding=P("data"))
    h = rows + reshard(p["bias"], P())
    h = h + jnp.tanh(h @ p["w"]) + jnp.sum(reshard(p["odd"], P())) / 100
    logits = h @ p["head"]
    log_p = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(log_p, tokens[:, None], axis=1))


def _placed(params, mesh, reduced):
    replicated = jax.device_put(params, jax.NamedSharding(mesh, P()))
    return gradax.sharding.reduced_over(replicated) if reduced else replicated


def _hidden_matrices(params):
    return gradax.muon_labels(
        params, "auto", exclude="embed|head|odd", print_report=False
    )[1]


def _plain_grad(p, t):
    return jax.grad(explicit_loss)(p, t)


@needs_reduced_axes
@pytest.mark.parametrize(
    "make_tx",
    [
        lambda: gradax.adamw(1e-2, weight_decay=0.1),
        lambda: gradax.chain(gradax.clip_by_global_norm(0.5), gradax.adam(1e-2)),
        lambda: gradax.muon(0.02, muon_weight_dimension_numbers=_hidden_matrices),
    ],
    ids=["adamw", "clip+adam", "muon"],
)
def test_reduced_parameters_train_like_the_unsharded_step(make_tx):
    """The gradient of a parameter reduced over "data" comes back unreduced
    (each device its batch's part); `shard_state` sums it into the slice it
    updates, and the updates return as the parameters' type."""
    params = make_params()
    want, _ = _steps(make_tx(), params, mesh_1d(), lambda p, t: jax.grad(loss_fn)(p, t))
    mesh = explicit_mesh()
    with set_mesh(mesh):
        tx = gradax.shard_state(make_tx(), axis="data")
        got, _ = _steps(tx, _placed(params, mesh, True), mesh, _plain_grad)
        state = jax.jit(tx.init)(_placed(params, mesh, True))
    for name in params:
        assert jax.typeof(got[name]).sharding.spec.reduced == {"data"}, name
        # Summed in another order (the batch's parts, then across devices).
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6)
    mu = jax.tree.leaves(state)
    split = [x for x in mu if x.ndim and x.sharding.spec and x.sharding.spec[0]]
    assert split, "no state leaf split over data"
    assert all(not x.sharding.spec.reduced for x in mu), "state took the reduced type"


@needs_reduced_axes
@pytest.mark.parametrize("name", ["adamw", "muon"])
def test_reduced_parameters_receive_what_data_parallelism_receives(name):
    """The plain `jax.grad` step on Explicit axes: a reduce-scatter of each
    gradient and an all-gather of each update, data parallelism's bytes
    (its all-reduce), on any backend (the reduce-scatter is in the program,
    not left to the compiler to form). Muon receives less than data
    parallelism: its momenta, split, reach the devices that orthogonalize
    them by an all-to-all."""
    mesh = explicit_mesh()
    if name == "adamw":
        tx = gradax.adamw(1e-2, weight_decay=0.1)
    else:
        tx = gradax.muon(0.02, muon_weight_dimension_numbers=_hidden_matrices)
    with set_mesh(mesh):
        _, plain = _steps(tx, _placed(make_params(), mesh, False), mesh, _plain_grad, 1)
        zero1 = gradax.shard_state(tx, axis="data")
        params = _placed(make_params(), mesh, True)
        _, split = _steps(zero1, params, mesh, _plain_grad, steps=1)
    plain_bytes, split_bytes = collective_bytes(plain, 8), collective_bytes(split, 8)
    assert "reduce-scatter" in split_bytes and "all-gather" in split_bytes
    # Still all-reduced: the loss, and the "odd" and "bias" leaves, made
    # ordinary inside the loss, whose gradients jax sums in the backward
    # pass (15 + 32 floats; an all-reduce moves its bytes twice, 7/8 each).
    small = (15 + 32) * 4 * 7 / 8
    assert split_bytes.get("all-reduce", 0) <= 2 * small + 8, split_bytes
    # Those two then cost a reduce-scatter and an all-gather more (4x
    # small in all); every matrix moves exactly what its all-reduce did.
    total, plain_total = sum(split_bytes.values()), sum(plain_bytes.values())
    if name == "adamw":
        assert total <= plain_total + 4 * small, (split_bytes, plain_bytes)
    else:
        assert total <= plain_total, (split_bytes, plain_bytes)


@needs_reduced_axes
def test_reduced_over_keeps_other_axes_and_refuses_what_it_cannot_reduce():
    explicit = jax.sharding.AxisType.Explicit
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(explicit,) * 2)
    with set_mesh(mesh):
        tp = jax.device_put(jnp.ones((8, 6)), jax.NamedSharding(mesh, P("model")))
        out = gradax.sharding.reduced_over({"w": tp, "b": jnp.ones(6)}, "data")

        def split_and_reduced(spec):  # trailing Nones are written or not
            parts = list(spec.partitions)
            while parts and parts[-1] is None:
                parts.pop()
            return tuple(parts), spec.reduced

        tp_spec = (("model",), {"data"})
        assert split_and_reduced(out["w"].sharding.spec) == tp_spec
        b = out["b"].sharding.spec  # replicated on the mesh: P() or P(None)
        assert b.reduced == {"data"} and not any(b.partitions), b
        inside = jax.jit(gradax.sharding.reduced_over)({"w": tp})
        assert split_and_reduced(jax.typeof(inside["w"]).sharding.spec) == tp_spec
        fsdp = jax.device_put(jnp.ones((8, 6)), jax.NamedSharding(mesh, P("data")))
        with pytest.raises(ValueError, match=r"\['w'\] is split over \['data'\]"):
            gradax.sharding.reduced_over({"w": fsdp}, "data")
    with set_mesh(mesh_1d()):  # Auto axes
        with pytest.raises(ValueError, match="Explicit.*data_parallel_value_and_grad"):
            gradax.sharding.reduced_over({"w": jnp.ones(3)})
    with pytest.raises(TypeError, match=r"reduced_over\(axis=\.\.\.\)"):
        gradax.sharding.reduced_over({"w": jnp.ones(3)}, axis=3)
