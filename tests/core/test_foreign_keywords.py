"""Keywords from torch, Keras and older optax name the gradax argument to use.

`adamw(lr=1e-3)`, `adamw(betas=(0.9, 0.95))` and
`warmup_cosine_decay_schedule(..., total_steps=1000)` raise a TypeError
whose message says what gradax calls the keyword, for every public
constructor and schedule, from the one table in
`gradax/_core/foreign_keywords.py` (issue 47). Nothing here compiles: each
call fails while Python binds its arguments.
"""

from __future__ import annotations

import importlib
import inspect
import re

import pytest

import gradax
from gradax._core.foreign_keywords import (
    FOREIGN_KEYWORDS,
    callee_kind,
    pick_counterpart,
)

PUBLIC_MODULES = (
    "gradax",
    "gradax.contrib",
    "gradax.schedules",
    "gradax.transforms",
    "gradax.linesearch",
    "gradax.projections",
    "gradax.second_order",
    "gradax.perturbations",
    "gradax.sharding",
    "gradax.microbatching",
    "gradax.experimental.aggregating",
    "gradax.tree",
)


def _public_callees() -> list[type]:
    """Every public class a user builds: transformations, schedules, others."""
    found: dict[type, None] = {}
    for name in PUBLIC_MODULES:
        module = importlib.import_module(name)
        public = getattr(module, "__all__", None) or [
            n for n in dir(module) if not n.startswith("_")
        ]
        for attr in public:
            value = getattr(module, attr, None)
            if (
                isinstance(value, type)
                and issubclass(value, gradax.Module)
                and not value.__dict__.get("_abstract", False)
            ):
                found[value] = None
    return sorted(found, key=lambda cls: (cls.__module__, cls.__name__))


CALLEES = _public_callees()


def _keywords_of(cls: type) -> dict[str, inspect.Parameter] | None:
    """The keywords `cls` takes, or None where it takes any (`**kwargs`)."""
    parameters = inspect.signature(cls).parameters
    if any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        return None
    return {
        n: p
        for n, p in parameters.items()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }


def _message(call) -> str:
    with pytest.raises(TypeError) as info:
        call()
    return str(info.value)


def _line_of(keyword: str, message: str) -> str | None:
    for line in message.splitlines():
        if line.strip().startswith(f"`{keyword}`"):
            return line.strip()
    return None


def test_the_walk_reaches_the_constructors_and_schedules():
    names = {cls.__name__ for cls in CALLEES}
    assert {"adamw", "sgd", "muon", "warmup_cosine_decay_schedule"} <= names
    assert len(CALLEES) > 150, len(CALLEES)


def test_every_public_callee_names_only_arguments_it_has():
    # Each callee gets every table keyword it lacks, at once: one message
    # with one line per keyword. A hint that names arguments names the
    # callee's own; every row of the table is the hint for some callee.
    used: set[tuple[str, int]] = set()
    for cls in CALLEES:
        accepted = _keywords_of(cls)
        if accepted is None:
            continue
        foreign = {k: 0.5 for k in FOREIGN_KEYWORDS if k not in accepted}
        if "betas" in foreign:
            foreign["betas"] = (0.5, 0.25)
        message = _message(lambda cls=cls, foreign=foreign: cls(**foreign))
        kind = callee_kind(cls)
        for keyword in foreign:
            row = pick_counterpart(keyword, cls.__name__, kind, accepted)
            line = _line_of(keyword, message)
            where = f"{cls.__name__}, `{keyword}`:\n{message}"
            if row is None:
                if line is not None:  # a close spelling, which it has
                    close = re.findall(r"`(\w+)`", line.split("did you mean")[1])
                    assert close and set(close) <= set(accepted), where
                else:
                    assert f"`{keyword}`" in message.splitlines()[-1], where
                continue
            used.add((keyword, FOREIGN_KEYWORDS[keyword].index(row)))
            assert line is not None, where
            assert set(row.names) <= set(accepted), where
            if row.names:
                named = ", ".join(f"`{n}`" for n in row.names)
                assert line.startswith(f"`{keyword}` is {named} in gradax"), where
                assert f"{cls.__name__}({row.names[0]}=" in line, where
    unused = sorted(
        (keyword, index)
        for keyword, rows in FOREIGN_KEYWORDS.items()
        for index in range(len(rows))
        if (keyword, index) not in used
    )
    assert not unused, f"rows no public callee reaches: {unused}"


