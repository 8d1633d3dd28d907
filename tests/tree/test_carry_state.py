"""gradax.tree.carry_state: a configuration change keeps the optimizer state.

Each change runs in both directions, with optax's transformations (which have
the target layouts) and with gradax's. The key check: after carrying, the next
steps of the new transformation equal those of a run that had the new
transformation from the start, with the carried values put in its state by
hand (``_reference``). Both runs make the same operations on the same numbers,
so they are compared for equality.
"""

from __future__ import annotations

import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest

import gradax
from gradax.tree import carry_state

LIBS = [pytest.param(optax, id="optax"), pytest.param(gradax, id="gradax")]
ADAM_FIELDS = ("count", "mu['b']", "mu['w']", "nu['b']", "nu['w']")
HYPERPARAMS = {
    f".hyperparams['{name}']"
    for name in ("b1", "b2", "eps", "eps_root", "learning_rate")
}
TRAINED = 4  # steps the old state has seen: its moments and counts are not init's


def _params(shape_w=(2, 3)):
    w = jnp.arange(np.prod(shape_w), dtype=jnp.float32).reshape(shape_w) / 7 - 0.4
    return {"w": w, "b": jnp.linspace(-1.0, 1.0, 3, dtype=jnp.float32)}


def _grads(params, step):
    # Different at every step, and never zero.
    return jax.tree.map(lambda p: jnp.cos(p * (step + 1.0)) + 0.1 * step, params)


def _run(tx, params, state, steps, start):
    """The updates of ``steps`` steps from ``state``, and the final state."""

    @jax.jit
    def step(params, state, i):
        updates, state = tx.update(_grads(params, i), state, params)
        return optax.apply_updates(params, updates), state, updates

    updates = []
    for i in range(start, start + steps):
        params, state, u = step(params, state, jnp.float32(i))
        updates.append(u)
    return updates, state


def _trained(tx, params):
    _, state = _run(tx, params, tx.init(params), TRAINED, 0)
    return state


def _by_path(tree):
    return {
        jax.tree_util.keystr(path): leaf
        for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]
    }


def _reference(tx, params, old_state, mapping):
    """``tx.init(params)``, the leaves ``mapping`` names taken from ``old_state``."""
    old = _by_path(old_state)
    return jax.tree_util.tree_map_with_path(
        lambda path, leaf: (
            old[mapping[k]] if (k := jax.tree_util.keystr(path)) in mapping else leaf
        ),
        tx.init(params),
    )


def _assert_equal(a, b, maxulp: int = 0):
    """Same trees, shapes and dtypes; the numbers bit for bit, or to within
    `maxulp` float ulps where the caller says why."""
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        assert x.shape == y.shape and x.dtype == y.dtype
        if maxulp:
            np.testing.assert_array_max_ulp(np.asarray(x), np.asarray(y), maxulp)
        else:
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def _adam(new_prefix, old_prefix):
    return {f"{new_prefix}.{f}": f"{old_prefix}.{f}" for f in ADAM_FIELDS}


def _check(old_tx, new_tx, carried, filled=(), dropped=(), replaced=(), params=None):
    """Carries a trained state of ``old_tx`` to ``new_tx``; checks the report and
    that the next 3 steps equal those from the reference state."""
    params = _params() if params is None else params
    old_state = _trained(old_tx, params)
    new_state, report = carry_state(old_state, new_tx, params)
    assert {new: old for new, old, _ in report.carried} == carried, str(report)
    assert {new for new, _ in report.filled} == set(filled), str(report)
    assert {old for old, _ in report.dropped} == set(dropped), str(report)
    assert set(report.replaced) == set(replaced), str(report)
    assert not report.ambiguous
    reference = _reference(new_tx, params, old_state, carried)
    _assert_equal(new_state, reference)
    _assert_equal(
        _run(new_tx, params, new_state, 3, TRAINED),
        _run(new_tx, params, reference, 3, TRAINED),
    )
    return old_state, new_state, report


