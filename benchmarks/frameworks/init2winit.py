"""init2winit: ``trainer_lib.training_algorithm.OptaxTrainingAlgorithm``, the
training algorithm of its default trainer, from hyperparameters as its configs
give them (``get_default_training_hparams`` of an optimizer name, then
overrides).

Its ``init_optimizer_state`` builds the optimizer with
``optimizer_lib.optimizers.get_optimizer``: every optimizer wrapped in its
``static_inject_hyperparams`` (``optax.inject_hyperparams`` with every
argument but the learning rate static), optionally inside its gradient
accumulator (a transformation of its own two functions whose state repeats
``hyperparams``) or SAM (a transformation of its own two functions whose
third argument is ``grad_fn_params_tuple``), and its ``kitchen_sink`` (chains
and masks from a config dict). Its ``update_params`` evaluates its own numpy
schedule in Python, writes that learning rate into every ``hyperparams`` of
the state with ``optax.tree_utils.tree_set`` (filtered by ``NamedTupleKey``),
computes the gradient with ``jax.value_and_grad`` and calls the update through
``optimizers._wrap_update_fn``, which passes ``params=params``, or for SAM
``grad_fn_params_tuple=(grad_fn, params)`` by keyword and no params.
``fetch_learning_rate``, what it logs, reads the state back with
``tree_get_all_with_path`` (probed each step).

The model is replaced by one whose training cost is linear plus a small
quadratic in the parameters (so SAM's second gradient differs from the
first); with the linear part the suite's fixed gradients.
"""

import sys
from pathlib import Path

from ._harness import Case, params

SOURCES = {
    "google/init2winit": [
        "init2winit/__init__.py",
        "init2winit/schedules.py",
        "init2winit/model_lib/__init__.py",
        "init2winit/model_lib/model_utils.py",
        "init2winit/model_lib/normalization.py",
        "init2winit/optimizer_lib",
        "init2winit/trainer_lib/training_algorithm.py",
    ]
}


def prepare(root: Path) -> None:
    sys.path.insert(0, str(root))


class Model:
    """What the training algorithm uses of an init2winit model."""

    def training_cost(self, params, batch, batch_stats=None, dropout_rng=None):
        import jax
        import jax.numpy as jnp

        del batch_stats, dropout_rng
        linear = jax.tree.map(lambda p, g: jnp.sum(p * g), params, batch)
        quadratic = jax.tree.map(lambda p: 0.05 * jnp.sum(p * p), params)
        cost = sum(jax.tree.leaves(linear)) + sum(jax.tree.leaves(quadratic))
        return cost, {}


def _case(optimizer: str, opt_hparams=None, **overrides) -> Case:
    import jax
    from init2winit.optimizer_lib import optimizers
    from init2winit.trainer_lib import training_algorithm

    algorithm_class = training_algorithm.OptaxTrainingAlgorithm
    hps = algorithm_class.get_default_training_hparams(optimizer_name=optimizer)
    hps.batch_size = 8
    hps.lr_hparams = {"base_lr": 1e-2, "schedule": "cosine"}
    hps.opt_hparams.update(opt_hparams or {})
    hps.update(overrides)
    algorithm = algorithm_class(hps, Model(), num_train_steps=10)
    rng = jax.random.PRNGKey(0)
    step_index = [0]

    def init(p):
        return algorithm.init_optimizer_state(params=p)

    def step(params, grads, state):
        state, params, _, _, _ = algorithm.update_params(
            params=params,
            model_state={},
            optimizer_state=state,
            batch=grads,
            global_step=step_index[0],
            rng=rng,
        )
        step_index[0] += 1
        return params, state

    # update_params jits its own step; the schedule is numpy, outside jit.
    return Case(
        init=init,
        step=step,
        params=params(),
        probe=optimizers.fetch_learning_rate,
        jit=False,
    )


def _kitchen_sink() -> Case:
    # An Adam-like chain from its registry (debiased RMS preconditioning,
    # then Nesterov momentum), and decoupled weight decay masked off biases
    # and BatchNorm parameters by the registry's 'bias_bn' mask. (Its 'join'
    # combinators fail with optax too: grafting gets the joined updates by
    # keyword, and 'sum' calls jax.tree_multimap, gone from jax.)
    config = {
        "0": {
            "element": "precondition_by_rms",
            "hps": {"one_minus_decay": 0.001, "debias": True},
        },
        "1": {"element": "nesterov", "hps": {"decay": 0.9}},
        "2": {
            "element": "add_decayed_weights",
            "hps": {"weight_decay": 1e-3},
            "mask": "bias_bn",
        },
    }
    return _case("kitchen_sink", opt_hparams=config)


CONFIGS = {
    "adam (trainer defaults, cosine lr injected)": lambda: _case(
        "adam", opt_hparams={"weight_decay": 1e-4}
    ),
    "nesterov, weight decay, grad_clip": lambda: _case(
        "nesterov", opt_hparams={"weight_decay": 1e-4, "grad_clip": 1.0}
    ),
    "momentum, gradient accumulation (batch 8 of 16)": lambda: _case(
        "momentum", total_accumulated_batch_size=16
    ),
    "adam + SAM (update gets grad_fn_params_tuple=(grad_fn, params))": lambda: _case(
        "adam", opt_hparams={"use_sam": True, "rho": 0.05, "grad_clip": 1.0}
    ),
    "kitchen_sink: rms preconditioning, nesterov, bias_bn-masked decay": _kitchen_sink,
}
