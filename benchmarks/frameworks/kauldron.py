"""kauldron: ``kd.optim`` (named_chain, partial_updates, select/exclude masks,
decay_to_init, ema_params) and the multi-optimizer of
``kauldron/contrib/train/multi_train_step.py``, a NamedTuple subclass of
``optax.GradientTransformationExtraArgs`` with an extra attribute.

Only ``kauldron/optim`` and that one contrib module are archived, so
``kauldron`` is a namespace package and its heavy ``__init__`` (kd, konfig,
data pipelines) never runs.
"""

import sys
from pathlib import Path

from ._harness import Case, stand_in

SOURCES = {
    "google-research/kauldron": [
        "kauldron/optim",
        "kauldron/contrib/train/multi_train_step.py",
    ]
}


def prepare(root: Path) -> None:
    sys.path.insert(0, str(root))
    # kd (the whole framework), its typing and checkpoint modules: used for
    # annotations, a base class of UseEmaParams and the trainer, not for the
    # optimizer.
    stand_in(
        [
            "kauldron.kd",
            "kauldron.typing",
            "kauldron.ktyping",
            "kauldron.kontext",
            "kauldron.checkpoints",
        ]
    )


def _named_chain_adamw():
    import optax
    from kauldron import optim

    # The named_chain docstring's configuration, with a schedule.
    schedule = optax.warmup_cosine_decay_schedule(0.0, 1e-2, 2, 10)
    return Case(
        tx=optim.named_chain(
            clip=optax.clip_by_global_norm(max_norm=1.0),
            adam=optax.scale_by_adam(b1=0.95),
            decay=optax.add_decayed_weights(weight_decay=0.1),
            lr=optax.scale_by_learning_rate(schedule),
        )
    )


def _partial_updates():
    import optax
    from kauldron import optim

    # Fine-tune only the head and the norm; everything else frozen.
    mask = optim.select(["head", "norm"])
    return Case(tx=optim.partial_updates(optax.adamw(1e-2), mask))


def _decay_to_init_ema():
    import optax
    from kauldron import optim

    return Case(
        tx=optim.named_chain(
            adam=optax.scale_by_adam(),
            decay_to_init=optim.decay_to_init(0.1, mask=optim.exclude("bias")),
            lr=optax.scale_by_learning_rate(1e-2),
            ema_params=optim.ema_params(decay=0.9),
        )
    )


def _multi_optimizer():
    import jax
    import optax
    from kauldron.contrib.train import multi_train_step

    mgt = multi_train_step.multi_optimizer(
        reconstruction=optax.adam(1e-2),
        regularizer=optax.chain(optax.clip(0.05), optax.sgd(1e-3, momentum=0.9)),
    )

    # MultiTrainStep._step: one update per loss (its own gradient) on its own
    # state, the updates summed and applied once.
    def step(params, grads, state):
        new_states, updates = {}, []
        for k, (name, opt) in enumerate(mgt.loss_to_optimizer.items()):
            loss_grads = jax.tree.map(lambda g, k=k: g * (k + 1.0), grads)
            u, new_states[name] = opt.update(loss_grads, state[name], params)
            updates.append(u)
        total = jax.tree.map(lambda *u: sum(u), *updates)
        return optax.apply_updates(params, total), new_states

    return Case(init=mgt.init, step=step)


CONFIGS = {
    "named_chain adam+decay (docstring)": _named_chain_adamw,
    "partial_updates (freeze)": _partial_updates,
    "decay_to_init + ema_params": _decay_to_init_ema,
    "multi_optimizer (GradientTransformation subclass)": _multi_optimizer,
}
