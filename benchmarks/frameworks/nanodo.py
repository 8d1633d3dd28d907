"""nanodo: ``nanodo.optimizer.get_optimizer`` and ``get_learning_rate_schedule``
from its default ``ml_collections`` config (``configs/default.py``), driven by
its own ``train._train_step`` on a flax ``TrainState``.

Every nanodo optimizer is wrapped in ``optax.MultiSteps`` (gradient
accumulation, one inner step by default), and the train step reads that
wrapper's state: the trainer's step is ``opt_state.gradient_step + 1``, and
``metrics.get_metrics`` averages ``opt_state.acc_grads`` with
``opt_state.mini_step`` and evaluates the schedule at ``gradient_step``. The
metrics each step returns are compared too. Masks are nanodo's own
(``_params_mask`` on key paths), and ``layerwise_lr_multiplier`` is its own
``GradientTransformation`` (``_scale_by_dict``).

The model is replaced by a loss that is linear in the parameters, so the
gradients the step computes are the suite's fixed ones.
"""

import sys
from pathlib import Path
from typing import Any, NamedTuple

from ._harness import Case, params, stand_in

SOURCES = {
    "google-deepmind/nanodo": [
        "nanodo/__init__.py",
        "nanodo/optimizer.py",
        "nanodo/train.py",
        "nanodo/metrics.py",
        "nanodo/configs/default.py",
    ]
}


def prepare(root: Path) -> None:
    sys.path.insert(0, str(root))
    # train.py's imports for data, evaluation, the model, checkpoints and
    # metric writers; the train step itself uses none of them.
    stand_in(
        [
            "clu",
            "grain",
            "orbax",
            "nanodo.data",
            "nanodo.evaluate",
            "nanodo.loss",
            "nanodo.model_factory",
        ]
    )


class LossAux(NamedTuple):
    """What nanodo's metrics read from a loss's auxiliary output."""

    log_perplexity: Any
    ntokens: Any


def _linear_loss_fn(in_BxL, apply_fn, c):
    """A loss fn factory in the shape of nanodo's ``loss.get_default_loss_fn``:
    the "batch" is the gradient tree, and the loss is linear in the
    parameters, so its gradient is that tree."""
    import jax
    import jax.numpy as jnp

    del apply_fn, c

    def loss_fn(params):
        terms = jax.tree.map(lambda p, g: jnp.sum(p * g), params, in_BxL)
        loss = sum(jax.tree.leaves(terms))
        return loss, LossAux(log_perplexity=loss, ntokens=jnp.float32(64.0))

    return loss_fn


def _case(**opt) -> Case:
    from flax.training.train_state import TrainState
    from nanodo import optimizer, train
    from nanodo.configs import default

    c = default.get_config()
    # The default schedule, shortened to the suite's steps: 2 warmup steps,
    # then a cosine to step 10.
    c.opt.update(dict(num_train_steps=10, warmup_steps=2, peak_learning_rate=1e-2))
    c.opt.update(opt)
    c.log_internal_metrics = False  # per-layer statistics of the model's state

    def init(p):
        # train._init_train_state, without the model and the mesh.
        tx = optimizer.get_optimizer(c.opt)
        return TrainState.create(apply_fn=None, params=p, tx=tx), {}

    def step(_, grads, state):
        train_state, _ = state
        train_state, metrics = train._train_step(
            train_state, grads, c=c, get_loss_fn=_linear_loss_fn
        )
        return train_state.params, (train_state, metrics)

    return Case(init=init, step=step, params=params())


CONFIGS = {
    "default config (adamw, warmup+cosine, wd 0.1)": _case,
    "adamw, grad_accumulation_steps 2, clip, wd exclusions": lambda: _case(
        grad_accumulation_steps=2,
        clip_by_global_norm=1.0,
        weight_decay_exclusion_names=("bias", "scale"),
    ),
    "lion, linear decay, layerwise_lr_multiplier": lambda: _case(
        optimizer="lion",
        decay_type="linear",
        weight_decay=1e-2,
        layerwise_lr_multiplier={"kernel": 3.0, "embed": 0.5},
    ),
    "adafactor, rsqrt decay, independent_weight_decay": lambda: _case(
        optimizer="adafactor",
        decay_type="rsqrt",
        independent_weight_decay=True,
        weight_decay=1e-4,
        weight_decay_exclusion_names=("norm",),
    ),
    "adamw, constant_linear_decay_30p": lambda: _case(
        decay_type="constant_linear_decay_30p"
    ),
}
