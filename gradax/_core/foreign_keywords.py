"""Keywords from torch, Keras and older optax, and misspellings, at a call.

A user porting a training script types `adamw(lr=1e-3)`,
`adamw(betas=(0.9, 0.95))` or `warmup_cosine_decay_schedule(...,
total_steps=1000)`, and Python's own error says only that the keyword is
unexpected. :data:`FOREIGN_KEYWORDS` is the one table of what such keywords
are called in gradax. When building a gradax object fails on an unknown
keyword (:class:`~gradax.Module`'s metaclass and `inject_hyperparams`'s
builder ask here), the error names the callee's own argument to use, or
what to do where gradax has no such argument, or the close spellings of a
typo, or else the arguments the callee takes. It stays a TypeError.

Only the error path reads any of this: a valid call never does.

A keyword's rows are tried in order; the first whose arguments the callee
has (and whose `callees`/`kind` admit it) gives the hint, so a hint never
names an argument the callee lacks. A keyword in the table that no row fits
gets no guessed spelling (`total_steps` is not Muon's `ns_steps`).
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "FOREIGN_KEYWORDS",
    "Counterpart",
    "callee_kind",
    "keyword_hints",
    "pick_counterpart",
    "unknown_keyword_error",
]


@dataclasses.dataclass(frozen=True)
class Counterpart:
    """What a foreign keyword is in gradax, for the callees it applies to.

    Attributes:
      names: the gradax arguments it stands for; all must be arguments of
        the callee. Several for a tuple the user should split (`betas`).
        Empty for a row that only gives advice (gradax has no such argument).
      advice: a sentence added to the hint; `{callee}` and `{value}` are
        replaced by the callee's name and the value the user gave.
      callees: the callees (class names) where this reading is right; empty
        for every callee that has `names`.
      kind: "transformation" or "schedule" to apply only to those; empty
        for both.
      same_value: whether the user's value carries over as it is (False
        where gradax's argument has other units: a fraction for a value).
    """

    names: tuple[str, ...] = ()
    advice: str = ""
    callees: tuple[str, ...] = ()
    kind: str = ""
    same_value: bool = True

    def applies_to(self, callee: str, kind: str, parameters: Any) -> bool:
        """Whether this row gives the hint for `callee` taking `parameters`."""
        if self.callees and callee not in self.callees:
            return False
        if self.kind and self.kind != kind:
            return False
        return all(name in parameters for name in self.names)


def _to(
    *names: str,
    advice: str = "",
    callees: tuple[str, ...] = (),
    kind: str = "",
    same_value: bool = True,
) -> Counterpart:
    return Counterpart(names, advice, callees, kind, same_value)


def _advise(advice: str, callees: tuple[str, ...] = (), kind: str = "") -> Counterpart:
    return Counterpart((), advice, callees, kind)


_COSINE_ALPHA = _to(
    "alpha",
    advice="alpha is the final value as a fraction of init_value",
    callees=("cosine_decay_schedule",),
    same_value=False,
)
_TOTAL_LENGTH = (
    _to(
        "decay_steps",
        advice="the schedule's whole length, warmup included",
        callees=("warmup_cosine_decay_schedule",),
    ),
    _to("decay_steps"),
    _to(
        "transition_steps",
        callees=(
            "linear_schedule",
            "polynomial_schedule",
            "linear_onecycle_schedule",
            "cosine_onecycle_schedule",
        ),
    ),
    _advise(
        "{callee} has no total length: its transition_steps is the number of "
        "steps over which the value is multiplied by decay_rate once",
        callees=("exponential_decay", "warmup_exponential_decay_schedule"),
    ),
)
_WEIGHT_DECAY = (
    _to("weight_decay"),
    _to("weight_decay_rate"),
    _advise(
        "{callee} has no weight decay: gradax.chain(gradax.add_decayed_weights"
        "({value}), gradax.{callee}(...)) adds it to the gradients, as "
        "torch's weight_decay does (L2); torch's AdamW, decoupled, is gradax.adamw",
        kind="transformation",
    ),
)
_SCHEDULE_AS_RATE = (
    _to("learning_rate", advice="a schedule is passed as the learning rate"),
)
_START_VALUE = (_to("learning_rate"), _to("init_value"))
_PEAK_VALUE = (_to("peak_value"), _to("learning_rate"))
_END_VALUE = (_to("end_value"), _COSINE_ALPHA)
_CLIP_BY_NORM = (
    _advise(
        "clip with a transformation chained before it: gradax.chain("
        "gradax.clip_by_global_norm({value}), gradax.{callee}(...))",
        kind="transformation",
    ),
)
_TORCH_SWITCH = (
    _advise(
        "a switch of torch's implementation; gradax's update is compiled by "
        "jax.jit, so drop it",
        kind="transformation",
    ),
)
_WARMUP = (_to("warmup_steps"),)
# optax's contrib optimizers that take the moments' decays as one tuple.
_IN_BETAS = _to("betas", advice="one tuple of the decays", same_value=False)


FOREIGN_KEYWORDS: Mapping[str, tuple[Counterpart, ...]] = {
    # Learning rates: torch's `lr`, older names of a schedule, Keras'
    # schedules (`initial_learning_rate`, `warmup_target`), torch's
    # OneCycleLR and CosineAnnealingLR (`max_lr`, `eta_min`).
    "lr": (
        _to("learning_rate"),
        _to("init_value", kind="schedule"),
        _to("value", callees=("constant_schedule",)),
    ),
    "learning_rate": (
        _to("init_value", kind="schedule"),
        _to("value", callees=("constant_schedule",)),
    ),
    "lr_schedule": _SCHEDULE_AS_RATE,
    "lr_scheduler": _SCHEDULE_AS_RATE,
    "learning_rate_fn": _SCHEDULE_AS_RATE,
    "learning_rate_schedule": _SCHEDULE_AS_RATE,
    "schedule": _SCHEDULE_AS_RATE,
    "init_lr": _START_VALUE,
    "initial_lr": _START_VALUE,
    "base_lr": _START_VALUE,
    "initial_learning_rate": _START_VALUE,
    "initial_value": (_to("init_value"),),
    "start_value": (_to("init_value"),),
    "max_lr": _PEAK_VALUE,
    "peak_lr": _PEAK_VALUE,
    "peak_learning_rate": _PEAK_VALUE,
    "warmup_target": (_to("peak_value"),),
    "peak_value": (
        _to(
            "init_value",
            advice="{callee} starts at its peak",
            callees=("cosine_decay_schedule",),
        ),
    ),
    "eta_min": _END_VALUE,
    "min_lr": _END_VALUE,
    "end_lr": _END_VALUE,
    "final_lr": _END_VALUE,
    "end_learning_rate": _END_VALUE,
    "min_learning_rate": _END_VALUE,
    "min_value": _END_VALUE,
    "final_value": _END_VALUE,
    "end_value": (_COSINE_ALPHA,),
    # Moment decays: torch's `betas` tuple, Keras' and flax.optim's
    # `beta_1`/`beta1`, a momentum where gradax names Adam's `b1` or
    # Muon's `beta`.
    "betas": (
        _to("b1", "b2", "b3", advice="split the tuple"),
        _to("b1", "b2", advice="split the tuple"),
        _to("beta", "beta2", advice="split the tuple"),
    ),
    "beta1": (_to("b1"), _to("beta"), _IN_BETAS),
    "beta_1": (_to("b1"), _to("beta"), _IN_BETAS),
    "b1": (_to("beta"), _to("momentum"), _IN_BETAS),
    "beta2": (_to("b2"), _IN_BETAS),
    "beta_2": (_to("b2"), _to("beta2"), _IN_BETAS),
    "b2": (_to("beta2"), _IN_BETAS),
    "beta3": (_to("b3"), _IN_BETAS),
    "beta_3": (_to("b3"), _to("beta3"), _IN_BETAS),
    "momentum": (
        _to("b1"),
        _to("beta"),
        _to("decay", callees=("trace", "ema")),
    ),
    # RMSprop's decay of the squared gradients: torch's `alpha`, Keras' `rho`.
    "alpha": (_to("decay", callees=("rmsprop", "scale_by_rms")),),
    "rho": (_to("decay", callees=("rmsprop", "scale_by_rms")),),
    "use_nesterov": (_to("nesterov"),),
    "nesterov_momentum": (_to("nesterov"),),
    "epsilon": (_to("eps"),),
    "eps": (_to("epsilon"),),
    "adam_epsilon": (_to("adam_eps"), _to("eps")),
    # Weight decay: Keras' and Hugging Face's `weight_decay_rate`, short
    # names, and torch's coupled form on optimizers that have none in optax.
    "weight_decay": (_to("weight_decay_rate"), *_WEIGHT_DECAY[2:]),
    "weight_decay_rate": (_WEIGHT_DECAY[0], _WEIGHT_DECAY[2]),
    "wd": _WEIGHT_DECAY,
    "decay": (
        _to(
            "weight_decay",
            advice=(
                "if you meant Keras' legacy learning-rate decay, pass a "
                "schedule as the learning rate instead"
            ),
        ),
        _to("weight_decay_rate"),
    ),
    "decoupled_weight_decay": (
        _advise(
            "decoupled weight decay is its own optimizer in gradax: "
            "gradax.adamw for Adam",
            kind="transformation",
        ),
    ),
    "amsgrad": (
        _advise(
            "AMSGrad is its own optimizer in gradax: gradax.amsgrad",
            kind="transformation",
        ),
    ),
    "maximize": (
        _advise(
            "gradax descends: negate the loss, or chain gradax.scale(-1.0) "
            "before the optimizer",
            kind="transformation",
        ),
    ),
    # Gradient clipping, which Keras and Hugging Face give the optimizer.
    "clipnorm": _CLIP_BY_NORM,
    "global_clipnorm": _CLIP_BY_NORM,
    "max_grad_norm": _CLIP_BY_NORM,
    "grad_clip": _CLIP_BY_NORM,
    "clipvalue": (
        _advise(
            "clip with a transformation chained before it: gradax.chain("
            "gradax.clip({value}), gradax.{callee}(...))",
            kind="transformation",
        ),
    ),
    "foreach": _TORCH_SWITCH,
    "fused": _TORCH_SWITCH,
    "capturable": _TORCH_SWITCH,
    "differentiable": _TORCH_SWITCH,
    # Schedule lengths: torch's schedulers (`total_steps`, `T_max`,
    # `total_iters`), Hugging Face's `num_training_steps`, Keras' `decay_steps`.
    "total_steps": _TOTAL_LENGTH,
    "num_steps": _TOTAL_LENGTH,
    "max_steps": _TOTAL_LENGTH,
    "train_steps": _TOTAL_LENGTH,
    "num_training_steps": _TOTAL_LENGTH,
    "T_max": _TOTAL_LENGTH,
    "total_iters": _TOTAL_LENGTH,
    "max_iters": _TOTAL_LENGTH,
    "decay_steps": (
        _to("transition_steps"),
        _advise(
            "{callee} takes total_steps and decay_fraction (the decay's share "
            "of total_steps)",
            callees=("warmup_stable_decay_schedule",),
        ),
    ),
    "num_warmup_steps": _WARMUP,
    "warmup": _WARMUP,
    "warmup_iters": _WARMUP,
    "warmup_steps": (
        _advise(
            "{callee} has no warmup: gradax.warmup_cosine_decay_schedule(...) has",
            callees=("cosine_decay_schedule",),
        ),
        _advise(
            "{callee} has no warmup: gradax.warmup_exponential_decay_schedule(...) has",
            callees=("exponential_decay",),
        ),
        _advise(
            "{callee} has no warmup: gradax.warmup_constant_schedule(...) has",
            callees=("constant_schedule",),
        ),
    ),
    # torch's StepLR and ExponentialLR, Keras' PiecewiseConstantDecay.
    "gamma": (_to("decay_rate", kind="schedule"),),
    "step_size": (
        _to(
            "transition_steps",
            advice="with staircase=True for torch's StepLR",
            callees=("exponential_decay", "warmup_exponential_decay_schedule"),
        ),
    ),
    "milestones": (
        _advise(
            "{callee} takes boundaries_and_scales, a dict {{step: factor}}: "
            "{{m: gamma for m in milestones}} for torch's MultiStepLR",
            callees=("piecewise_constant_schedule", "piecewise_interpolate_schedule"),
        ),
    ),
    "boundaries": (
        _advise(
            "{callee} takes boundaries_and_scales, a dict {{step: factor}} "
            "whose factors multiply the value (Keras' values are the values)",
            callees=("piecewise_constant_schedule", "piecewise_interpolate_schedule"),
        ),
    ),
    "values": (
        _advise(
            "{callee} takes init_value and boundaries_and_scales, a dict "
            "{{step: factor}} whose factors multiply the value",
            callees=("piecewise_constant_schedule", "piecewise_interpolate_schedule"),
        ),
    ),
    "anneal_strategy": (
        _advise(
            "gradax has one schedule per shape: gradax.cosine_onecycle_schedule "
            "and gradax.linear_onecycle_schedule",
            callees=("cosine_onecycle_schedule", "linear_onecycle_schedule"),
        ),
    ),
}
"""Each foreign keyword's readings in gradax, tried in order (see the module)."""


