"""Declared hyperparameters: every public constructor refuses bad values.

Each numeric field declares its valid values once (``gradax.declare.hyper``);
these tests walk every public class and check that each declaration is
enforced at construction with an error naming the field, and draw arguments
with hypothesis: valid ones give finite updates, invalid ones an error.
"""

from __future__ import annotations

import dataclasses
import math
import re
import warnings

import hypothesis
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from conformance_base import make_params
from registry import ENTRIES

import gradax
from gradax._core.declarations import OneOf, Range, spec_of
from gradax.declare import HyperparameterWarning
from gradax.orthogonal.groups import _ADAM_OPTIONS

# Arguments that build the public classes without a registry entry of their
# own (schedules, and transformations the registry builds another way).
EXTRA_ARGS = {
    "constant_schedule": dict(value=0.1),
    "linear_schedule": dict(init_value=0.1, end_value=0.0, transition_steps=10),
    "polynomial_schedule": dict(
        init_value=0.1, end_value=0.0, power=2, transition_steps=10
    ),
    "exponential_decay": dict(init_value=0.1, transition_steps=10, decay_rate=0.5),
    "cosine_decay_schedule": dict(init_value=0.1, decay_steps=10),
    "warmup_cosine_decay_schedule": dict(
        init_value=0.0, peak_value=0.1, warmup_steps=2, decay_steps=10
    ),
    "warmup_constant_schedule": dict(init_value=0.0, peak_value=0.1, warmup_steps=2),
    "warmup_exponential_decay_schedule": dict(
        init_value=0.0,
        peak_value=0.1,
        warmup_steps=2,
        transition_steps=10,
        decay_rate=0.5,
    ),
    "piecewise_constant_schedule": dict(init_value=0.1),
    "piecewise_interpolate_schedule": dict(interpolate_type="linear", init_value=0.1),
    "linear_onecycle_schedule": dict(transition_steps=10, peak_value=0.1),
    "cosine_onecycle_schedule": dict(transition_steps=10, peak_value=0.1),
    "DogInitStep": dict(kind="distance", value=1e-6),
    "MultiSteps": dict(opt=gradax.sgd(0.1), every_k_schedule=2),
    "apply_if_finite": dict(inner=gradax.sgd(0.1), max_consecutive_errors=2),
    "differentially_private_aggregate": dict(
        l2_norm_clip=1.0, noise_multiplier=0.1, seed=0
    ),
    "dpsgd": dict(learning_rate=0.1, l2_norm_clip=1.0, noise_multiplier=0.1, seed=0),
    "lookahead": dict(
        fast_optimizer=gradax.sgd(0.1), sync_period=2, slow_step_size=0.5
    ),
    "measure_with_ema": dict(measure=lambda p: p, decay=0.9),
    "mechanize": dict(base_optimizer=gradax.sgd(0.1)),
    "sam": dict(optimizer=gradax.sgd(0.1), adv_optimizer=gradax.sgd(0.01)),
    "schedule_free": dict(base_optimizer=gradax.sgd(1.0), learning_rate=0.1),
    "sophia": dict(learning_rate=0.1),
    "scale_by_backtracking_linesearch": dict(max_backtracking_steps=5),
    "scale_by_zoom_linesearch": dict(max_linesearch_steps=5),
    "offload_state": dict(tx=gradax.sgd(0.1)),
    "cast_updates": dict(tx=gradax.sgd(0.1)),
    "stochastic_rounding": dict(tx=gradax.sgd(0.1)),
    "master_weights": dict(tx=gradax.sgd(0.1)),
    "shard_state": dict(tx=gradax.sgd(0.1)),
    "skip_loss_spikes": dict(inner=gradax.sgd(0.1), warmup_steps=3),
    "warmup_stable_decay_schedule": dict(
        init_value=0.0, peak_value=0.1, warmup_steps=2, total_steps=20
    ),
}


def _public_classes():
    """Every public gradax class with at least one declared field."""
    found = {}
    for module in (gradax, gradax.contrib):
        for name in dir(module):
            obj = getattr(module, name)
            if not (isinstance(obj, type) and issubclass(obj, gradax.Module)):
                continue
            if not dataclasses.is_dataclass(obj):
                continue
            if any(spec_of(f) for f in dataclasses.fields(obj)):
                found[name] = obj
    return found


def _base_args():
    args = {}
    for entry in ENTRIES:
        if entry.build_fn is None:
            args.setdefault(entry.name, entry.kwargs)
    args.update(EXTRA_ARGS)
    return args


