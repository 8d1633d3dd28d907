"""Tunix: the optimizer of its CLI config (``cli.config.HyperParameters.
create_optimizer`` on the ``optimizer_config`` section of ``cli/base_config.yaml``)
trained by its SFT trainer's own step (``sft.peft_trainer.PeftTrainer.
_train_step``, under ``nnx.jit`` as ``jit_train_and_eval_step`` does) on a
``flax.nnx`` model through ``nnx.Optimizer``.

``create_optimizer`` looks the optimizer and the schedule up by name on the
optax module (``getattr(optax, opt_type)``, ``optax.schedules``), fills each
one's arguments by reading its ``inspect.signature`` against the config's
keys, and wraps the optimizer in ``optax.inject_hyperparams(...,
hyperparam_dtype=float32)``. The step casts the optimizer state back to its
dtypes after every update and, with gradient accumulation, accumulates in
its own ``GradientAccumulator`` and updates under ``nnx.cond``. What the
trainer logs as the learning rate (``_try_get_learning_rate``, which reads
``opt_state.hyperparams`` or the first chain part that has them) is probed
each step.

The trainer object is made without its ``__init__`` (which builds checkpoint,
metrics and profiler services), with the attributes the step reads; the
model holds the suite's parameters as ``nnx.Param`` and its loss is linear in
them, so the gradients are the suite's fixed ones.
"""

import sys
from pathlib import Path

from ._harness import SHAPES, Case, params, stand_in

SOURCES = {"google/tunix": ["tunix/cli/config.py", "tunix/sft/peft_trainer.py"]}

# cli/base_config.yaml's optimizer_config, with its 10-step schedule.
BASE_OPTIMIZER_CONFIG = dict(
    learning_rate=1e-5,
    opt_type="adamw",
    schedule_type="warmup_cosine_decay_schedule",
    value=1e-5,
    peak_value=3e-5,
    init_value=0.0,
    end_value=0.0,
    warmup_ratio=0.1,
    b1=0.9,
    b2=0.99,
    weight_decay=0.1,
    warmup_steps=5,
    decay_steps=10,
    max_grad_norm=0.1,
)


def prepare(root: Path) -> None:
    # tunix/__init__ imports every trainer and the samplers; without it the
    # two modules load from a namespace package.
    sys.path.insert(0, str(root))
    # The CLI's YAML and .env loading, and the services the trainer's
    # __init__ and its logging use (checkpoints, metrics, perf tracing,
    # profiler, meshes); _train_step reads none of them.
    stand_in(
        [
            "dotenv",
            "omegaconf",
            "tunix.common",
            "tunix.perf",
            "tunix.utils",
            "tunix.sft.checkpoint_manager",
            "tunix.sft.checkpoint_options",
            "tunix.sft.hooks",
            "tunix.sft.inflight_throttler",
            "tunix.sft.metrics_logger",
            "tunix.sft.profiler",
            "tunix.sft.progress_bar",
            "tunix.sft.sharding_utils",
            "tunix.sft.utils",
        ]
    )


class TrainingConfig:
    """The two things ``_train_step`` reads from tunix's TrainingConfig."""

    max_seq_token_per_tpu = None

    def __init__(self, gradient_accumulation_steps: int):
        self.gradient_accumulation_steps = gradient_accumulation_steps

    def get_with_default(self, name, default):
        return getattr(self, name, default)


def _model():
    from flax import nnx

    class Group(nnx.Module):
        def __init__(self, arrays):
            for name, value in arrays.items():
                setattr(self, name, nnx.Param(value))

    class Model(nnx.Module):
        def __init__(self, tree):
            for name, arrays in tree.items():
                setattr(self, name, Group(arrays))

    return Model(params(SHAPES))


def _linear_loss(model, gradient):
    import jax
    import jax.numpy as jnp
    from flax import nnx

    values = nnx.state(model, nnx.Param).to_pure_dict()
    terms = jax.tree.map(lambda p, g: jnp.sum(p * g), values, gradient)
    return sum(jax.tree.leaves(terms))


def _case(accumulate: int = 1, **optimizer_config) -> Case:
    import jax
    import jax.numpy as jnp
    from flax import nnx
    from tunix.cli import config as cli_config
    from tunix.sft import peft_trainer

    hyperparameters = object.__new__(cli_config.HyperParameters)
    # A key set to None here is left out of the config (the YAML without it).
    section = BASE_OPTIMIZER_CONFIG | optimizer_config
    section = {k: v for k, v in section.items() if v is not None}
    hyperparameters.config = {"optimizer_config": section}
    tx = hyperparameters.create_optimizer("optimizer_config")

    model = _model()
    trainer = object.__new__(peft_trainer.PeftTrainer)
    trainer.config = TrainingConfig(accumulate)
    trainer.loss_fn = _linear_loss
    trainer.gen_model_input_fn = lambda x: x
    trainer._has_aux = False
    trainer._lora_enabled = False
    trainer.optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
    accumulator = peft_trainer.GradientAccumulator(
        model, nnx.Param, allocate_grads=accumulate > 1
    )
    train_step = nnx.jit(trainer._train_step)
    iter_steps = [0]

    def observed():
        # The optax state tree as nnx.Optimizer holds it (its leaves wrapped
        # in OptState variables), unwrapped.
        is_variable = lambda x: isinstance(x, nnx.Variable)  # noqa: E731
        opt_state = trainer.optimizer.opt_state
        return (
            jax.tree.map(lambda v: v.get_value(), opt_state, is_leaf=is_variable),
            nnx.state(accumulator).to_pure_dict(),
            {"learning_rate": trainer._try_get_learning_rate()},
        )

    def init(_):
        return observed()

    def step(_, grads, state):
        # PeftTrainer.train's cadence: an update every `accumulate` steps.
        iter_steps[0] += 1
        is_update_step = jnp.array(iter_steps[0] % accumulate == 0, dtype=jnp.bool_)
        loss, _, grad_norm = train_step(
            model,
            trainer.optimizer,
            accumulator,
            {"gradient": grads},
            is_update_step,
        )
        values = nnx.state(model, nnx.Param).to_pure_dict()
        return values, (*observed(), {"loss": loss, "grad_norm": grad_norm})

    # The step is nnx.jit-ed as the trainer jits it; models stay outside.
    return Case(init=init, step=step, params=params(SHAPES), jit=False)


CONFIGS = {
    "base_config optimizer (adamw, warmup_cosine_decay_schedule)": _case,
    "adamw, gradient_accumulation_steps 2 (GradientAccumulator, nnx.cond)": lambda: (
        _case(accumulate=2)
    ),
    # Without learning_rate in the section, create_optimizer hands the
    # optimizer the schedule (with it, as in base_config, the number wins).
    "lion, linear_schedule": lambda: _case(
        opt_type="lion",
        learning_rate=None,
        schedule_type="linear_schedule",
        init_value=1e-2,
        end_value=1e-3,
        transition_steps=10,
    ),
    "sgd, momentum 0.9, nesterov, no schedule": lambda: _case(
        opt_type="sgd",
        schedule_type=None,
        learning_rate=1e-2,
        momentum=0.9,
        nesterov=True,
    ),
    "adamw, warmup_cosine_decay_schedule as the learning rate": lambda: _case(
        learning_rate=None, peak_value=1e-2
    ),
}