# ---------------------------------------------------------------------------
# Each configuration change, both ways.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("lib", LIBS)
def test_constant_learning_rate_becomes_a_schedule_and_back(lib):
    constant = lib.adam(1e-3)
    scheduled = lib.adam(lib.linear_schedule(1e-3, 1e-4, 20))
    # The schedule's new count takes Adam's: the schedule resumes at step 4.
    _check(constant, scheduled, _adam("[0]", "[0]") | {"[1].count": "[0].count"})
    _check(scheduled, constant, _adam("[0]", "[0]"), dropped={"[1].count"})


@pytest.mark.parametrize("lib", LIBS)
def test_adding_and_removing_a_clip(lib):
    adam = lib.adam(1e-3)
    # A clip that never triggers: the carried run continues the old run. To
    # within 8 float32 ulps, not bit for bit: the two runs are different
    # programs, and XLA:CPU contracts Adam's multiply-adds into FMAs in one
    # and not the other. A moment may then differ by an ulp each step, which
    # the square root and the division carry into the update, and the next
    # gradients read the parameters (jaxlib 0.12.1 at its default
    # optimization: 3 ulps, for optax and gradax alike).
    clipped = lib.chain(lib.clip_by_global_norm(1e6), lib.adam(1e-3))
    params = _params()
    for old_tx, new_tx, carried in [
        (adam, clipped, _adam("[1][0]", "[0]")),
        (clipped, adam, _adam("[0]", "[1][0]")),
    ]:
        old_state, new_state, _ = _check(old_tx, new_tx, carried)
        continued, _ = _run(old_tx, params, old_state, 3, TRAINED)
        carried_run, _ = _run(new_tx, params, new_state, 3, TRAINED)
        _assert_equal(carried_run, continued, maxulp=8)


@pytest.mark.parametrize("lib", LIBS)
def test_adamw_with_a_clip_has_two_empty_states_and_carries(lib):
    adamw = lib.adamw(1e-3, weight_decay=1e-2)
    clipped = lib.chain(
        lib.clip_by_global_norm(1e6), lib.adamw(1e-3, weight_decay=1e-2)
    )
    _check(adamw, clipped, _adam("[1][0]", "[0]"))
    _check(clipped, adamw, _adam("[0]", "[1][0]"))


@pytest.mark.parametrize("lib", LIBS)
def test_wrapping_in_inject_hyperparams_and_unwrapping(lib):
    plain = lib.adam(1e-3)
    injected = lib.inject_hyperparams(lib.adam)(learning_rate=2e-3)
    _, new_state, _ = _check(
        plain,
        injected,
        _adam(".inner_state[0]", "[0]") | {".count": "[0].count"},
        filled=HYPERPARAMS,
    )
    # The new configuration's learning rate runs, not a carried one.
    assert new_state.hyperparams["learning_rate"] == jnp.float32(2e-3)
    # Back: Adam's count comes from Adam's state, not from the wrapper's.
    _check(
        injected,
        plain,
        _adam("[0]", ".inner_state[0]"),
        dropped={".count"},
        replaced=HYPERPARAMS,
    )


@pytest.mark.parametrize("lib", LIBS)
def test_keep_hyperparams_carries_values_set_by_hand(lib):
    tx = lib.inject_hyperparams(lib.adam)(learning_rate=1e-3)
    params = _params()
    state = _trained(tx, params)
    state.hyperparams["learning_rate"] = jnp.float32(5e-4)  # set by hand
    clipped = lib.chain(lib.clip_by_global_norm(1e6), tx)
    new_state, report = carry_state(state, clipped, params, keep_hyperparams=True)
    assert new_state[1].hyperparams["learning_rate"] == jnp.float32(5e-4)
    assert not report.replaced and not report.dropped
    new_state, report = carry_state(state, clipped, params)
    assert new_state[1].hyperparams["learning_rate"] == jnp.float32(1e-3)
    assert set(report.replaced) == HYPERPARAMS


@pytest.mark.parametrize("lib", LIBS)
def test_weight_decay_becomes_a_schedule_and_back(lib):
    constant = lib.adamw(1e-3, weight_decay=1e-2)
    scheduled = lib.adamw(1e-3, weight_decay=lib.linear_schedule(1e-2, 0.0, 20))
    _check(constant, scheduled, _adam("[0]", "[0]") | {"[1].count": "[0].count"})
    _check(scheduled, constant, _adam("[0]", "[0]"), dropped={"[1].count"})