def _bad_values(spec):
    """Values outside a declaration (each must be refused)."""
    valid = spec.valid
    if isinstance(valid, OneOf):
        return ["__not_one_of_them__"]
    bad = ["0.1", [0.1], True]
    if valid.integer:
        if math.isfinite(valid.low):
            bad.append(int(valid.low) - (0 if valid.low_open else 1))
        bad.append(1.5)
    else:
        bad.append(float("nan"))
        if not valid.allow_inf:
            bad.append(float("inf"))
        if math.isfinite(valid.low):
            bad.append(valid.low if valid.low_open else valid.low - 0.5)
        if math.isfinite(valid.high):
            bad.append(valid.high if valid.high_open else valid.high + 0.5)
    return bad


def test_every_public_class_has_arguments_to_build_it():
    base = _base_args()
    missing = []
    for name, cls in _public_classes().items():
        try:
            cls(**base.get(name, {}))
        except TypeError as error:
            missing.append(f"{name}: {error}")
    assert not missing, "add base arguments to EXTRA_ARGS:\n" + "\n".join(missing)


def test_every_declared_field_refuses_values_outside_its_declaration():
    base = _base_args()
    failures = []
    checked = 0
    for name, cls in _public_classes().items():
        kwargs = base.get(name, {})
        try:
            cls(**kwargs)
        except TypeError:
            continue  # reported by the test above
        for field in dataclasses.fields(cls):
            spec = spec_of(field)
            if spec is None or not field.init:
                continue
            for value in _bad_values(spec):
                try:
                    cls(**{**kwargs, field.name: value})
                except gradax.HyperparameterError as error:
                    if field.name not in str(error):
                        failures.append(f"{name}.{field.name}={value!r}: {error}")
                else:
                    failures.append(f"{name}.{field.name}={value!r} was accepted")
                checked += 1
    assert not failures, "\n".join(failures)
    assert checked > 1000


def test_the_mistakes_users_made_get_errors_at_construction():
    with pytest.raises(gradax.HyperparameterError, match="learning_rate.*nan"):
        gradax.adam(float("nan"))
    with pytest.raises(gradax.HyperparameterError, match="learning_rate.*str"):
        gradax.adam("1e-3")
    with pytest.raises(gradax.HyperparameterError, match="weight_decay.*list"):
        gradax.adamw(1e-3, weight_decay=[0.1])
    # optax accepts a negative warmup (the decay then starts before step 0):
    # accepted with its numbers, and a warning naming the argument.
    with pytest.warns(HyperparameterWarning, match="warmup_steps=-5"):
        gradax.warmup_cosine_decay_schedule(0.0, 1e-3, -5, 100)
    # A schedule whose values leave the range is refused when that is known.
    with pytest.raises(gradax.HyperparameterError, match="b1"):
        gradax.adam(1e-3, b1=gradax.linear_schedule(0.9, 1.0, 100))
    # The errors are ValueErrors (bad values) and TypeErrors (non-numbers).
    assert issubclass(gradax.HyperparameterError, ValueError)
    assert issubclass(gradax.HyperparameterError, TypeError)


# Each way a value can be wrong, with the reason the error gives beside the
# argument's name and valid values (the branches of `declarations.validate`).
WRONG_KINDS = {
    "None where a number is needed": (lambda: gradax.adam(1e-3, b1=None), "b1.*None"),
    "a complex number": (lambda: gradax.adam(1 + 2j), "learning_rate.*not a real"),
    "a NumPy boolean": (
        lambda: gradax.adam(np.bool_(True)),
        "learning_rate.*a boolean is not a number",
    ),
    "a boolean array": (
        lambda: gradax.adam(np.array(True)),
        "learning_rate.*a boolean is not a number",
    ),
    "a schedule where only a number is read": (
        lambda: gradax.lookahead(gradax.sgd(0.1), lambda c: 5, 0.5),
        "sync_period.*a schedule is not accepted here",
    ),
    "an array for a size": (
        lambda: gradax.lbfgs(memory_size=np.array([5, 6])),
        "memory_size.*an array is not accepted here",
    ),
    "a float for a count": (
        lambda: gradax.lbfgs(memory_size=5.0),
        "memory_size.*not an integer",
    ),
    # NumPy reads bfloat16 as a "void" kind: its numbers are still checked.
    "a bfloat16 out of range": (
        lambda: gradax.adam(1e-3, eps=jnp.bfloat16(-1)),
        r"eps must be in \[0, inf\)",
    ),
    # A static hyperparameter sets a loop's length or a shape: a traced value
    # (the optimizer built inside jit or vmap from an argument) cannot. (?s):
    # jax 0.5 prints a batched tracer over several lines.
    "a traced loop length": (
        lambda: jax.jit(lambda n: gradax.muon(0.02, ns_steps=n))(5),
        r"(?s)ns_steps.*a traced value, but it is static",
    ),
    "a traced share of rows": (
        lambda: jax.vmap(lambda f: gradax.dion2(0.02, fraction=f))(jnp.ones(2)),
        r"(?s)fraction.*a traced value, but it is static",
    ),
}


