"""``init`` returns optax's state tree, for every call optax accepts.

The same nesting, the same NamedTuple field names in the same order, and the
same leaves with the same shapes, dtypes and weak types. The classes are
gradax's own, so they are compared by their fields, not by identity. This
is what lets an optax checkpoint restore into gradax (test_checkpoint_crossing.py)
and optax's state-reading code (``tree.get(state, "count")``,
``state[0]._replace(...)``) work unchanged.

Everything here is traced with ``jax.eval_shape``: nothing compiles.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
import pytest
from conformance_base import make_params, quadratic_grads
from jax_versions import enable_x64
from registry import ENTRIES, Entry, entry_id

import gradax


def layout(tree):
    """The state's tree as comparable data: node types, nesting, avals.

    Each container carries its type's name, because a checkpoint's tree
    (and ``jax.tree.structure``) tells ``dict`` from ``OrderedDict``, a
    tuple from a list, and one NamedTuple class from another. NamedTuple
    classes are gradax's own, so their names and fields are compared, not
    their identity. An ``OrderedDict`` keeps its order (its treedef does);
    a ``dict``'s keys are sorted (as jax sorts them).
    """
    kind = type(tree).__name__
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        fields = tuple(tree._fields)
        return (
            "namedtuple",
            kind,
            fields,
            tuple(layout(getattr(tree, f)) for f in fields),
        )
    if isinstance(tree, (tuple, list)):
        return (kind, tuple(layout(t) for t in tree))
    if isinstance(tree, dict):
        items = tree.items() if kind == "OrderedDict" else sorted(tree.items())
        return (kind, tuple((k, layout(v)) for k, v in items))
    if tree is None:
        return None
    return (tuple(tree.shape), str(tree.dtype), bool(getattr(tree, "weak_type", 0)))


def assert_same_layout(gradax_state, optax_state):
    ours, theirs = layout(gradax_state), layout(optax_state)
    assert ours == theirs, f"\ngradax: {ours}\noptax:  {theirs}"


# optax fails on rank-0 parameters for these (sm3) or keeps a scalar's state
# as (1,) through the registry's widening wrapper
# (optimizers/registry_optimizers.py); the tree is compared on the parameters
# optax accepts.
NO_SCALAR_PARAMS = {"sm3", "scale_by_sm3", "scale_by_distance_over_gradients"}

# The one documented difference (docs/differences-from-optax.md): optax's
# GaLore keeps a (0, 0) array as the projector of a leaf it does not
# project, and orbax refuses to save zero-size arrays, so optax's own GaLore
# state cannot be checkpointed. gradax keeps an empty MaskedNode there.
GALORE = {"galore", "scale_by_galore"}

TWINS = [e for e in ENTRIES if e.optax_name != "" and e.name not in GALORE]


def _params_for(entry: Entry):
    params = make_params()
    if entry.name in NO_SCALAR_PARAMS:
        params = {k: v for k, v in params.items() if v.ndim}
    return params


def _optax_twin(entry: Entry, **overrides):
    if entry.name in NO_SCALAR_PARAMS or overrides:
        name = entry.optax_name or entry.name
        target = optax
        for part in name.split("."):
            target = getattr(target, part)
        return target(**{**entry.kwargs, **overrides})
    return entry.build_optax()


@pytest.mark.parametrize("entry", TWINS, ids=entry_id)
def test_init_is_optax_tree(entry: Entry):
    params = _params_for(entry)
    assert_same_layout(
        jax.eval_shape(entry.build().init, params),
        jax.eval_shape(_optax_twin(entry).init, params),
    )


# optax gives this one's gradient sums JAX's default float dtype: under
# jax_enable_x64 with float32 params its state holds float64 sums and its
# updates come out float64. gradax keeps the params' dtype there, as every
# gradax transformation keeps the gradients' dtype in its updates.
PROMOTES_FLOAT32_UNDER_X64 = {"scale_by_distance_over_gradients"}


@pytest.mark.parametrize("entry", TWINS, ids=entry_id)
def test_trees_are_optax_trees_under_x64(entry: Entry):
    """With `jax_enable_x64` on, `init` and `update` keep optax's trees.

    Leaves optax makes in JAX's default float dtype (`MuonState.ns_coeffs`)
    are float64 there, for float32 and float64 params alike.
    """
    dtypes = [jnp.float64]
    if entry.name not in PROMOTES_FLOAT32_UNDER_X64:
        dtypes.append(jnp.float32)
    with enable_x64(True):
        for dtype in dtypes:
            params = {k: v.astype(dtype) for k, v in _params_for(entry).items()}
            grads = quadratic_grads(params, 0.0)

            def first_step(tx, params=params, grads=grads):
                state = tx.init(params)
                return state, tx.update(grads, state, params)

            ours_tx, theirs_tx = entry.build(), _optax_twin(entry)
            ours = jax.eval_shape(lambda tx=ours_tx: first_step(tx))
            theirs = jax.eval_shape(lambda tx=theirs_tx: first_step(tx))
            assert_same_layout(ours, theirs)


def _a_schedule(count):
    return 0.01 * jnp.ones([]) / (1.0 + count)


def _optax_takes_schedule(entry: Entry, params) -> bool:
    """Whether optax runs its twin with ``entry.schedule_arg`` scheduled."""
    try:
        tx = _optax_twin(entry, **{entry.schedule_arg: _a_schedule})
        state = jax.eval_shape(tx.init, params)
        jax.eval_shape(lambda s: tx.update(params, s, params), state)
    except Exception:  # optax refuses or fails on it: a gradax-only option
        return False
    return True


SCHEDULED = [
    e
    for e in TWINS
    if e.schedule_arg is not None
    and e.build_fn is None
    and _optax_takes_schedule(e, _params_for(e))
]


def test_schedules_optax_takes_are_checked():
    """The scheduled forms below are not vacuous: optax takes these."""
    names = {e.schedule_arg for e in SCHEDULED}
    assert {"learning_rate", "weight_decay"} <= names, names


@pytest.mark.parametrize("entry", SCHEDULED, ids=entry_id)
def test_scheduled_init_is_optax_tree(entry: Entry):
    """Where optax's tree depends on a value being a schedule, gradax's does."""
    params = _params_for(entry)
    overrides = {entry.schedule_arg: _a_schedule}
    ours = jax.eval_shape(entry.build(**overrides).init, params)
    theirs = jax.eval_shape(_optax_twin(entry, **overrides).init, params)
    assert_same_layout(ours, theirs)
    # And the state update returns keeps that tree.
    new = jax.eval_shape(
        lambda s: entry.build(**overrides).update(params, s, params)[1], ours
    )
    assert_same_layout(new, theirs)


def _pair(build):
    """(gradax's, optax's) transformation from one builder taking a module."""
    return build(gradax), build(optax)


def _wd_mask(params):
    return jax.tree.map(lambda p: p.ndim > 1, params)


COMBINATIONS = {
    "chain(clip_by_global_norm, adamw(schedule))": lambda o: o.chain(
        o.clip_by_global_norm(1.0),
        o.adamw(o.warmup_cosine_decay_schedule(0.0, 1e-3, 10, 100), weight_decay=0.1),
    ),
    "named_chain(clip, sgd momentum)": lambda o: o.named_chain(
        ("clip", o.clip(1.0)), ("sgd", o.sgd(0.1, momentum=0.9))
    ),
    "partition(adam, sgd)": lambda o: o.partition(
        {"a": o.adam(1e-3), "b": o.sgd(o.linear_schedule(0.1, 0.0, 10))},
        lambda p: jax.tree.map(lambda x: "a" if x.ndim > 1 else "b", p),
    ),
    "multi_transform(adamw, set_to_zero)": lambda o: o.multi_transform(
        {"train": o.adamw(1e-3), "freeze": o.set_to_zero()},
        {"s": "freeze", "v": "train", "m": "train", "t": "train"},
    ),
    "masked(add_decayed_weights(schedule))": lambda o: o.masked(
        o.add_decayed_weights(o.linear_schedule(1e-2, 0.0, 10)), _wd_mask
    ),
    "inject_hyperparams(adamw)(schedule)": lambda o: o.inject_hyperparams(o.adamw)(
        learning_rate=o.linear_schedule(1e-3, 0.0, 10), weight_decay=0.1
    ),
    "inject_hyperparams(sgd)(momentum)": lambda o: o.inject_hyperparams(o.sgd)(
        learning_rate=0.1, momentum=0.9
    ),
    "MultiSteps(adam(schedule))": lambda o: o.MultiSteps(
        o.adam(o.exponential_decay(1e-3, 10, 0.5)), every_k_schedule=4
    ),
    "apply_if_finite(chain(clip, lion))": lambda o: o.apply_if_finite(
        o.chain(o.clip_by_global_norm(1.0), o.lion(1e-4)), 3
    ),
    "lookahead(adam)": lambda o: o.lookahead(o.adam(1e-3), 5, 0.5),
    "adafactor": lambda o: o.adafactor(1e-2),
    "adafactor(schedule)": lambda o: o.adafactor(o.linear_schedule(1e-2, 0.0, 10)),
    "contrib.muon (routing)": lambda o: o.contrib.muon(0.02),
    "contrib.muon(schedule, weight_decay)": lambda o: o.contrib.muon(
        o.cosine_decay_schedule(0.02, 100), weight_decay=0.1
    ),
    "sgd(schedule, momentum)": lambda o: o.sgd(
        o.piecewise_constant_schedule(0.1, {5: 0.1}), momentum=0.9, nesterov=True
    ),
    "lbfgs": lambda o: o.lbfgs(),
}


@pytest.mark.parametrize("name", list(COMBINATIONS))
def test_combinations_are_optax_trees(name):
    params = make_params()
    if name == "lookahead(adam)":
        ours, theirs = _pair(COMBINATIONS[name])
        fast = gradax.LookaheadParams.init_synced(params)
        assert_same_layout(
            jax.eval_shape(ours.init, fast), jax.eval_shape(theirs.init, fast)
        )
        return
    ours, theirs = _pair(COMBINATIONS[name])
    assert_same_layout(
        jax.eval_shape(ours.init, params), jax.eval_shape(theirs.init, params)
    )


def test_optax_state_idioms():
    """optax's ways of reading and editing a state work on gradax's."""
    params = make_params()
    tx = gradax.chain(gradax.clip_by_global_norm(1.0), gradax.adamw(1e-3))
    state = tx.init(params)
    # One count, found by name (optax's L-BFGS notebook reads it this way).
    assert int(gradax.tree.get(state, "count")) == 0
    assert int(optax.tree.get(state, "count")) == 0
    # The same paths, keys and all, as optax finds in its own state.
    optax_state = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3)).init(
        params
    )
    ours = [str(path) for path, _ in gradax.tree.get_all_with_path(state, "count")]
    theirs = [
        str(path) for path, _ in optax.tree.get_all_with_path(optax_state, "count")
    ]
    assert ours == theirs and len(ours) == 1, (ours, theirs)
    bumped = gradax.tree.set(state, count=jnp.asarray(7, jnp.int32))
    assert int(gradax.tree.get(bumped, "count")) == 7
    # Positional access and _replace, as optax code writes them.
    assert isinstance(state[0], gradax.EmptyState)
    assert isinstance(state[1][-1], gradax.EmptyState)
    assert isinstance(state[1][0], gradax.ScaleByAdamState)
    zeroed = state[1][0]._replace(mu=jax.tree.map(jnp.ones_like, state[1][0].mu))
    assert float(zeroed.mu["m"][0, 0]) == 1.0

    sgd_state = gradax.sgd(0.1, momentum=0.9).init(params)
    assert isinstance(sgd_state[0], gradax.TraceState)
    assert isinstance(sgd_state[-1], gradax.EmptyState)
    sgd_state[0]._replace(trace=params)

    injected = gradax.inject_hyperparams(gradax.adam)(learning_rate=0.1)
    istate = injected.init(params)
    assert float(istate.hyperparams["learning_rate"]) == pytest.approx(0.1)
    istate.hyperparams["learning_rate"] = jnp.asarray(0.5)
    updates, _ = injected.update(params, istate, params)
    plain, _ = gradax.adam(0.5).update(params, gradax.adam(0.5).init(params), params)
    assert jnp.allclose(updates["m"], plain["m"])