@pytest.mark.parametrize("lib", LIBS)
def test_wrapping_in_multi_steps_and_unwrapping(lib):
    plain = lib.adam(1e-3)
    accumulated = lib.MultiSteps(lib.adam(1e-3), every_k_schedule=2)
    new_leaves = {".mini_step", ".gradient_step", ".acc_grads['b']", ".acc_grads['w']"}
    _check(plain, accumulated, _adam(".inner_opt_state[0]", "[0]"), filled=new_leaves)
    _check(accumulated, plain, _adam("[0]", ".inner_opt_state[0]"), dropped=new_leaves)


@pytest.mark.parametrize("lib", LIBS)
def test_masked_regrouped_by_partition_and_back(lib):
    masked = lib.masked(lib.adam(1e-3), {"w": True, "b": False})
    parts = lib.partition(
        {"a": lib.adam(1e-3), "b": lib.adam(1e-3)}, {"w": "a", "b": "b"}
    )
    a, b = ".inner_states['a'].inner_state[0]", ".inner_states['b'].inner_state[0]"
    inner = ".inner_state[0]"
    carried = {f"{a}.{f}": f"{inner}.{f}" for f in ("count", "mu['w']", "nu['w']")}
    # Group b is new: its moments start from zero, and so does its count.
    group_b = {f"{b}.{f}" for f in ("count", "mu['b']", "nu['b']")}
    _check(masked, parts, carried, filled=group_b)
    # Back: the count goes with the moments it belongs to (group a's).
    back = {new: old for old, new in carried.items()}
    _check(parts, masked, back, dropped=group_b)


@pytest.mark.parametrize("lib", LIBS)
def test_a_parameter_moving_between_groups_keeps_its_moments(lib):
    def parts(label_b):
        return lib.partition(
            {"a": lib.adam(1e-3), "b": lib.adam(1e-3)}, {"w": "a", "b": label_b}
        )

    a, b = ".inner_states['a'].inner_state[0]", ".inner_states['b'].inner_state[0]"
    carried = _adam(a, a) | {f"{b}.count": f"{b}.count"}
    carried |= {f"{a}.{f}": f"{b}.{f}" for f in ("mu['b']", "nu['b']")}
    _check(parts("b"), parts("a"), carried)


# ---------------------------------------------------------------------------
# Ambiguity, strictness, mismatches.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("lib", LIBS)
def test_ambiguity_is_reported_and_settled_by_sources(lib):
    schedule = lib.linear_schedule(1e-3, 1e-4, 20)
    old_tx = lib.adam(schedule)
    new_tx = lib.inject_hyperparams(lib.adam)(learning_rate=schedule)
    params = _params()
    # The schedule was restarted one step ago (a warm restart): its count is
    # 1 where Adam's is TRAINED, so the two old counts differ.
    old_state = gradax.tree.set(
        _trained(old_tx, params),
        lambda path, _: path[0] == jax.tree_util.SequenceKey(1),
        count=jnp.asarray(1, jnp.int32),
    )
    counts = {".count", ".hyperparams_states['learning_rate'].count"}
    _, report = carry_state(old_state, new_tx, params)
    # Two old counts (Adam's, the schedule's) fit the wrapper's count equally.
    assert dict(report.ambiguous) == {c: ("[0].count", "[1].count") for c in counts}
    assert counts <= {new for new, _ in report.filled}
    with pytest.raises(ValueError, match=re.escape(".count (ambiguous")):
        carry_state(old_state, new_tx, params, strict=True)

    sources = dict.fromkeys(counts, "[1].count")
    new_state, report = carry_state(
        old_state, new_tx, params, strict=True, sources=sources
    )
    assert ("[1].count", "sources=") in {(o, how) for n, o, how in report.carried}
    mapping = _adam(".inner_state[0]", "[0]") | sources
    reference = _reference(new_tx, params, old_state, mapping)
    _assert_equal(
        _run(new_tx, params, new_state, 3, TRAINED),
        _run(new_tx, params, reference, 3, TRAINED),
    )