def callee_kind(callee: Any) -> str:
    """ "transformation", "schedule" or "" (a plain function, another class)."""
    from .hyper import Schedule, StatefulSchedule
    from .protocol import GradientTransformation

    if isinstance(callee, type):
        if issubclass(callee, GradientTransformation):
            return "transformation"
        if issubclass(callee, (Schedule, StatefulSchedule)):
            return "schedule"
    return ""


def pick_counterpart(
    keyword: str, callee: str, kind: str, parameters: Any
) -> Counterpart | None:
    """The table's row for `keyword` at this callee, or None."""
    for row in FOREIGN_KEYWORDS.get(keyword, ()):
        if row.applies_to(callee, kind, parameters):
            return row
    return None


def _shown(value: Any) -> str:
    """A short literal of `value` for an example call, else `...`."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        text = repr(value)
        if len(text) <= 24:
            return text
    return "..."


def _example(row: Counterpart, value: Any) -> str:
    """`b1=0.9, b2=0.95` for a tuple to split, `learning_rate=0.001` else."""
    names = row.names
    if not row.same_value:
        return ", ".join(f"{n}=..." for n in names)
    if len(names) == 1:
        return f"{names[0]}={_shown(value)}"
    if isinstance(value, (tuple, list)) and len(value) == len(names):
        return ", ".join(f"{n}={_shown(v)}" for n, v in zip(names, value, strict=True))
    return ", ".join(f"{n}=..." for n in names)


def _hint(
    keyword: str, value: Any, callee: str, kind: str, parameters: Any, where: str
) -> str | None:
    """One keyword's hint, or None where nothing is known of it."""
    row = pick_counterpart(keyword, callee, kind, parameters)
    if row is not None:
        advice = row.advice.format(callee=callee, value=_shown(value))
        if not row.names:
            return f"`{keyword}`: {advice}"
        named = ", ".join(f"`{n}`" for n in row.names)
        advice = f" ({advice})" if advice else ""
        return (
            f"`{keyword}` is {named} in {where}{advice}: "
            f"{callee}({_example(row, value)})"
        )
    if keyword in FOREIGN_KEYWORDS:
        # A keyword of another library that this callee has no use for: a
        # close spelling would be a guess (`total_steps` is not `ns_steps`).
        return None
    close = difflib.get_close_matches(keyword, list(parameters), n=3)
    if close:
        options = " or ".join(f"`{c}`" for c in close)
        return f"`{keyword}`: did you mean {options}?"
    return None


