"""EasyDeL: its optimizers come from eformer's ``OptimizerFactory.create``,
called as EasyDeL's ``TrainingArguments.get_optimizer_and_scheduler`` calls it
(a ``SchedulerConfig`` of scheduler type, steps, learning rate, end learning
rate and warmup; ``clip_grad``; ``weight_decay``; optimizer keyword
arguments). The factory chains clip, the base optimizer and eformer's scheduled
weight decay, wraps them in ``optax.MultiSteps`` for gradient accumulation and
returns a ``StageLocalGradientTransformation`` (a NamedTuple subclass of
``optax.GradientTransformation``) whose ``apply_gradients_stage_local`` reads
the optax state by hand for pipeline-parallel training.

The stage-local Muon kernel is left out: it unpacks the ``optax.contrib.muon``
state of a later optax and raises NotImplementedError with optax 0.2.8 itself.

EasyDeL's ``training_configurations.py`` imports most of EasyDeL, so the suite
makes the same call itself; only eformer's ``optimizers`` package is archived.
"""

import sys
from pathlib import Path

from ._harness import Case, stand_in

SOURCES = {"erfanzar/eformer": ["eformer/optimizers"]}


def prepare(root: Path) -> None:
    sys.path.insert(0, str(root))
    # eformer's pytree helpers are used by its white_kron (quad/skew) module
    # only, which no configuration here builds.
    stand_in(["eformer.pytree"])


def _create(optimizer, scheduler="cosine", **kwargs):
    from eformer.optimizers import OptimizerFactory, SchedulerConfig

    scheduler_config = SchedulerConfig(
        scheduler_type=scheduler,
        steps=10,
        learning_rate=1e-2,
        learning_rate_end=1e-3 if scheduler == "linear" else None,
        warmup_steps=2,
        exponent=1,
    )
    defaults = dict(clip_grad=1.0, weight_decay=0.01)
    tx, _ = OptimizerFactory.create(
        optimizer_type=optimizer,
        scheduler_config=scheduler_config,
        custom_scheduler=None,
        **(defaults | kwargs),
    )
    return tx


def _stage_local():
    tx = _create("adamw")

    # The pipeline-parallel path: eformer's own leafwise AdamW reading the
    # chain's state (clip, adamw, weight decay) by position and type.
    def step(params, grads, state):
        return tx.apply_gradients_stage_local(
            params=params, grads=grads, opt_state=state
        )

    return Case(init=tx.init, step=step, jit=False)


CONFIGS = {
    "adamw (cosine, clip, decay)": lambda: Case(tx=_create("adamw")),
    "muon (linear)": lambda: Case(tx=_create("muon", scheduler="linear")),
    "adamw, gradient accumulation 2 (MultiSteps)": lambda: Case(
        tx=_create("adamw", gradient_accumulation_steps=2)
    ),
    "adamw, apply_gradients_stage_local": _stage_local,
    "adafactor": lambda: Case(tx=_create("adafactor", clip_grad=None)),
    "lion": lambda: Case(tx=_create("lion")),
    "rmsprop": lambda: Case(tx=_create("rmsprop")),
}