@pytest.mark.parametrize("case", WRONG_KINDS)
def test_each_kind_of_wrong_value_is_refused_with_its_reason(case):
    build, message = WRONG_KINDS[case]
    with pytest.raises(gradax.HyperparameterError, match=message):
        build()


def test_values_of_the_accepted_kinds_build():
    # The counterparts of the cases above that are valid.
    gradax.adam(1e-3, eps=jnp.bfloat16(1e-8))
    gradax.lbfgs(memory_size=np.array(5))
    gradax.lookahead(gradax.sgd(0.1), sync_period=5, slow_step_size=0.5)
    # A traced value where the field is a leaf (a vmapped sweep of a rate).
    jax.vmap(lambda lr: gradax.muon(lr, ns_steps=5).learning_rate)(jnp.ones(2))


def test_a_static_value_given_as_a_concrete_array_is_its_python_number():
    """A static hyperparameter from a config read with numpy or jnp: kept as
    the Python number (the tree definition hashes it, the program reads it
    before tracing). A jnp fraction failed inside the first jitted update
    with ConcretizationTypeError."""
    tx = gradax.dion2(0.02, fraction=jnp.asarray(0.5), ns_steps=np.int64(3))
    assert type(tx.fraction) is float and tx.fraction == 0.5
    assert type(tx.ns_steps) is int and tx.ns_steps == 3
    assert tx == gradax.dion2(0.02, fraction=0.5, ns_steps=3)
    params = {"w": jnp.ones((4, 3))}
    state = tx.init(params)
    jax.jit(tx.update)(params, state, params)


# -- negative learning rates: accepted as in optax, with one warning ----------


def _hyperparameter_warnings(record):
    return [w for w in record if issubclass(w.category, HyperparameterWarning)]


def _three_steps(tx, params):
    """The updates of three steps on a perturbed quadratic."""
    state, out = tx.init(params), []
    for step in range(3):
        grads = jax.tree.map(lambda p, s=step: (p - 0.5) * (1.0 + 0.1 * s), params)
        updates, state = tx.update(grads, state, params)
        params = gradax.apply_updates(params, updates)
        out.append(updates)
    return out


def _negative_polynomial(lib):
    # As in optax's getting-started notebook: gradient ascent by a schedule
    # of negative step sizes.
    return lib.polynomial_schedule(
        init_value=-0.1, end_value=-0.01, power=1, transition_steps=2
    )


# (gradax's, optax's, whether gradax warns). scale_by_schedule is a scale:
# a negative factor is its normal use, so it does not warn.
NEGATIVE_STEPS = {
    "adam, a negative number": (
        lambda: gradax.adam(-0.1),
        lambda: optax.adam(-0.1),
        True,
    ),
    "adam, a negative array": (
        lambda: gradax.adam(np.float32(-0.1)),
        lambda: optax.adam(np.float32(-0.1)),
        True,
    ),
    "adam, a negative polynomial_schedule": (
        lambda: gradax.adam(_negative_polynomial(gradax)),
        lambda: optax.adam(_negative_polynomial(optax)),
        True,
    ),
    "sgd with momentum, a negative number": (
        lambda: gradax.sgd(-0.1, momentum=0.9),
        lambda: optax.sgd(-0.1, momentum=0.9),
        True,
    ),
    # Its learning rate and optimism (by default the same) are the weights of
    # scale_by_optimistic_gradient, which takes them with either sign.
    "optimistic_adam, a negative number": (
        lambda: gradax.optimistic_adam(-0.05),
        lambda: optax.optimistic_adam(-0.05),
        True,
    ),
    "scale_by_learning_rate, a negative schedule": (
        lambda: gradax.scale_by_learning_rate(_negative_polynomial(gradax)),
        lambda: optax.scale_by_learning_rate(_negative_polynomial(optax)),
        True,
    ),
    "scale_by_schedule, a negative schedule": (
        lambda: gradax.scale_by_schedule(_negative_polynomial(gradax)),
        lambda: optax.scale_by_schedule(_negative_polynomial(optax)),
        False,
    ),
}