@pytest.mark.parametrize(
    "call, expected",
    [
        (lambda: gradax.adamw(lr=1e-3), "`lr` is `learning_rate` in gradax"),
        (lambda: gradax.adamw(lr=1e-3), "adamw(learning_rate=0.001)"),
        (
            lambda: gradax.adamw(1e-3, betas=(0.9, 0.95)),
            "`betas` is `b1`, `b2` in gradax (split the tuple): adamw(b1=0.9, b2=0.95)",
        ),
        (
            lambda: gradax.ademamix(1e-3, betas=(0.9, 0.99, 0.999)),
            "ademamix(b1=0.9, b2=0.99, b3=0.999)",
        ),
        (
            lambda: gradax.warmup_cosine_decay_schedule(0.0, 1.0, 10, total_steps=1000),
            "`total_steps` is `decay_steps` in gradax",
        ),
        (
            lambda: gradax.linear_schedule(1.0, 0.0, num_training_steps=100),
            "`num_training_steps` is `transition_steps` in gradax",
        ),
        (
            lambda: gradax.exponential_decay(1.0, total_steps=100),
            "exponential_decay has no total length",
        ),
        (lambda: gradax.adam(1e-3, momentum=0.9), "`momentum` is `b1` in gradax"),
        (lambda: gradax.lion(1e-3, beta_1=0.9), "`beta_1` is `b1` in gradax"),
        (lambda: gradax.adam(1e-3, epsilon=1e-7), "`epsilon` is `eps` in gradax"),
        (lambda: gradax.muon(0.02, b1=0.95), "`b1` is `beta` in gradax"),
        (lambda: gradax.trace(momentum=0.9), "`momentum` is `decay` in gradax"),
        (lambda: gradax.rmsprop(1e-3, alpha=0.99), "`alpha` is `decay` in gradax"),
        (
            lambda: gradax.adamw(1e-3, weight_decay_rate=0.01),
            "`weight_decay_rate` is `weight_decay` in gradax",
        ),
        (
            lambda: gradax.adafactor(weight_decay=0.01),
            "`weight_decay` is `weight_decay_rate` in gradax",
        ),
        (
            lambda: gradax.sgd(0.1, weight_decay=5e-4),
            "gradax.chain(gradax.add_decayed_weights(0.0005), gradax.sgd(...))",
        ),
        (lambda: gradax.sgd(0.1, use_nesterov=True), "`use_nesterov` is `nesterov`"),
        (lambda: gradax.adam(1e-3, amsgrad=True), "gradax.amsgrad"),
        (
            lambda: gradax.adam(1e-3, clipnorm=1.0),
            "gradax.chain(gradax.clip_by_global_norm(1.0), gradax.adam(...))",
        ),
        (
            lambda: gradax.cosine_decay_schedule(1.0, 100, eta_min=1e-5),
            "`eta_min` is `alpha` in gradax (alpha is the final value as a "
            "fraction of init_value): cosine_decay_schedule(alpha=...)",
        ),
        (
            lambda: gradax.cosine_decay_schedule(1.0, 100, warmup_steps=10),
            "gradax.warmup_cosine_decay_schedule",
        ),
        (
            lambda: gradax.cosine_onecycle_schedule(100, max_lr=1.0),
            "`max_lr` is `peak_value` in gradax",
        ),
        (
            lambda: gradax.contrib.schedule_free_adamw(lr=1e-3),
            "`lr` is `learning_rate` in gradax",
        ),
        (
            lambda: gradax.inject_hyperparams(gradax.adamw)(lr=1e-3),
            "`lr` is `learning_rate` in gradax: adamw(learning_rate=0.001)",
        ),
        (
            lambda: gradax.inject_hyperparams(gradax.adam)(0.1, betas=(0.9, 0.95)),
            "adam(b1=0.9, b2=0.95)",
        ),
    ],
)
def test_a_foreign_keyword_names_the_gradax_argument(call, expected):
    message = _message(call)
    assert expected in message, message


def test_the_named_argument_builds_what_was_meant():
    # The hint's call, with the arguments it names, is a valid call.
    assert gradax.adamw(learning_rate=0.001, b1=0.9, b2=0.95).b2 == 0.95
    schedule = gradax.warmup_cosine_decay_schedule(0.0, 1.0, 10, decay_steps=1000)
    assert schedule.decay_steps == 1000


@pytest.mark.parametrize(
    "call, expected",
    [
        (lambda: gradax.adamw(learnig_rate=1e-3), "`learning_rate`"),
        (lambda: gradax.sgd(0.1, nestrov=True), "`nesterov`"),
        (lambda: gradax.adamw(1e-3, weight_decy=0.1), "`weight_decay`"),
        (
            lambda: gradax.warmup_cosine_decay_schedule(0.0, 1, 10, 100, end_valu=0),
            "`end_value`",
        ),
    ],
)
def test_a_misspelling_gets_the_close_argument(call, expected):
    message = _message(call)
    assert "did you mean" in message and expected in message, message


def test_an_unknown_keyword_keeps_pythons_wording_and_lists_the_arguments():
    message = _message(lambda: gradax.sgd(0.1, quux=1))
    first, *rest = message.splitlines()
    assert first == "sgd.__init__() got an unexpected keyword argument 'quux'"
    assert rest == [
        "  sgd has no argument `quux`; it takes: "
        "learning_rate, momentum, nesterov, accumulator_dtype"
    ]
    message = _message(lambda: gradax.chain(gradax.sgd(0.1), quux=1))
    last = message.splitlines()[-1]
    assert last == "  chain has no argument `quux`; it takes: *transforms"


def test_other_type_errors_are_left_as_they_are():
    # A keyword given twice, too many positionals: no keyword is unknown.
    message = _message(lambda: gradax.adam(0.1, learning_rate=0.2))
    assert message == "adam.__init__() got multiple values for argument 'learning_rate'"
    message = _message(lambda: gradax.trace(0.9, False, None, 1))
    assert "\n" not in message

    # A TypeError raised inside a constructor is the constructor's own: not
    # rewritten, though the call has keywords.
    class Strict(gradax.Module):
        width: int = 1

        def __init__(self, width: int = 1):
            dict(x=1).get(key="x")  # a TypeError of its own

    message = _message(lambda: Strict(width=2))
    assert "\n" not in message and "Strict" not in message


def test_a_users_class_is_named_as_itself():
    class Scaled(gradax.GradientTransformation):
        learning_rate: float = 0.1

        def init_state(self, params):
            return gradax.EmptyState()

        def update_state(self, updates, state, params=None):
            return updates, state

    message = _message(lambda: Scaled(lr=0.1))
    assert "`lr` is `learning_rate` in Scaled: Scaled(learning_rate=0.1)" in message