@pytest.mark.parametrize("lib", LIBS)
def test_equally_close_leaves_of_one_value_are_no_ambiguity(lib):
    # The case: a constant weight decay (masked, after a clip, with a
    # learning-rate schedule) becomes a schedule. Its new count fits Adam's
    # count and the learning-rate schedule's equally; both count the same
    # steps, so either is the value, and strict=True accepts it.
    def tx(weight_decay):
        return lib.chain(
            lib.clip_by_global_norm(1e6),
            lib.adamw(
                lib.linear_schedule(1e-3, 1e-4, 20),
                weight_decay=weight_decay,
                mask={"w": True, "b": False},
            ),
        )

    params = _params()
    old_state = _trained(tx(1e-2), params)
    new_tx = tx(lib.linear_schedule(1e-2, 0.0, 20))
    new_state, report = carry_state(old_state, new_tx, params, strict=True)
    wd_count = "[1][1].inner_state.count"
    assert (
        f"carried  {wd_count} <- [1][0].count (equally close to [1][2].count, "
        "which holds the same value)"
    ) in str(report).splitlines()
    assert not report.ambiguous and not report.filled and not report.dropped
    carried = _adam("[1][0]", "[1][0]")
    carried |= {"[1][2].count": "[1][2].count", wd_count: "[1][0].count"}
    reference = _reference(new_tx, params, old_state, carried)
    _assert_equal(new_state, reference)
    assert int(new_state[1][1].inner_state.count) == TRAINED
    _assert_equal(
        _run(new_tx, params, new_state, 3, TRAINED),
        _run(new_tx, params, reference, 3, TRAINED),
    )

    # Under jit the values are traced and cannot be compared: the tie stays
    # ambiguous, says why, and strict=True refuses it.
    def carry(old, strict=False):
        return carry_state(old, new_tx, params, strict=strict)

    traced_report = []
    jax.jit(lambda old: traced_report.append(carry(old)[1]) or 0)(old_state)
    (reason,) = [why for new, why in traced_report[0].filled if new == wd_count]
    assert reason == (
        "ambiguous: [1][0].count, [1][2].count fit equally (traced: their values "
        "cannot be compared); see sources="
    )
    with pytest.raises(ValueError, match=re.escape(f"{wd_count} (ambiguous")):
        jax.jit(lambda old: carry(old, strict=True)[0])(old_state)

    # Counts of other values stay ambiguous, eagerly too.
    restarted = gradax.tree.set(
        old_state,
        lambda path, _: path[:2] == tuple(map(jax.tree_util.SequenceKey, (1, 2))),
        count=jnp.asarray(1, jnp.int32),
    )
    _, report = carry_state(restarted, new_tx, params)
    assert dict(report.ambiguous) == {wd_count: ("[1][0].count", "[1][2].count")}
    with pytest.raises(ValueError, match=re.escape(f"{wd_count} (ambiguous")):
        carry_state(restarted, new_tx, params, strict=True)


def test_one_value_needs_one_shape_and_dtype():
    # The wrapper's count fits Adam's and the schedule's: one value. Counts of
    # the same number but other dtypes are not one value.
    params = _params()
    old_tx = optax.adam(optax.linear_schedule(1e-3, 1e-4, 20))
    new_tx = optax.inject_hyperparams(optax.adam)(learning_rate=1e-3)
    old_state = _trained(old_tx, params)
    _, report = carry_state(old_state, new_tx, params, strict=True)
    assert not report.ambiguous
    assert (".count", "[0].count") in {(n, o) for n, o, _ in report.carried}
    # The schedule's count went nowhere, but its value did: it is no loss.
    assert not report.dropped
    wider = (old_state[0], old_state[1]._replace(count=jnp.asarray(TRAINED, jnp.int16)))
    _, report = carry_state(wider, new_tx, params)
    assert dict(report.ambiguous) == {".count": ("[0].count", "[1].count")}


def test_strict_raises_naming_what_was_dropped():
    params = _params()
    old_state = _trained(optax.adam(optax.linear_schedule(1e-3, 0.0, 9)), params)
    with pytest.raises(ValueError, match=re.escape("dropped  [1].count")):
        carry_state(old_state, optax.adam(1e-3), params, strict=True)