def keyword_hints(
    callee: str,
    kind: str,
    parameters: Any,
    unknown: Mapping[str, Any],
    where: str = "gradax",
) -> tuple[list[str], list[str]]:
    """A hint line per keyword of `unknown` (name: value) that has one.

    Returns the lines and the keywords that got none (the caller then lists
    the arguments the callee takes).
    """
    lines, unexplained = [], []
    for keyword, value in unknown.items():
        line = _hint(keyword, value, callee, kind, parameters, where)
        if line is None:
            unexplained.append(keyword)
        else:
            lines.append(line)
    return lines, unexplained


def _accepted(signature: inspect.Signature) -> dict[str, inspect.Parameter] | None:
    """The keywords a call may name, or None where it takes any (`**kwargs`)."""
    parameters = signature.parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return None
    return {
        name: p
        for name, p in parameters.items()
        if p.kind
        in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }


def _listing(signature: inspect.Signature) -> str:
    """The arguments a call takes, as a user would write them."""
    shown = []
    for name, p in signature.parameters.items():
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            shown.append(f"*{name}")
        elif p.kind is inspect.Parameter.VAR_KEYWORD:
            shown.append(f"**{name}")
        else:
            shown.append(name)
    return ", ".join(shown) if shown else "no arguments"


def unknown_keyword_error(
    callee: Callable[..., Any],
    kwargs: Mapping[str, Any],
    error: TypeError,
    signature: inspect.Signature | None = None,
) -> TypeError | None:
    """A clearer error for a call of `callee` that failed with `error`.

    None unless some keyword of `kwargs` is not an argument of `callee`
    (the error was then about something else: leave it as it is). The
    message keeps Python's, and adds a line per unknown keyword: its gradax
    name from :data:`FOREIGN_KEYWORDS`, a close spelling, or, where neither
    is known, the arguments the callee takes.
    """
    try:
        if signature is None:
            signature = inspect.signature(callee)
    except (TypeError, ValueError):
        return None
    accepted = _accepted(signature)
    if accepted is None:
        return None
    unknown = {k: v for k, v in kwargs.items() if k not in accepted}
    if not unknown:
        return None
    name = getattr(callee, "__name__", type(callee).__name__)
    module = getattr(callee, "__module__", "") or ""
    if module.split(".")[0] == "gradax":
        where = "gradax"
    else:  # a user's class or factory (`inject_hyperparams(my_factory)`)
        where = "this call" if name.startswith("<") else name
    lines, unexplained = keyword_hints(
        name, callee_kind(callee), accepted, unknown, where
    )
    if unexplained:
        missing = ", ".join(f"`{k}`" for k in unexplained)
        noun = "argument" if len(unexplained) == 1 else "arguments"
        lines.append(f"{name} has no {noun} {missing}; it takes: {_listing(signature)}")
    return TypeError("\n  ".join([str(error), *lines]))
