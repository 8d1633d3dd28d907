"""Declared hyperparameters: every public constructor refuses bad values.

Each numeric field declares its valid values once (``gradax.declare.hyper``);
these tests walk every public class and check that each declaration is
enforced at construction with an error naming the field, and draw arguments
with hypothesis: valid ones give finite updates, invalid ones an error.
"""

from __future__ import annotations

import dataclasses
import math

import hypothesis
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from registry import ENTRIES
from test_conformance import make_params

import gradax
from gradax._declare import OneOf, Range, spec_of
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
    with pytest.raises(gradax.HyperparameterError, match="learning_rate.*ascend"):
        gradax.adam(-1e-3)
    with pytest.raises(gradax.HyperparameterError, match="learning_rate.*nan"):
        gradax.adam(float("nan"))
    with pytest.raises(gradax.HyperparameterError, match="learning_rate.*str"):
        gradax.adam("1e-3")
    with pytest.raises(gradax.HyperparameterError, match="weight_decay.*list"):
        gradax.adamw(1e-3, weight_decay=[0.1])
    with pytest.raises(gradax.HyperparameterError, match="warmup_steps"):
        gradax.warmup_cosine_decay_schedule(0.0, 1e-3, -5, 100)
    # A schedule whose values leave the range is refused when that is known.
    with pytest.raises(gradax.HyperparameterError, match="learning_rate"):
        gradax.adam(gradax.linear_schedule(1e-3, -1e-3, 100))
    # The errors are ValueErrors (bad values) and TypeErrors (non-numbers).
    assert issubclass(gradax.HyperparameterError, ValueError)
    assert issubclass(gradax.HyperparameterError, TypeError)


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
    high = valid.high if math.isfinite(valid.high) else low + 2.0
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
            tx = entry.build(**{name: value})
        except gradax.HyperparameterError:
            raise  # a value inside the declared range must pass that check
        except ValueError as error:
            # In range on its own, but refused beside the entry's other
            # settings (rprop's min_step_size above its max_step_size, an
            # adam_* option beside adam=): the error must name it.
            assert name in str(error), (entry, name, value, error)
            return
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
