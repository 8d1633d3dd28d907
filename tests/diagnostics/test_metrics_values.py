"""The metrics with_metrics records equal the same numbers computed in NumPy.

Three watched optimizers run five steps in one program: Muon's two groups
behind a clip of the raw gradients, with scheduled learning rates (the clip
fires at one step); AdamW behind `apply_if_finite`, given a NaN at one step;
SGD behind `skip_loss_spikes`, given a spike at one step. The program returns
what each step was given (gradients, parameters) and what it returned
(updates, metrics); NumPy then computes every metric from those arrays, in
float64, following docs/metrics.md. The same program runs under `jit`, on
parameters sharded over a mesh, under `shard_map` (replicated, as data
parallelism keeps them) and under `pmap`: four compiled programs in all.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax_versions import P, needs_jax, set_mesh, shard_map

import gradax

STEPS = 5
CLIP = 3.0
NAN_STEP = 2  # apply_if_finite gets a NaN gradient here
SPIKE_STEP = 3  # skip_loss_spikes gets a loss far above the others here
LOSSES = (1.0, 1.1, 0.9, 50.0, 1.0)

MDN = gradax.MuonDimensionNumbers
ROUTING = {"w": MDN(), "v": MDN(), "b": None, "s": None}
GROUPS = {"w": "muon", "v": "muon", "b": "adam", "s": "adam"}


def muon_lr(t):
    return 0.05 + (0.01 - 0.05) * min(t, 4) / 4  # linear_schedule(0.05, 0.01, 4)


def adam_lr(t):
    return 0.01 * 0.5 * (1 + math.cos(math.pi * min(t, 4) / 4))  # cosine_decay


def optimizers():
    return {
        "muon": gradax.with_metrics(
            gradax.chain(
                gradax.clip_by_global_norm(CLIP),
                gradax.muon(
                    gradax.linear_schedule(0.05, 0.01, 4),
                    adam_learning_rate=gradax.cosine_decay_schedule(0.01, 4),
                    muon_weight_dimension_numbers=ROUTING,
                ),
            )
        ),
        "finite": gradax.with_metrics(
            gradax.apply_if_finite(gradax.adamw(0.01), max_consecutive_errors=1)
        ),
        "spikes": gradax.with_metrics(
            gradax.skip_loss_spikes(gradax.sgd(0.1), warmup_steps=2, threshold=1.0)
        ),
    }


def initial_params():
    rng = np.random.default_rng(0)
    shapes = {"w": (8, 4), "v": (4, 8), "b": (8,), "s": ()}
    return {
        k: jnp.asarray(rng.standard_normal(s), jnp.float32) for k, s in shapes.items()
    }


def gradients(params, t):
    # Large at step 1, so the clip fires there and not elsewhere.
    scale = jnp.where(t == 1, 4.0, 0.2)
    return jax.tree.map(lambda p: scale * (p - 0.5 * jnp.cos(p + t)), params)


def run(params):
    """Five steps of each optimizer: what each step was given and returned."""
    out = {}
    for name, tx in optimizers().items():

        def step(carry, t, tx=tx, name=name):
            p, state = carry
            g = gradients(p, t.astype(jnp.float32))
            if name == "finite":
                g = jax.tree.map(lambda x: jnp.where(t == NAN_STEP, jnp.nan, x), g)
            extra = {}
            if name == "spikes":
                extra["value"] = jnp.asarray(LOSSES)[t]
            u, state = tx.update(g, state, p, **extra)
            return (gradax.apply_updates(p, u), state), (p, g, u, gradax.metrics(state))

        _, out[name] = jax.lax.scan(step, (params, tx.init(params)), jnp.arange(STEPS))
    return out


def _norms(expected, prefix, g, u, p):
    square = [
        sum(float(np.sum(np.square(x[k].astype(np.float64)))) for k in x)
        for x in (g, u, p)
    ]
    n = sum(np.size(g[k]) for k in g)
    gs, us, ps = square
    expected[f"{prefix}grad_norm"] = math.sqrt(gs)
    expected[f"{prefix}update_norm"] = math.sqrt(us)
    expected[f"{prefix}update_rms"] = math.sqrt(us / n)
    expected[f"{prefix}param_norm"] = math.sqrt(ps)
    expected[f"{prefix}update_param_ratio"] = math.sqrt(us / ps)


def expected_metrics(name, t, p, g, u):
    """docs/metrics.md's formulas, in float64, from one step's arrays."""
    out = {}
    _norms(out, "", g, u, p)
    if name == "muon":
        for group in ("muon", "adam"):
            keys = [k for k in GROUPS if GROUPS[k] == group]
            sub = [{k: x[k] for k in keys} for x in (g, u, p)]
            _norms(out, f"{group}/", *sub)
        out["muon/lr"], out["adam/lr"] = muon_lr(t), adam_lr(t)
        fired = out["grad_norm"] >= CLIP
        out["clip/fired"] = float(fired)
        out["clip/factor"] = CLIP / out["grad_norm"] if fired else 1.0
    elif name == "finite":
        out["lr"] = 0.01
        out["skipped"] = float(t == NAN_STEP)
        out["skipped_nonfinite"] = float(t >= NAN_STEP)
    else:
        out["lr"] = 0.1
        out["skipped"] = float(t == SPIKE_STEP)
        out["skipped_spikes"] = float(t >= SPIKE_STEP)
    return out


def check(results, where):
    for name, (ps, gs, us, ms) in results.items():
        for t in range(STEPS):
            p, g, u = ({k: np.asarray(x[k][t]) for k in x} for x in (ps, gs, us))
            want = expected_metrics(name, t, p, g, u)
            got = {k: float(v[t]) for k, v in ms.items()}
            assert set(got) == set(want), (where, name, sorted(got), sorted(want))
            for key, value in want.items():
                # float32 sums of at most 32 squares, square roots and a
                # division: a few float32 roundings, ~1e-6 relative.
                np.testing.assert_allclose(
                    got[key],
                    value,
                    rtol=2e-6,
                    atol=0,
                    err_msg=f"{where}: {name} step {t} {key}",
                )
    # The events the metrics must show did happen.
    muon = {k: np.asarray(v) for k, v in results["muon"][3].items()}
    assert muon["clip/fired"].tolist() == [0, 1, 0, 0, 0], where
    assert np.all(np.asarray(results["finite"][2]["w"][NAN_STEP]) == 0), where
    assert np.all(np.asarray(results["spikes"][2]["w"][SPIKE_STEP]) == 0), where


@pytest.fixture(scope="module")
def under_jit():
    return jax.device_get(jax.jit(run)(initial_params()))


def test_under_jit_equal_numpy(under_jit):
    check(under_jit, "jit")


def test_on_sharded_parameters_equal_numpy_and_are_replicated(under_jit):
    mesh = jax.make_mesh(
        (4, 2), ("a", "b"), axis_types=(jax.sharding.AxisType.Auto,) * 2
    )
    specs = {"w": P("a", "b"), "v": P(None, "a"), "b": P("a"), "s": P()}
    with set_mesh(mesh):
        params = {
            k: jax.device_put(v, jax.NamedSharding(mesh, specs[k]))
            for k, v in initial_params().items()
        }
        results = jax.jit(run)(params)
    # The metrics are whole-tree numbers: every device holds them all.
    for value in jax.tree.leaves(results["muon"][3]):
        assert value.sharding.is_fully_replicated
    check(jax.device_get(results), "sharded")


# jax 0.5's experimental shard_map (check_rep) refuses a scan whose initial
# carry holds constants (the fresh state's counts: replication None) and whose
# carry out is replicated ({'data'}), though both are replicated; jax.shard_map
# (check_vma) types them alike.
@needs_jax((0, 6, 1), "scan under shard_map with a fresh state in its carry")
def test_under_shard_map_equal_numpy():
    mesh = jax.make_mesh((8,), ("data",))
    mapped = shard_map(run, mesh=mesh, in_specs=P(), out_specs=P())
    check(jax.device_get(jax.jit(mapped)(initial_params())), "shard_map")


def test_under_pmap_equal_numpy():
    params = jax.tree.map(lambda x: jnp.stack([x, x]), initial_params())
    results = jax.pmap(run)(params)
    for device in range(2):
        check(jax.device_get(jax.tree.map(lambda x, d=device: x[d], results)), "pmap")


def test_each_leaf_summed_alone_equals_numpy(monkeypatch):
    # The formulation for backends that fuse reductions (XLA:TPU): every leaf
    # summed by itself, no barrier. CI has only XLA:CPU, so it is forced here.
    from gradax.diagnostics import _measures

    def fresh(params):  # a new function: no trace of `run` cached before
        return run(params)

    joined = str(jax.make_jaxpr(fresh)(initial_params()))
    monkeypatch.setattr(_measures, "JOIN_SMALL_LEAVES", False)
    alone = str(jax.make_jaxpr(lambda params: run(params))(initial_params()))
    assert "optimization_barrier" in joined
    assert "optimization_barrier" not in alone
    check(jax.device_get(jax.jit(lambda p: run(p))(initial_params())), "alone")
