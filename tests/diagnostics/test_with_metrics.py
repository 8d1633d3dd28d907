"""with_metrics: the inner transformation untouched, the state readable
everywhere, the groups, the wrappers it sees through, and its errors.

Most checks run eagerly on a tiny tree (no compiled program); the numbers
against NumPy are in test_metrics_values.py.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest
from jax_versions import needs_jax

import gradax

PARAMS = {"w": jnp.arange(12.0).reshape(4, 3) / 10, "b": jnp.ones(3)}
GRADS = jax.tree.map(lambda p: 0.5 - p, PARAMS)
MDN = gradax.MuonDimensionNumbers
ROUTING = {"w": MDN(), "b": None}


def steps(tx, n=2, params=PARAMS, **extra):
    state = tx.init(params)
    for _ in range(n):
        updates, state = tx.update(GRADS, state, params, **extra)
    return updates, state


def assert_same_bits(a, b):
    leaves_a, leaves_b = jax.tree.leaves(a), jax.tree.leaves(b)
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(leaves_a, leaves_b, strict=True):
        assert x.dtype == y.dtype and np.asarray(x).tobytes() == np.asarray(y).tobytes()


@pytest.mark.parametrize(
    "make",
    [
        lambda: gradax.adamw(0.1, weight_decay=0.1),
        lambda: gradax.muon(0.02, muon_weight_dimension_numbers=ROUTING),
    ],
    ids=["adamw", "muon"],
)
def test_updates_and_inner_state_are_the_inner_transformations(make):
    plain_updates, plain_state = steps(make())
    updates, state = steps(gradax.with_metrics(make(), extras=("leaf_norms",)))
    assert isinstance(state, gradax.MetricsState)
    assert_same_bits(updates, plain_updates)
    assert_same_bits(state.inner_state, plain_state)
    # The metrics are float32 scalars, as init made them.
    init = gradax.with_metrics(make(), extras=("leaf_norms",)).init(PARAMS)
    assert jax.tree.structure(init.metrics) == jax.tree.structure(state.metrics)
    for value in jax.tree.leaves(state.metrics):
        assert value.shape == () and value.dtype == jnp.float32


def test_metrics_found_in_any_tree_after_device_get_and_orbax(tmp_path):
    tx = gradax.with_metrics(gradax.adam(0.1))
    _, state = steps(tx)
    want = {k: float(v) for k, v in gradax.metrics(state).items()}
    assert {"grad_norm", "lr", "update_rms"} <= set(want)
    train_state = {"step": 2, "opt": (state,), "params": PARAMS}
    on_host = jax.device_get(train_state)
    assert {k: float(v) for k, v in gradax.metrics(on_host).items()} == want
    # Restored without a target: NamedTuples come back as dicts.
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(tmp_path / "c", train_state)
    checkpointer.wait_until_finished()
    restored = checkpointer.restore(tmp_path / "c")
    assert not isinstance(restored["opt"][0], gradax.MetricsState)
    assert {k: float(v) for k, v in gradax.metrics(restored).items()} == want
    with pytest.raises(ValueError, match="no MetricsState"):
        gradax.metrics({"opt": steps(gradax.adam(0.1))[1]})


def test_two_wrappers_with_prefixes_and_a_clash():
    inner = gradax.with_metrics(gradax.sgd(0.1), prefix="inner")
    _, state = steps(gradax.with_metrics(inner))
    names = gradax.metrics(state)
    assert names["grad_norm"] == names["inner/grad_norm"]
    assert float(names["inner/lr"]) == pytest.approx(0.1)
    _, state = steps(gradax.with_metrics(gradax.with_metrics(gradax.sgd(0.1))))
    with pytest.raises(ValueError, match="different prefix"):
        gradax.metrics(state)


def test_group_labels():
    muon = gradax.muon(0.02, muon_weight_dimension_numbers=ROUTING)
    assert gradax.group_labels(muon, PARAMS) == {"w": "muon", "b": "adam"}
    # Through a chain, with labels that are a prefix of the tree or computed.
    nested = {"enc": PARAMS, "dec": PARAMS}
    split = gradax.partition(
        {1: gradax.sgd(0.1), 2: gradax.adam(0.1)}, {"enc": 1, "dec": 2}
    )
    tx = gradax.chain(gradax.clip_by_global_norm(1.0), split)
    labels = gradax.group_labels(tx, nested)
    assert labels == {"enc": {"w": "1", "b": "1"}, "dec": {"w": "2", "b": "2"}}
    by_rank = gradax.partition(
        {"m": gradax.sgd(0.1), "v": gradax.sgd(0.2)},
        lambda p: jax.tree.map(lambda x: "m" if x.ndim == 2 else "v", p),
    )
    assert gradax.group_labels(by_rank, PARAMS) == {"w": "m", "b": "v"}
    assert gradax.group_labels(gradax.adamw(0.1), PARAMS) is None
    # A partition inside a flattening wrapper labels a vector, not the params.
    assert gradax.group_labels(gradax.flatten(by_rank), PARAMS) is None


def test_muon_groups_learning_rates_and_extras():
    schedule = gradax.linear_schedule(0.02, 0.0, 10)
    tx = gradax.with_metrics(
        gradax.muon(
            schedule, adam_learning_rate=0.003, muon_weight_dimension_numbers=ROUTING
        ),
        extras=("leaf_norms", "orthogonality"),
    )
    _, state = steps(tx, n=3)
    m = gradax.metrics(state)
    # The third step used the schedule's value at count 2.
    assert float(m["muon/lr"]) == pytest.approx(0.02 * 0.8)
    assert float(m["adam/lr"]) == pytest.approx(0.003)
    assert float(m["leaf/w/grad_norm"]) == pytest.approx(float(m["muon/grad_norm"]))
    assert float(m["leaf/b/update_norm"]) == pytest.approx(float(m["adam/update_norm"]))
    # A rank-one momentum: Newton–Schulz leaves two of three singular values
    # far from one.
    assert 0.3 < float(m["muon/ns_residual"]) < 1.5


def test_max_logits_per_head():
    tx = gradax.with_metrics(
        gradax.sgd(0.1), extras="max_logits", max_logits_shape=(3,)
    )
    state = tx.init(PARAMS)
    _, state = tx.update(GRADS, state, PARAMS, max_logits=jnp.array([1.0, 7.0, 2.0]))
    m = gradax.metrics(state)
    assert [float(m[f"attention/head_max_logit/{h}"]) for h in range(3)] == [1, 7, 2]
    assert float(m["attention/max_logit"]) == 7.0
    with pytest.raises(TypeError, match="max_logits="):
        tx.update(GRADS, state, PARAMS)
    with pytest.raises(ValueError, match="shape"):
        tx.update(GRADS, state, PARAMS, max_logits=jnp.ones(4))


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="extras"):
        gradax.with_metrics(gradax.sgd(0.1), extras=("grad_norms",))
    with pytest.raises(ValueError, match="max_logits_shape"):
        gradax.with_metrics(gradax.sgd(0.1), extras=("max_logits",))
    with pytest.raises(ValueError, match="max_logits_shape"):
        gradax.with_metrics(gradax.sgd(0.1), extras="max_logits", max_logits_shape=(0,))
    with pytest.raises(ValueError, match="Newton"):
        gradax.with_metrics(gradax.adam(0.1), extras=("orthogonality",)).init(PARAMS)


def _wrapped(name):
    # optax's own: the injected learning rate and apply_if_finite's counter.
    # gradax's: state in host memory, accumulation, 16-bit parameters.
    if name == "optax inject":
        return optax.inject_hyperparams(optax.adam)(learning_rate=0.02), {"lr": 0.02}
    if name == "optax finite":
        guarded = optax.apply_if_finite(optax.sgd(0.1), 3)
        return guarded, {"skipped_nonfinite": 0.0, "skipped": 0.0}
    if name == "offload":
        inner = gradax.offload_state(gradax.adam(gradax.constant_schedule(0.03)))
        return inner, {"lr": 0.03}
    return gradax.MultiSteps(gradax.adam(0.04), 2), {"lr": 0.04}


@pytest.mark.parametrize(
    "name",
    [
        "optax inject",
        "optax finite",
        pytest.param(
            "offload", marks=needs_jax((0, 10, 2), "host offload on the CPU backend")
        ),
        "MultiSteps",
    ],
)
def test_wrappers_it_sees_through(name):
    inner, want = _wrapped(name)
    _, state = steps(gradax.with_metrics(inner))
    m = gradax.metrics(state)
    for key, value in want.items():
        assert float(m[key]) == pytest.approx(value), (name, key)


def test_master_weights_keep_their_float32_updates():
    params = jax.tree.map(lambda p: p.astype(jnp.bfloat16), PARAMS)
    tx = gradax.with_metrics(gradax.master_weights(gradax.adam(0.1)))
    state = tx.init(params)
    grads = jax.tree.map(lambda p: p.astype(jnp.bfloat16), GRADS)
    updates, state = tx.update(grads, state, params)
    plain = gradax.master_weights(gradax.adam(0.1))
    want, _ = plain.update(grads, plain.init(params), params)
    assert_same_bits(updates, want)
    assert updates["w"].dtype == jnp.float32


def test_without_params_the_parameter_metrics_are_nan():
    tx = gradax.with_metrics(gradax.sgd(0.1))
    _, state = tx.update(GRADS, tx.init(PARAMS))
    m = gradax.metrics(state)
    assert np.isnan(m["param_norm"]) and np.isnan(m["update_param_ratio"])
    assert float(m["grad_norm"]) > 0


def test_carry_state_adds_and_drops_the_wrapper():
    _, plain = steps(gradax.adam(0.1))
    watched = gradax.with_metrics(gradax.adam(0.1))
    carried, report = gradax.tree.carry_state(plain, watched, PARAMS, strict=True)
    assert_same_bits(carried.inner_state, plain)
    # Dropping the wrapper drops only the last step's metrics: strict passes,
    # and the report names them and says why they are no loss.
    back, report = gradax.tree.carry_state(
        carried, gradax.adam(0.1), PARAMS, strict=True
    )
    assert_same_bits(back, plain)
    dropped = [line for line in str(report).splitlines() if line.startswith("dropped")]
    assert dropped and all(".metrics[" in line for line in dropped)
    assert all("not training progress" in line for line in dropped)


def test_strict_still_refuses_a_lost_moment_beside_dropped_metrics():
    watched = gradax.with_metrics(gradax.adam(0.1))
    _, state = steps(watched)
    with pytest.raises(ValueError, match=r"nu\['w'\]"):
        # Lion keeps no second moment: Adam's is training progress, lost.
        gradax.tree.carry_state(state, gradax.lion(0.1), PARAMS, strict=True)


def test_map_params_maps_the_inner_state():
    tx = gradax.with_metrics(gradax.adam(0.1))
    state = tx.init(PARAMS)
    shapes = gradax.tree.map_params(tx, lambda p: p.shape, state)
    assert shapes.inner_state[0].mu == {"w": (4, 3), "b": (3,)}
    assert shapes.metrics == state.metrics


def test_the_guide_code_runs():
    page = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
    blocks = re.findall(r"^```python\n(.*?)^```$", page.read_text(), re.S | re.M)
    assert blocks
    namespace: dict = {"__name__": "metrics_guide"}
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        for i, block in enumerate(blocks):
            exec(compile(block, f"docs/metrics.md block {i}", "exec"), namespace)
    assert "muon/update_rms" in printed.getvalue()


def test_large_and_small_leaves_of_each_group_are_all_counted():
    # A leaf above 16,384 elements is reduced by itself, the small ones of a
    # group together (gradax/diagnostics/_measures.py, square_sums).
    rng = np.random.default_rng(0)
    params = {
        "big": rng.standard_normal((160, 128)).astype(np.float32),
        "small": rng.standard_normal((16, 16)).astype(np.float32),
        "bias": rng.standard_normal(16).astype(np.float32),
        "other": rng.standard_normal((40, 500)).astype(np.float32),
    }
    labels = {"big": "x", "small": "x", "bias": "y", "other": "y"}
    tx = gradax.with_metrics(
        gradax.partition({"x": gradax.sgd(0.1), "y": gradax.sgd(0.2)}, labels)
    )
    _, state = tx.update(params, tx.init(params), params)
    m = gradax.metrics(state)
    for group, keys in (
        ("x", ["big", "small"]),
        ("y", ["bias", "other"]),
        ("", list(params)),
    ):
        want = np.sqrt(sum(np.sum(params[k].astype(np.float64) ** 2) for k in keys))
        name = f"{group}/grad_norm" if group else "grad_norm"
        # float32 sums of up to 20,480 squares: their rounding grows like
        # sqrt(n) * 2**-24 (about 1e-5 here), above the 1e-7 of a single
        # rounding and 20 times below what leaving out the smallest leaf
        # would change (the bias: 4e-4 of its group's norm).
        np.testing.assert_allclose(float(m[name]), want, rtol=2e-5)
        np.testing.assert_allclose(
            float(m[name.replace("grad", "param")]), want, rtol=2e-5
        )
