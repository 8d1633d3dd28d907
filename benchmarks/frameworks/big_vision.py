"""big_vision: ``big_vision.optax.make(config, params, sched_kw=...)`` from a
``ml_collections`` config as its trainers write them, with its own schedule
(``utils.create_learning_rate_schedule``), masks by parameter-name regex, and
its optimizers registered on the optax module itself
(``optax.big_vision.scale_by_adafactor``, ``momentum_hp``).

``get_count`` (what its trainers read back for the step) is probed each step.
"""

import sys
from pathlib import Path

from ._harness import Case, stand_in

SOURCES = {"google-research/big_vision": ["big_vision/optax.py", "big_vision/utils.py"]}


def prepare(root: Path) -> None:
    sys.path.insert(0, str(root))
    # utils.py's data-pipeline registry, einops, tensorflow's gfile and array
    # serialization serve checkpoints and preprocessing, not the optimizer.
    stand_in(
        [
            "big_vision.pp",
            "einops",
            "tensorflow",
            "jax.experimental.array_serialization",
        ]
    )


def _make(**overrides):
    import ml_collections
    from big_vision import optax as bv_optax

    from ._harness import params

    # configs/vit_i1k.py's optimizer section, with a short schedule.
    config = dict(
        optax_name="scale_by_adam",
        optax=dict(mu_dtype="float32"),
        grad_clip_norm=1.0,
        lr=1e-2,
        wd=1e-4,
        schedule=dict(warmup_steps=2, decay_type="cosine"),
    )
    config = ml_collections.ConfigDict(config | overrides)
    p = params()
    tx, _ = bv_optax.make(config, p, sched_kw=dict(total_steps=10))
    return Case(tx=tx, params=p, probe=lambda s: bv_optax.get_count(s, jittable=True))


CONFIGS = {
    "scale_by_adam, cosine, wd, clip (vit_i1k)": _make,
    "scale_by_adam, mu_dtype 'bfloat16' (string)": lambda: _make(
        optax=dict(mu_dtype="bfloat16")
    ),
    "frozen all but head (schedule None)": lambda: _make(
        schedule=[
            ("head/.*", dict(warmup_steps=2, decay_type="cosine")),
            (".*", None),
        ]
    ),
    "big_vision.scale_by_adafactor, lr_mults": lambda: _make(
        optax_name="big_vision.scale_by_adafactor",
        optax=dict(min_dim_size_to_factor=8, momentum=0.9),
        lr_mults=[("embed/.*", 0.1)],
        wd_mults=[(".*/kernel$", 1.0), ("embed/.*", 0.5)],
    ),
    "big_vision.momentum_hp (bfloat16 trace)": lambda: _make(
        optax_name="big_vision.momentum_hp", optax={}
    ),
}