@pytest.mark.parametrize("case", NEGATIVE_STEPS)
def test_negative_step_sizes_are_accepted_with_optax_numbers(case):
    ours_fn, theirs_fn, warns = NEGATIVE_STEPS[case]
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        ours = ours_fn()
    found = _hyperparameter_warnings(record)
    if warns:
        # One warning, at the line that built the optimizer, naming the
        # argument and what a negative rate does.
        assert len(found) == 1, [str(w.message) for w in found]
        assert re.search(r"learning_rate.*ascend", str(found[0].message))
        assert found[0].filename == __file__
    else:
        assert not found, [str(w.message) for w in found]
    params = {"w": jnp.array([1.0, -2.0, 3.0]), "b": jnp.array(0.25)}
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        # Aliases rebuild their parts at every init and update, and under
        # jit at every trace: none of that warns again.
        plain = _three_steps(ours, params)
        jitted = jax.jit(_three_steps)(ours, params)
        jax.jit(lambda p: _three_steps(ours, p))(params)
    assert not _hyperparameter_warnings(record)
    expected = _three_steps(theirs_fn(), params)
    # Eagerly, the same float32 operations in the same order as optax's (equal
    # today); 1e-6 relative leaves room for a reordered multiply-add.
    for a, b in zip(jax.tree.leaves(plain), jax.tree.leaves(expected), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-8)
    # As a jit argument, b2 is a float32 leaf, so 1 - b2 rounds in float32
    # (1.3e-5 relative for 0.999; 1e-5 seen on Adam's updates here), the
    # tolerance tests/conformance/test_conformance.py derives for injected values.
    for a, b in zip(jax.tree.leaves(jitted), jax.tree.leaves(plain), strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-8)
    # A negative learning rate ascends: the first update moves w along its
    # gradient w - 0.5. A negative scale is the step itself: it descends.
    direction = 1.0 if warns else -1.0
    assert np.all(np.sign(plain[0]["w"]) == direction * np.sign(params["w"] - 0.5))


def test_one_warning_names_every_negative_rate_of_one_optimizer():
    with pytest.warns(HyperparameterWarning) as record:
        gradax.muon(-0.02, adam_learning_rate=-1e-3)
    assert len(record) == 1
    message = str(record[0].message)
    assert "learning_rate=-0.02" in message and "adam_learning_rate=-0.001" in message
    # inject_hyperparams builds the optimizer once to check its arguments,
    # then rebuilds it at every step from arrays in its state.
    with pytest.warns(HyperparameterWarning) as record:
        tx = gradax.inject_hyperparams(gradax.adamw)(learning_rate=-0.1)
    assert len(record) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", HyperparameterWarning)
        state = tx.init(jnp.ones(2))
        tx.update(jnp.ones(2), state, jnp.ones(2))
        # Through replace, a user builds a new object: that one warns.
    with pytest.warns(HyperparameterWarning, match="learning_rate=-0.5"):
        gradax.adam(0.1).replace(learning_rate=-0.5)


def test_no_warning_where_a_negative_factor_is_the_normal_use():
    with warnings.catch_warnings():
        warnings.simplefilter("error", HyperparameterWarning)
        gradax.scale(-1.0)
        gradax.scale_by_learning_rate(-0.1, flip_sign=False)
        gradax.adam(gradax.linear_schedule(1e-3, 0.0, 100))  # never negative
        gradax.adam(0.0)


def test_a_plain_function_schedule_is_not_called_at_construction():
    calls = []

    def schedule(count):
        calls.append(count)
        return -0.1 * jnp.ones_like(count, jnp.float32)

    with warnings.catch_warnings():
        # Its values are unknown without calling it (on a device): no warning.
        warnings.simplefilter("error", HyperparameterWarning)
        tx = gradax.adam(schedule)
    assert not calls
    tx.update(jnp.ones(2), tx.init(jnp.ones(2)))
    assert calls


def test_a_schedule_that_turns_negative_warns_with_its_lowest_value():
    with pytest.warns(HyperparameterWarning, match=r"learning_rate .*-0\.001"):
        gradax.adam(gradax.linear_schedule(1e-3, -1e-3, 100))


