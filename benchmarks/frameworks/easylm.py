"""EasyLM: ``EasyLM.optimizers.OptimizerFactory.get_optimizer`` from its
``ConfigDict`` (adamw with a warmup-cosine schedule, the PaLM adafactor with
scheduled weight decay, ``optax.MultiSteps`` for gradient accumulation).

The weight-decay mask EasyLM's trainers pass is a callable of the parameters
(``jax_utils.get_weight_decay_mask`` of the model's exclusions); a callable
excluding biases, norms and embeddings stands in for it.
"""

import sys
from pathlib import Path

from ._harness import Case, stand_in

SOURCES = {"young-geng/EasyLM": ["EasyLM/optimizers.py"]}


def prepare(root: Path) -> None:
    sys.path.insert(0, str(root))
    # jax_utils pulls in EasyLM's sharding, checkpoint and tokenizer helpers;
    # optimizers.py imports one dtype helper from it and never calls it.
    stand_in(["EasyLM.jax_utils"])


def _weight_decay_mask(params):
    import jax

    def decay(path, _):
        name = jax.tree_util.keystr(path)
        return not any(word in name for word in ("bias", "norm", "embed"))

    return jax.tree_util.tree_map_with_path(decay, params)


def _case(**updates):
    from EasyLM.optimizers import OptimizerFactory

    schedule = dict(lr_warmup_steps=2, lr_decay_steps=10)
    updates.setdefault("adamw_optimizer", {})
    updates["adamw_optimizer"] = schedule | updates["adamw_optimizer"]
    tx, info = OptimizerFactory.get_optimizer(updates, _weight_decay_mask)
    return Case(tx=tx)


CONFIGS = {
    "adamw (default)": _case,
    "adamw, bf16_momentum": lambda: _case(adamw_optimizer=dict(bf16_momentum=True)),
    "adamw, accumulate_gradient_steps 2 (MultiSteps)": lambda: _case(
        accumulate_gradient_steps=2
    ),
    "palm (adafactor, scheduled weight decay)": lambda: _case(
        type="palm", palm_optimizer=dict(lr_warmup_steps=2)
    ),
    "adamw as adafactor (multiply_by_parameter_scale, bf16 momentum)": lambda: _case(
        adamw_optimizer=dict(multiply_by_parameter_scale=True, bf16_momentum=True)
    ),
}
