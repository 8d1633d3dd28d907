"""scenic: its trainers' path (``optimizers.get_optax_optimizer_config`` then
``optimizers.get_optimizer`` with ``lr_schedules.get_learning_rate_fn``, the
config style of ``projects/baselines/configs/imagenet/
optax_imagenet_augreg_vit_config.py``), and the big_vision-style
``scenic.train_lib.optax.make`` with per-regex schedules and frozen parameters.
"""

import sys
from pathlib import Path

from ._harness import Case, params

SOURCES = {
    "google-research/scenic": [
        "scenic/train_lib/optax.py",
        "scenic/train_lib/optimizers.py",
        "scenic/train_lib/lr_schedules.py",
    ]
}

LR_CONFIGS = dict(
    learning_rate_schedule="compound",
    factors="constant * cosine_decay * linear_warmup",
    warmup_steps=2,
    steps_per_cycle=10,
    base_learning_rate=1e-2,
)


def prepare(root: Path) -> None:
    # scenic/__init__ and train_lib/__init__ are not archived (they import the
    # trainers and datasets); the three modules load as a namespace package.
    sys.path.insert(0, str(root))


def _trainer_path(**config):
    import ml_collections
    from scenic.train_lib import lr_schedules, optimizers

    config = ml_collections.ConfigDict(config | {"lr_configs": LR_CONFIGS})
    p = params()
    lr_fn = lr_schedules.get_learning_rate_fn(config)
    tx = optimizers.get_optimizer(
        optimizers.get_optax_optimizer_config(config), lr_fn, p
    )
    return Case(tx=tx, params=p)


def _scenic_optax_make():
    import ml_collections
    from scenic.train_lib import optax as scenic_optax

    schedule = ml_collections.ConfigDict(
        {
            "head": {"re": "head/.*", "lr_configs": LR_CONFIGS},
            "dense": {"re": "dense/.*", "lr_configs": LR_CONFIGS | {"warmup_steps": 4}},
            "frozen": {"re": "(embed|norm)/.*", "lr_configs": None},
        }
    )
    config = ml_collections.ConfigDict(
        dict(
            optax_name="scale_by_adam",
            optax_configs=dict(b1=0.9, b2=0.999),
            max_grad_norm=1.0,
            weight_decay=[(".*kernel.*", 1e-4)],
        )
    )
    p = params()
    tx, _ = scenic_optax.make(config, scenic_optax.make_schedule(schedule), p)
    return Case(tx=tx, params=p, probe=scenic_optax.get_step)


CONFIGS = {
    "adamw, augreg ViT config (no wd on scale/bias, clip)": lambda: _trainer_path(
        optimizer="adamw",
        optimizer_configs=dict(beta1=0.9, beta2=0.999, weight_decay=0.1),
        skip_scale_and_bias_regularization=True,
        grad_clip_configs=dict(clip_method="clip_by_global_norm", clip_value=1.0),
    ),
    "momentum (flax.optim style, wd)": lambda: _trainer_path(
        optimizer="momentum", optimizer_configs=dict(weight_decay=1e-4)
    ),
    "adafactor, weight_decay_rate": lambda: _trainer_path(
        optimizer_configs=dict(optimizer="adafactor", weight_decay_rate=1e-3)
    ),
    "adam, freeze_params_reg_exp": lambda: _trainer_path(
        optimizer_configs=dict(optimizer="adam", freeze_params_reg_exp="embed")
    ),
    "train_lib.optax.make: per-regex schedules, frozen rest": _scenic_optax_make,
}
