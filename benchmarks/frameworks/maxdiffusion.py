"""maxdiffusion: ``max_utils.create_learning_rate_schedule`` (a two-piece
``join_schedules``) and ``max_utils.create_optimizer`` as its checkpointers'
``_create_optimizer`` calls them, applied through a flax ``TrainState``; and
the stable-diffusion trainer's clipping, which calls
``optax.clip_by_global_norm(max_grad_norm).update(grad, unet_state, None)``
with the TrainState in the optimizer state's place.
"""

import sys
import types
from pathlib import Path

from ._harness import Case, stand_in

SOURCES = {"AI-Hypercomputer/maxdiffusion": ["src/maxdiffusion/max_utils.py"]}


def prepare(root: Path) -> None:
    sys.path.insert(0, str(root / "src"))
    # max_utils' imports for logging, checkpoints, TPU attention kernels,
    # tensorboard and cloud storage; the optimizer functions use none of them.
    stand_in(
        [
            "maxdiffusion.max_logging",
            "maxdiffusion.checkpointing",
            "jax.experimental.pallas.ops.tpu",
            "tensorboardX",
            "google.cloud",
            "google_cloud_mldiagnostics",
            "transformers",
        ]
    )


def _config(**overrides):
    # base_xl.yml's optimizer settings with a short schedule.
    config = dict(
        learning_rate=4e-3,
        learning_rate_schedule_steps=10,
        warmup_steps_fraction=0.2,
        max_train_steps=10,
        adam_b1=0.9,
        adam_b2=0.999,
        adam_eps=1e-8,
        adam_weight_decay=1e-2,
        max_grad_norm=1.0,
        max_grad_value=0.05,
        opt_enable_grad_global_norm_clipping=False,
        opt_enable_grad_clipping=False,
    )
    return types.SimpleNamespace(**(config | overrides))


def _case(config, trainer_clip=False) -> Case:
    import optax
    from flax.training import train_state
    from maxdiffusion import max_utils

    schedule = max_utils.create_learning_rate_schedule(
        config.learning_rate,
        config.learning_rate_schedule_steps,
        config.warmup_steps_fraction,
        config.max_train_steps,
    )
    tx = max_utils.create_optimizer(config, schedule)

    def init(params):
        return train_state.TrainState.create(apply_fn=None, params=params, tx=tx)

    def step(params, grads, state):
        if trainer_clip:  # stable_diffusion_trainer.py's train step
            clip = optax.clip_by_global_norm(config.max_grad_norm)
            grads, _ = clip.update(grads, state, None)
        state = state.apply_gradients(grads=grads)
        return state.params, state

    return Case(init=init, step=step, probe=lambda s: schedule(s.step))


CONFIGS = {
    "adamw (base config)": lambda: _case(_config()),
    "adamw, global-norm and value clipping": lambda: _case(
        _config(
            opt_enable_grad_global_norm_clipping=True, opt_enable_grad_clipping=True
        )
    ),
    "trainer: clip_by_global_norm().update(grad, train_state)": lambda: _case(
        _config(), trainer_clip=True
    ),
}