def test_step_size_caps_and_rprop_initial_step_stay_nonnegative():
    # A negative cap replaces every Polyak step by itself; rprop's
    # learning_rate is its first step size, clipped into
    # [min_step_size, max_step_size] afterwards: neither ascends.
    with pytest.raises(gradax.HyperparameterError, match="max_learning_rate"):
        gradax.polyak_sgd(max_learning_rate=-1.0)
    with pytest.raises(gradax.HyperparameterError, match="initial step size"):
        gradax.rprop(-0.1)


# -- hypothesis over the registry ---------------------------------------------


def _drawable(entry):
    """Declared, schedulable numeric fields of an entry built from kwargs."""
    if entry.build_fn is not None or not entry.injectable:
        return []
    cls = entry.factory
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        return []
    fields = []
    for field in dataclasses.fields(cls):
        spec = spec_of(field)
        if spec and spec.schedule and isinstance(spec.valid, Range):
            if entry.kwargs.get(field.name, 0) is not None:
                fields.append((field.name, spec.valid))
    return fields


_CASES = [(entry, field) for entry in ENTRIES for field in _drawable(entry)]


def _valid_value(valid: Range):
    low = valid.low if math.isfinite(valid.low) else -2.0
    # Both sides of a warn_below (a learning rate: [-2, 2]) are drawn.
    top = valid.warn_below if math.isfinite(valid.warn_below) else low
    high = valid.high if math.isfinite(valid.high) else top + 2.0
    return st.floats(
        low, high, exclude_min=valid.low_open, exclude_max=valid.high_open
    ).filter(lambda x: valid.contains(np.asarray(x, np.float32).astype(float)))


def _invalid_value(valid: Range):
    options = [st.just(float("nan")), st.text(max_size=3)]
    if math.isfinite(valid.low):
        options.append(st.floats(valid.low - 10.0, valid.low, exclude_max=True))
    if math.isfinite(valid.high):
        options.append(st.floats(valid.high, valid.high + 10.0, exclude_min=True))
    # Inside the range, but float32 (the least precision updates run in)
    # rounds them onto an open bound.
    if valid.low_open and valid.low == 0.0:
        options.append(st.just(1e-50))
    if valid.high_open and valid.high == 1.0:
        options.append(st.just(1.0 - 1e-9))
    return st.one_of(options)


@hypothesis.settings(max_examples=60)
@hypothesis.given(data=st.data())
def test_drawn_hyperparameters(data):
    entry, (name, valid) = data.draw(st.sampled_from(_CASES), label="case")
    if data.draw(st.booleans(), label="valid"):
        value = data.draw(_valid_value(valid), label=name)
        try:
            with warnings.catch_warnings(record=True) as record:
                warnings.simplefilter("always")
                tx = entry.build(**{name: value})
        except gradax.HyperparameterError:
            raise  # a value inside the declared range must pass that check
        except ValueError as error:
            # In range on its own, but refused beside the entry's other
            # settings (rprop's min_step_size above its max_step_size, an
            # adam_* option beside adam=): the error must name it.
            assert name in str(error), (entry, name, value, error)
            return
        # Valid but usually a mistake (a negative learning rate): one warning
        # naming the argument; otherwise none.
        found = _hyperparameter_warnings(record)
        if value < valid.warn_below:
            assert len(found) == 1 and name in str(found[0].message), (entry, found)
        else:
            assert not found, (entry, name, value, [str(w.message) for w in found])
        # The registry's parameters: entries' masks and labels are written
        # for these four leaves.
        params = make_params()
        grads = jax.tree.map(lambda p: 0.3 * p + 0.1, params)
        updates, _ = tx.update(grads, tx.init(params), params, value=jnp.float32(1.0))
        for leaf in jax.tree.leaves(updates):
            assert jnp.all(jnp.isfinite(leaf)), (entry, name, value)
    else:
        value = data.draw(_invalid_value(valid), label=name)
        with pytest.raises(gradax.HyperparameterError, match=name):
            entry.build(**{name: value})


@pytest.mark.parametrize("name", _ADAM_OPTIONS)
def test_adam_options_beside_adam_are_refused(name):
    # With adam= the default AdamW group is not built, so a setting of it
    # would be silently ignored: it is refused, naming the option.
    value = 1e-3 if name == "adam_learning_rate" else 0.5
    with pytest.raises(ValueError, match=f"{name} set the default AdamW group"):
        gradax.muon(0.02, adam=gradax.adam(1e-3), **{name: value})
