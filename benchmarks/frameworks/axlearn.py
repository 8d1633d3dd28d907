"""AXLearn: ``axlearn.common.learner.Learner`` built from the learner configs of
its experiment builders (``experiments/text/gpt/common.py``:
``adamw_decoupled_learner_config``, ``adastar_learner_config``, and
``mup_simple_adam_update_transformation``; ``experiments/vision/resnet/
common.py``: ``learner_config``), instantiated and stepped with its own
``Learner.forward_and_backward`` through ``axlearn.common.module.functional``,
as its ``SpmdTrainer`` does (the model is a forward function whose loss is
linear in the parameters, so the gradients are the suite's fixed ones).

AXLearn's optimizers are its own ``PartitionedGradientTransformation``s
(``optimizer_base``: init, update and a partition function) made of optax
pieces (``scale_by_adam``, ``ScaleByScheduleState``, ``EmptyState``,
``safe_int32_increment``, ``MaskedNode``, ``optax._src.numerics``) and its
own (decoupled weight decay scaled per parameter by path regex,
``skip_and_clip_by_global_norm``, AdaStar, parameter EMA). They take
``OptParam`` leaves (value, factorization spec, weight-decay scale) as
``params``. The learner's summaries (learning rate, schedule step, gradient
norm, ...) are compared each step with the state.
"""

import sys
from pathlib import Path

from ._harness import Case, gradients, params, stand_in

SOURCES = {
    "apple/axlearn": [
        "axlearn/__init__.py",
        "axlearn/common",
        "axlearn/vision",
        "axlearn/experiments/__init__.py",
        "axlearn/experiments/trainer_config_utils.py",
        "axlearn/experiments/text/__init__.py",
        "axlearn/experiments/text/common.py",
        "axlearn/experiments/text/gpt/common.py",
        "axlearn/experiments/vision/__init__.py",
        "axlearn/experiments/vision/resnet/common.py",
    ]
}

# Parameter names as AXLearn's transformer layers give them, so that the
# muP-simple rules (regexes on ".../feed_forward/linear1_0/weight") match.
AXLEARN_SHAPES = {
    "emb": {"token_emb": {"weight": (32, 8)}},
    "transformer": {
        "feed_forward": {
            "linear1_0": {"weight": (8, 12)},
            "linear2": {"weight": (12, 8)},
        },
        "norm": {"scale": (8,)},
    },
}


def prepare(root: Path) -> None:
    # The gpt and resnet packages' __init__ import every trainer of theirs;
    # without them the two common.py modules load as namespace packages.
    sys.path.insert(0, str(root))
    # The experiment builders' imports for input pipelines (tensorflow,
    # seqio, tfds, tokenizers), quantization (aqt), fused kernels (tokamax)
    # and job serialization (cloudpickle); a learner uses none of them.
    stand_in(
        [
            "tensorflow",
            "tensorflow_datasets",
            "tensorflow_text",
            "seqio",
            "nltk",
            "aqt",
            "tokamax",
            "cloudpickle",
        ]
    )


def _linear_loss(model_params, inputs):
    """A forward function as the trainer hands the learner one: the loss is
    linear in the parameters, with the suite's fixed gradient as its slope."""
    import jax
    import jax.numpy as jnp
    from axlearn.common.module import new_output_collection
    from axlearn.common.update_transformation import ForwardOutputs

    terms = jax.tree.map(lambda p, g: jnp.sum(p * g), model_params, inputs)
    loss = sum(jax.tree.leaves(terms))
    return ForwardOutputs(loss=loss, aux={}, output_collection=new_output_collection())


def _learner_case(cfg, p=None, grads=gradients) -> Case:
    import jax
    from axlearn.common.module import functional
    from axlearn.common.optimizer_base import OptParam

    learner = cfg.set(name="learner").instantiate(parent=None)

    def opt_params(values):
        # What the trainer hands the learner: each value with its
        # factorization spec and weight-decay scale (1 unless the model's
        # parameter spec says otherwise).
        return jax.tree.map(
            lambda v: OptParam(
                value=v, factorization_spec=None, weight_decay_scale=1.0
            ),
            values,
        )

    def init(values):
        return learner.init(model_params=opt_params(values)), {}

    def step(values, grads, state):
        # SpmdTrainer's call: gradients of the forward function (masked by
        # the learner's update rules), the optimizer, the updated values.
        learner_state, _ = state
        outputs, collection = functional(
            learner,
            method="forward_and_backward",
            is_training=True,
            prng_key=jax.random.PRNGKey(0),
            state=learner_state,
            inputs=dict(fn=_linear_loss, inputs=grads, opt_params=opt_params(values)),
        )
        values = outputs.backward_outputs.updated_params
        return values, (collection.state_updates, collection.summaries)

    return Case(
        init=init, step=step, params=p if p is not None else params(), grads=grads
    )


def _spike_at_step_4(step, params_like):
    import jax

    g = gradients(step, params_like)
    return jax.tree.map(lambda x: x * 1000.0, g) if step == 4 else g


def _gpt_adamw(**kwargs):
    from axlearn.experiments.text.gpt import common

    return common.adamw_decoupled_learner_config(
        peak_lr=1e-2, max_step=10, weight_decay=0.1, lr_warmup_steps=2, **kwargs
    )


def _gpt_adamw_mup() -> Case:
    from axlearn.experiments.text.gpt import common

    scaled = common.mup_simple_adam_update_transformation(scale_factor=0.25)
    cfg = _gpt_adamw(adam_update_transformation=scaled)
    return _learner_case(cfg, p=params(AXLEARN_SHAPES))


def _gpt_adastar() -> Case:
    from axlearn.experiments.text.gpt import common

    cfg = common.adastar_learner_config(peak_lr=1e-2, max_step=10, lr_warmup_steps=2)
    return _learner_case(cfg, grads=_spike_at_step_4)


def _resnet() -> Case:
    from axlearn.experiments.vision.resnet import common

    return _learner_case(common.learner_config(learning_rate=0.1, ema_decay=0.9))


def _frozen_embedding() -> Case:
    from axlearn.common.learner import UpdateType

    cfg = _gpt_adamw()
    cfg.update_rules = [(".*embed.*", UpdateType.NO_UPDATE)]
    return _learner_case(cfg)


CONFIGS = {
    "gpt adamw_decoupled_learner_config (clip, warmup-cosine)": lambda: _learner_case(
        _gpt_adamw()
    ),
    "gpt adamw_decoupled + mup_simple_adam_update_transformation": _gpt_adamw_mup,
    "gpt adastar_learner_config (skip_and_clip, spike at step 4)": _gpt_adastar,
    "resnet learner_config (sgd, per-path wd scale, param EMA)": _resnet,
    "adamw_decoupled, update_rules NO_UPDATE on the embedding": _frozen_embedding,
}