def test_sources_can_ask_for_init_and_must_name_known_paths():
    params = _params()
    old_state = _trained(optax.adam(1e-3), params)
    new_state, report = carry_state(
        old_state, optax.adam(1e-3), params, sources={"[0].mu['w']": None}
    )
    np.testing.assert_array_equal(new_state[0].mu["w"], jnp.zeros((2, 3)))
    assert ("[0].mu['w']", "sources= asks for init's value") in report.filled
    assert "[0].mu['w']" in {old for old, _ in report.dropped}
    with pytest.raises(ValueError, match="unknown paths"):
        carry_state(old_state, optax.adam(1e-3), params, sources={"[3].x": None})
    with pytest.raises(ValueError, match="unknown paths"):
        carry_state(old_state, optax.adam(1e-3), params, sources={"[0].count": "x"})
    with pytest.raises(ValueError, match=re.escape("float32[2,3]")):
        carry_state(
            old_state, optax.adam(1e-3), params, sources={"[0].count": "[0].mu['w']"}
        )


@pytest.mark.parametrize("lib", LIBS)
def test_shape_and_dtype_changes_are_filled_and_dropped_with_the_reason(lib):
    old_state = _trained(lib.adam(1e-3), _params())
    wider = _params(shape_w=(4, 3))
    _, report = carry_state(old_state, lib.adam(1e-3), wider)
    filled = dict(report.filled)
    assert filled["[0].mu['w']"] == "[0].mu['w'] is float32[2,3], not float32[4,3]"
    assert {"[0].mu['w']", "[0].nu['w']"} == {old for old, _ in report.dropped}
    assert "[0].count" in {new for new, _, _ in report.carried}  # b's moments carry

    _, report = carry_state(old_state, lib.adam(1e-3, mu_dtype=jnp.bfloat16), _params())
    assert "not bfloat16[3]" in dict(report.filled)["[0].mu['b']"]


def test_a_count_whose_moments_all_start_afresh_starts_afresh():
    params = _params()
    old_state = _trained(optax.adam(1e-3), params)
    renamed = {"v": params["w"], "c": params["b"]}
    new_state, report = carry_state(old_state, optax.adam(1e-3), renamed)
    assert int(new_state[0].count) == 0
    assert ("[0].count", "its state's other leaves start from init") in report.filled


def test_the_report_prints_one_line_a_path():
    params = _params()
    old_state = _trained(optax.adam(1e-3), params)
    tx = optax.inject_hyperparams(optax.adam)(learning_rate=1e-3)
    _, report = carry_state(old_state, tx, params)
    lines = str(report).splitlines()
    assert lines[0] == "carried 6, filled 5, dropped 0, replaced 0"
    assert "carried  .count <- [0].count (same names)" in lines
    assert (
        "carried  .inner_state[0].mu['w'] <- [0].mu['w'] (wrapped differently)" in lines
    )
    assert (
        "filled   .hyperparams['learning_rate'] "
        "(hyperparameter: the new transformation's value)"
    ) in lines
    assert len(lines) == 1 + 6 + 5


# ---------------------------------------------------------------------------
# Transformations, buffers, checkpoints.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("lib", LIBS)
def test_works_under_jit_and_eval_shape_without_device_transfers(lib):
    params = _params()
    old_state = _trained(lib.adam(1e-3), params)
    new_tx = lib.chain(
        lib.clip_by_global_norm(1.0), lib.adam(lib.linear_schedule(1e-3, 0.0, 9))
    )
    eager, _ = carry_state(old_state, new_tx, params, strict=True)

    def carry(old, p):
        return carry_state(old, new_tx, p, strict=True)[0]

    _assert_equal(jax.jit(carry)(old_state, params), eager)
    shapes = jax.eval_shape(carry, old_state, params)
    assert shapes == jax.eval_shape(new_tx.init, params)
    # Without a tie to settle, matching reads no values: nothing moves
    # between host and device, also when leaves are filled from ``init``.
    wrapped = lib.MultiSteps(lib.inject_hyperparams(lib.adam)(learning_rate=2e-3), 2)
    with jax.transfer_guard("disallow"):
        carry_state(old_state, new_tx, params, strict=True)
        _, report = carry_state(old_state, wrapped, params, strict=True)
    assert len(report.filled) == 9


