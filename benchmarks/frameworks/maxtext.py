"""MaxText: ``optimizers.get_optimizer`` with ``max_utils``' learning-rate
schedule, applied through a flax ``TrainState`` as MaxText's train step does.

The snapshot's MaxText (``MaxText/optimizers.py``) offers adamw, adam_pax (its
own GradientTransformation on optax's ``ScaleByAdamState``) and sgd; gradient
accumulation and NaN handling live in its train step, not in optax.
"""

import sys
import types
from pathlib import Path

from ._harness import Case, stand_in

SOURCES = {"google/maxtext": ["MaxText/optimizers.py", "MaxText/max_utils.py"]}


def prepare(root: Path) -> None:
    # MaxText imports its modules flat (``import max_utils``).
    sys.path.insert(0, str(root / "MaxText"))
    # max_utils' imports besides jax, flax and optax: checkpointing, logging,
    # tensorboard and cloud storage, none of them used by the schedule.
    stand_in(
        [
            "checkpointing",
            "common_types",
            "max_logging",
            "tensorboardX",
            "google.cloud",
            "orbax",
            "etils",
            "jax.experimental.mesh_utils",
        ]
    )


def _config(**overrides):
    # base.yml's optimizer defaults, with a short schedule: 2 warmup steps, a
    # cosine to step 8 and a constant zero until step 10 (three pieces).
    config = dict(
        opt_type="adamw",
        adam_b1=0.9,
        adam_b2=0.95,
        adam_eps=1e-8,
        adam_eps_root=0.0,
        adam_weight_decay=0.1,
        learning_rate=3e-3,
        cosine_learning_rate_final_fraction=0.1,
        warmup_steps_fraction=0.25,
        learning_rate_schedule_steps=8,
        steps=10,
    )
    config.update(overrides)
    return types.SimpleNamespace(**config)


def _train_state_case(config) -> Case:
    import max_utils
    import optimizers
    from flax.training import train_state

    schedule = max_utils.create_learning_rate_schedule(config)
    tx = optimizers.get_optimizer(config, schedule)

    def init(params):
        return train_state.TrainState.create(apply_fn=None, params=params, tx=tx)

    def step(params, grads, state):
        state = state.apply_gradients(grads=grads)
        return state.params, state

    return Case(init=init, step=step, probe=lambda s: schedule(s.step))


CONFIGS = {
    "adamw (default)": lambda: _train_state_case(_config()),
    "adam_pax": lambda: _train_state_case(_config(opt_type="adam_pax")),
    "sgd": lambda: _train_state_case(_config(opt_type="sgd")),
    "adamw, no zero tail (2 schedules)": lambda: _train_state_case(
        _config(learning_rate_schedule_steps=10)
    ),
}
