"""ZeRO-1 (``gradax.shard_state``): the state split over the data axis.

The registry's entries are checked in test_zero1_registry.py; these check
the layout (which dimension is split, the bytes each device holds), the
Muon family's whole-matrix orthogonalization, control flow, skipped steps,
two processes, and resuming from orbax in a fresh process.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest
import zero1_worker as worker
from jax_versions import axis_type_params, explicit_axes, set_mesh
from subprocess_env import without_device_count

import gradax
from gradax.sharding import zero_spec

P = jax.sharding.PartitionSpec
WORKER = Path(__file__).with_name("zero1_worker.py")
AXIS_TYPES = axis_type_params("Auto", "Explicit")


def mesh_1d(axis_type: str):
    kind = getattr(jax.sharding.AxisType, axis_type)
    return jax.make_mesh((8,), ("data",), axis_types=(kind,))


def bits(tree):
    return [np.asarray(x).tobytes() for x in jax.tree.leaves(tree)]


# -- the layout ----------------------------------------------------------------


def test_zero_spec_splits_the_first_divisible_dimension():
    sizes = {"data": 8, "model": 2}
    assert zero_spec((3, 16, 8), P(), ("data",), sizes) == P(None, "data", None)
    assert zero_spec((3, 5), P(), ("data",), sizes) is None  # stays replicated
    assert zero_spec((), P(), ("data",), sizes) is None  # scalars too
    # An axis already on the dimension counts: 8 / (2 * 8) does not divide.
    assert zero_spec((8, 32), P("model"), ("data",), sizes) == P("model", "data")
    assert zero_spec((16, 4), P("model"), ("data",), sizes) == P(
        ("model", "data"), None
    )
    # Already split over the axis (FSDP parameters): left alone.
    assert zero_spec((16, 4), P(None, "data"), ("data",), sizes) is None
    # Several axes split one dimension together.
    assert zero_spec((4, 32), P(), ("data", "model"), sizes) == P(
        None, ("data", "model")
    )
    assert zero_spec((16,), P(), ("data",), sizes, unconstrained=True) == P("data")
    assert zero_spec((2, 16), P(), ("data",), sizes, unconstrained=True) == P(
        P.UNCONSTRAINED, "data"
    )


@pytest.mark.parametrize("axis_type", AXIS_TYPES)
def test_each_device_holds_an_eighth_of_the_state(axis_type):
    mesh = mesh_1d(axis_type)
    params = {"w": jnp.ones((256, 64)), "b": jnp.zeros(64), "odd": jnp.ones((3, 5))}
    tx = gradax.shard_state(gradax.adamw(1e-3, weight_decay=0.1), axis="data")
    with set_mesh(mesh):
        params = jax.device_put(params, jax.NamedSharding(mesh, P()))
        for state in (tx.init(params), jax.jit(tx.init)(params)):
            per_device, whole = {}, 0
            for leaf in jax.tree.leaves(state):
                whole += leaf.nbytes
                for shard in leaf.addressable_shards:
                    nbytes = per_device.get(shard.device, 0) + shard.data.nbytes
                    per_device[shard.device] = nbytes
            # mu and nu of w and b split 8 ways; the (3, 5) leaf (no dimension
            # divisible by 8) and the int32 count stay whole on each device.
            split = 2 * 4 * (256 * 64 + 64)
            replicated = 2 * 4 * 15 + 4
            assert whole == split + replicated
            assert len(per_device) == 8
            assert set(per_device.values()) == {split // 8 + replicated}
            mu = state[0].mu["w"]
            assert {s.data.shape for s in mu.addressable_shards} == {(32, 64)}
            starts = {s.index[0].start for s in mu.addressable_shards}
            assert starts == set(range(0, 256, 32))
        # A step keeps the layout and gives the updates back whole.
        updates, new = jax.jit(tx.update)(params, state, params)
    for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(new), strict=True):
        assert b.sharding.is_equivalent_to(a.sharding, a.ndim)
    for u in jax.tree.leaves(updates):
        assert u.sharding.is_fully_replicated


@explicit_axes
def test_parameters_sharded_over_another_axis_keep_it():
    explicit = jax.sharding.AxisType.Explicit
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(explicit, explicit))
    params = {"w": jnp.arange(48.0).reshape(8, 6), "v": jnp.linspace(-1, 1, 8)}
    specs = {"w": P(None, "model"), "v": P()}
    grads = jax.tree.map(lambda p: jnp.cos(p), params)
    plain = gradax.adam(0.1)
    expected, _ = jax.jit(plain.update)(grads, plain.init(params), params)
    with set_mesh(mesh):
        shardings = {k: jax.NamedSharding(mesh, s) for k, s in specs.items()}
        p = jax.device_put(params, shardings)
        g = jax.device_put(grads, shardings)
        for axis, mu_specs in (
            ("data", {"w": P("data", "model"), "v": P("data")}),
            (("data", "model"), {"w": P(None, "model"), "v": P(("data", "model"))}),
        ):
            tx = gradax.shard_state(plain, axis=axis)
            state = jax.jit(tx.init)(p)
            updates, state = jax.jit(tx.update)(g, state, p)
            for key, spec in mu_specs.items():
                assert state[0].mu[key].sharding.spec == spec, (axis, key)
                assert updates[key].sharding.is_equivalent_to(
                    shardings[key], updates[key].ndim
                )
            for a, b in zip(
                jax.tree.leaves(expected), jax.tree.leaves(updates), strict=True
            ):
                # Elementwise: a fused multiply-add more or less (1e-7).
                np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-7)
    # With ("data", "model") the (8, 6) moment's first dimension would be
    # split 2 * 8 ways: not a divisor, so the first dimension stays as it
    # was and the leaf keeps only the parameter's sharding (checked above).


def test_bad_arguments_are_named():
    params = {"w": jnp.ones((8, 2))}
    with pytest.raises(ValueError, match=r"shard_state\(axis='data'\) needs a mesh"):
        gradax.shard_state(gradax.adam(0.1)).init(params)
    with set_mesh(mesh_1d("Explicit")):
        with pytest.raises(ValueError, match=r"axis='batch'.*no axis 'batch'"):
            gradax.shard_state(gradax.adam(0.1), axis="batch").init(params)
    # What needs no mesh is refused at construction, where it was written.
    for axis in (3, (), ("data", 3)):
        with pytest.raises(TypeError, match=r"shard_state\(axis=\.\.\.\) must be"):
            gradax.shard_state(gradax.adam(0.1), axis=axis)
    with pytest.raises(TypeError, match=r"shard_state\(tx=\.\.\.\)"):
        gradax.shard_state(3)
    with pytest.raises(ValueError, match=r"axis='batch'.*no axis 'batch'"):
        gradax.shard_state(gradax.adam(0.1), axis="batch", mesh=mesh_1d("Explicit"))
    with pytest.raises(TypeError, match=r"shard_state\(mesh=\.\.\.\) must be"):
        gradax.shard_state(gradax.adam(0.1), mesh="data")


# -- the Muon family -----------------------------------------------------------

COLLECTIVES = (
    "all-gather",
    "reduce-scatter",
    "all-reduce",
    "collective-permute",
    "all-to-all",
)


def count_collectives(compiled) -> dict[str, int]:
    text = compiled.as_text()
    return {
        op: len(re.findall(rf"= [^=]*? {op}(?:-start)?\(", text)) for op in COLLECTIVES
    }


@pytest.mark.parametrize("axis_type", AXIS_TYPES)
def test_muon_orthogonalizes_whole_matrices_where_their_state_is(axis_type):
    mesh = mesh_1d(axis_type)
    keys = jax.random.split(jax.random.key(0), 3)
    params = {
        "layers": jax.random.normal(keys[0], (8, 16, 32)) / 4,  # a stack of 8
        "w": jax.random.normal(keys[1], (32, 16)) / 4,
        "b": jnp.zeros(16),
    }
    grads = jax.tree.map(lambda p: jnp.sin(3 * p) + 0.1, params)

    def build(ns_steps):
        return gradax.muon(
            0.02,
            ns_steps=ns_steps,
            weight_decay=0.01,
            muon_weight_dimension_numbers="auto",
        )

    expected = jax.jit(lambda g, p: build(5).update(g, build(5).init(p), p)[0])(
        grads, params
    )
    counts = {}
    with set_mesh(mesh):
        replicated = jax.NamedSharding(mesh, P())
        p = jax.device_put(params, replicated)
        g = jax.device_put(grads, replicated)
        for ns_steps in (5, 10):
            tx = gradax.shard_state(build(ns_steps))
            state = jax.jit(tx.init)(p)
            step = jax.jit(tx.update)
            counts[ns_steps] = count_collectives(step.lower(g, state, p).compile())
            updates, new = step(g, state, p)
            if ns_steps == 5:
                got = updates
            mu = new.inner_states["muon"].inner_state[0].mu["layers"]
            # Each device holds whole matrices of the stack's momentum.
            assert {s.data.shape for s in mu.addressable_shards} == {(1, 16, 32)}
    # No collective inside the iteration: twice the steps, the same ones.
    assert counts[5] == counts[10], counts
    for a, b in zip(jax.tree.leaves(expected), jax.tree.leaves(got), strict=True):
        # Newton-Schulz amplifies a rounding difference (see the conformance
        # suite's matrix_function_atol): 1e-4 of the update's largest entry.
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-4 * float(jnp.abs(a).max()))


# -- control flow and skipped steps ---------------------------------------------


@pytest.mark.parametrize("axis_type", AXIS_TYPES)
def test_state_types_are_stable_under_control_flow(axis_type):
    mesh = mesh_1d(axis_type)
    params = {"w": jnp.ones((16, 4)), "b": jnp.zeros(8), "s": jnp.asarray(1.0)}
    tx = gradax.shard_state(
        gradax.chain(gradax.clip_by_global_norm(1.0), gradax.adamw(1e-2)), axis="data"
    )

    def step(s, p):
        return tx.update(jax.tree.map(jnp.cos, p), s, p)[1]

    def every_use(s, p):
        s = jax.lax.cond(p["s"] > 0, step, lambda s, p: s, s, p)
        s = jax.lax.while_loop(
            lambda c: c[0] < 2, lambda c: (c[0] + 1, step(c[1], p)), (0, s)
        )[1]
        return jax.lax.scan(lambda c, _: (step(c, p), None), s, length=2)[0]

    with set_mesh(mesh):
        p = jax.device_put(params, jax.NamedSharding(mesh, P()))
        state = jax.jit(tx.init)(p)
        # cond, while_loop and scan refuse a state whose types (under
        # Explicit axes, shardings included) change: tracing them is the test.
        traced = jax.jit(every_use).trace(state, p)
        out = jax.eval_shape(every_use, state, p)
    want = jax.tree.map(lambda x: (x.shape, x.dtype, x.weak_type), state)
    assert jax.tree.map(lambda x: (x.shape, x.dtype, x.weak_type), out) == want
    if axis_type == "Explicit":
        specs = jax.tree.map(lambda x: x.sharding.spec, out)
        assert specs == jax.tree.map(lambda x: jax.typeof(x).sharding.spec, state)
    assert traced is not None


@pytest.mark.parametrize("axis_type", AXIS_TYPES)
def test_a_non_finite_step_is_skipped_without_touching_the_state(axis_type):
    mesh = mesh_1d(axis_type)
    params = {"w": jnp.linspace(-1.0, 1.0, 64).reshape(16, 4), "b": jnp.ones(8)}
    inner = gradax.adamw(1e-2, weight_decay=0.1)
    txs = {
        "inside": gradax.shard_state(gradax.apply_if_finite(inner, 2)),
        "outside": gradax.apply_if_finite(gradax.shard_state(inner), 2),
    }
    with set_mesh(mesh):
        p = jax.device_put(params, jax.NamedSharding(mesh, P()))
        good = jax.tree.map(jnp.cos, p)
        bad = {"w": good["w"].at[3, 1].set(jnp.nan), "b": good["b"]}
        for name, tx in txs.items():
            step = jax.jit(tx.update)
            _, state = step(good, jax.jit(tx.init)(p), p)
            updates, skipped = step(bad, state, p)
            assert all(not np.asarray(u).any() for u in jax.tree.leaves(updates)), name
            assert int(skipped.notfinite_count) == 1, name
            assert bits(skipped.inner_state) == bits(state.inner_state), name
            # Still split after the skip.
            mu = skipped.inner_state[0].mu["w"]
            assert {s.data.shape for s in mu.addressable_shards} == {(2, 4)}, name


# -- two processes, and resuming in a fresh one --------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _processes(num_processes: int, out: Path) -> None:
    port = str(_free_port())
    env = without_device_count()
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), "multihost"]
            + [str(i), str(num_processes), port, str(out)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(num_processes)
    ]
    for proc in procs:
        output, _ = proc.communicate(timeout=240)
        assert proc.returncode == 0, output[-3000:]


def test_two_processes_train_like_one(tmp_path):
    single, multi = tmp_path / "single.npz", tmp_path / "multi.npz"
    _processes(1, single)
    _processes(2, multi)
    a, b = np.load(single), np.load(multi)
    assert set(a.files) == set(b.files) and "shard_rows" in a.files
    for name in sorted(set(a.files) - {"shard_rows"}):
        scale = float(np.abs(a[name]).max())
        # Not bit for bit: gloo's all-reduce (where the compiler splits the
        # gradients' batch sum) adds in another order than the in-process
        # one, ~1e-7 relative a step, which Newton-Schulz may grow (see the
        # conformance suite's matrix_function_atol). Seen over five steps:
        # 8e-7 of a leaf's largest entry; allowed 1e-5.
        np.testing.assert_allclose(
            b[name], a[name], rtol=0, atol=1e-5 * scale, err_msg=name
        )
    # Each device held an eighth of the stack's momentum: one whole matrix
    # (each process four, in the two-process run).
    assert list(a["shard_rows"]) == [1] * 8
    assert list(b["shard_rows"]) == [1] * 4
    moved = a["['params']['w1']"] - worker.initial_params()["w1"]
    assert np.abs(moved).max() > 1e-3


@explicit_axes
def test_resume_in_a_fresh_process_is_bit_identical(tmp_path):
    mesh = mesh_1d("Explicit")
    with set_mesh(mesh):
        params, state = worker.start(mesh)
        step = jax.jit(worker.step)
        for i in range(worker.STEPS_BEFORE):
            params, state = step(params, state, np.int32(i))
        checkpointer = ocp.StandardCheckpointer()
        checkpointer.save(tmp_path / "checkpoint", {"params": params, "state": state})
        checkpointer.wait_until_finished()
        for i in range(worker.STEPS_BEFORE, worker.STEPS_BEFORE + worker.STEPS_AFTER):
            params, state = step(params, state, np.int32(i))
    result = tmp_path / "resumed.npz"
    done = subprocess.run(
        [sys.executable, str(WORKER), "resume", str(tmp_path / "checkpoint")]
        + [str(result)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    resumed = np.load(result)
    expected = worker.flat({"params": params, "state": state})
    assert set(resumed.files) == set(expected)
    for name, value in expected.items():
        assert resumed[name].tobytes() == value.tobytes(), name