def test_a_leaf_used_twice_is_copied_so_the_state_can_be_donated():
    params = _params()
    old_state = _trained(optax.adam(1e-3), params)
    tx = optax.adam(optax.linear_schedule(1e-3, 0.0, 9))
    new_state, _ = carry_state(old_state, tx, params)
    assert new_state[0].count is old_state[0].count  # the first use is no copy
    counts = new_state[0].count, new_state[1].count
    assert counts[0].unsafe_buffer_pointer() != counts[1].unsafe_buffer_pointer()

    @jax.jit
    def step(state, params):
        return tx.update(_grads(params, 0), state, params)[1]

    jax.jit(step, donate_argnums=0)(new_state, params)


@pytest.mark.parametrize("lib", LIBS)
def test_a_state_restored_by_orbax_without_a_target_carries(lib, tmp_path):
    params = _params()
    old_tx = lib.chain(lib.clip_by_global_norm(1e6), lib.adam(1e-3))
    old_state = _trained(old_tx, params)
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(tmp_path / "ckpt", old_state)
    checkpointer.wait_until_finished()
    restored = checkpointer.restore(tmp_path / "ckpt")  # lists, dicts and None
    assert isinstance(restored, list) and isinstance(restored[1][0], dict)

    new_tx = lib.inject_hyperparams(lib.adam)(learning_rate=1e-3)
    from_restored, report = carry_state(restored, new_tx, params, strict=True)
    from_live, _ = carry_state(old_state, new_tx, params, strict=True)
    _assert_equal(from_restored, from_live)
    pairs = {(new, old) for new, old, _ in report.carried}
    assert (".inner_state[0].mu['w']", "[1][0]['mu']['w']") in pairs
    # The reverse: a restored wrapper state back into the plain optimizer.
    checkpointer.save(tmp_path / "ckpt2", from_live)
    checkpointer.wait_until_finished()
    restored = checkpointer.restore(tmp_path / "ckpt2")
    back, report = carry_state(restored, old_tx, params)
    _assert_equal(back, old_state)
    assert set(report.replaced) == {
        f"['hyperparams']['{n}']"
        for n in ("b1", "b2", "eps", "eps_root", "learning_rate")
    }


def test_the_checkpoints_guide_runs():
    page = Path(__file__).resolve().parents[2] / "docs" / "checkpoints.md"
    blocks = re.findall(r"^```python\n(.*?)^```$", page.read_text(), re.S | re.M)
    assert blocks
    namespace: dict = {"__name__": "checkpoints_guide"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"checkpoints.md block {i}", "exec"), namespace)


@pytest.mark.parametrize(
    "old_state, said",
    [
        ("adam state", "no array leaves (it is a str: 'adam state')"),
        (None, "no array leaves (it is a NoneType: None)"),
        ({}, "no array leaves (it is a dict: {})"),
        (
            {"trace": {"v": jnp.zeros(2)}},
            "shares no path with the new state (old_state's leaves: ['trace']['v']",
        ),
    ],
    ids=["string", "none", "empty", "unrelated"],
)
def test_what_is_not_a_state_is_refused_unless_asked(old_state, said):
    # Before, each of these gave init's state and a report: training
    # restarted silently.
    params = _params()
    with pytest.raises(ValueError, match=re.escape(said)) as raised:
        carry_state(old_state, optax.adam(1e-3), params)
    assert "allow_fresh=True" in str(raised.value)
    fresh, report = carry_state(old_state, optax.adam(1e-3), params, allow_fresh=True)
    assert not report.carried
    expected = optax.adam(1e-3).init(params)
    assert jax.tree.structure(fresh) == jax.tree.structure(expected)
    for got, want in zip(
        jax.tree.leaves(fresh), jax.tree.leaves(expected), strict=True
    ):
        np.testing.assert_array_equal(got, want)


def test_a_stateless_target_needs_nothing_carried():
    # optax.sgd without momentum keeps (EmptyState(), EmptyState()): no
    # progress to lose, so an empty old state is no mistake.
    _, report = carry_state((), optax.sgd(0.1), _params())
    assert not report.carried and not report.filled
