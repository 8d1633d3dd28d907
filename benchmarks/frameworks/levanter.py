"""levanter: ``levanter.optim``'s configs (draccus dataclasses) and their
``build(num_train_steps)``: AdamConfig (clip, ``scale_by_adam``, weight decay
with levanter's default mask, all inside ``optax.inject_hyperparams`` with its
own warmup/cosine schedule), its spike skipping (``skip_bad_steps``, a
``GradientTransformationExtraArgs`` taking ``loss=``), AdamC weight decay
(the factory computes ``weight_decay * learning_rate / max_lr``, so
``inject_hyperparams`` must call it with numbers), and MuonConfig (a
``multi_transform`` of its Muon on haliax ``Linear`` layers and AdamW
elsewhere).

haliax, levanter's named-tensor library, comes from its own repository at the
commit levanter's snapshot expects (the registry's haliax 1.3 predates it).
"""

import sys
from pathlib import Path

from ._harness import Case, gradients, stand_in

SOURCES = {
    "stanford-crfm/levanter": [
        "src/levanter/optim",
        "src/levanter/utils/jax_utils.py",
        "src/levanter/utils/tree_utils.py",
    ],
    "stanford-crfm/haliax": ["src/haliax"],
}


def prepare(root: Path) -> None:
    sys.path.insert(0, str(root / "src"))
    # The metrics tracker (wandb and friends) and haliax's int8/fp8
    # quantization (aqt) are not part of an optimizer's numbers.
    stand_in(["levanter.tracker", "aqt"])


def _schedule(**overrides):
    # 10 training steps: 2 warmup, cosine down to 10% after.
    return dict(learning_rate=1e-2, warmup=0.2, min_lr_ratio=0.1) | overrides


def _build(name, **overrides) -> Case:
    from levanter import optim

    return Case(tx=getattr(optim, name)(**_schedule(**overrides)).build(10))


def _adam(**overrides) -> Case:
    return _build("AdamConfig", **overrides)


def _skip_bad_steps() -> Case:
    import jax
    import optax
    from levanter.optim import AdamConfig

    tx = AdamConfig(**_schedule(skip_bad_steps=4)).build(10)

    # A loss and gradient spike at step 4, after three ordinary steps.
    def grads(step, params):
        g = gradients(step, params)
        return jax.tree.map(lambda x: x * 100.0, g) if step == 4 else g

    def step(params, grads, state):
        loss = optax.global_norm(grads) + 1.0
        updates, state = tx.update(grads, state, params, loss=loss)
        return optax.apply_updates(params, updates), state

    return Case(init=tx.init, step=step, grads=grads)


def _linear_params():
    import haliax as hax
    import jax
    import jax.numpy as jnp

    from ._harness import params

    embed, hidden, out = hax.Axis("embed", 8), hax.Axis("mlp", 12), hax.Axis("out", 6)
    keys = jax.random.split(jax.random.key(0), 2)
    plain = params()
    return {
        "up": hax.nn.Linear.init(embed, hidden, key=keys[0], use_bias=True),
        "lm_head": hax.nn.Linear.init(hidden, out, key=keys[1], use_bias=False),
        "norm": hax.named(jnp.asarray(plain["norm"]["scale"]), embed),
    }


def _muon() -> Case:
    import jax
    import numpy as np
    from levanter.optim import MuonConfig

    config = MuonConfig(**_schedule(lr=2e-2, adam_lr=1e-2, weight_decay=0.1))
    # Its Newton-Schulz step constrains sharding to the ("data", "model") mesh
    # levanter's trainer sets up; here a one-device one.
    devices = np.array(jax.devices()[:1]).reshape(1, 1)
    mesh = jax.sharding.Mesh(devices, ("data", "model"))
    return Case(tx=config.build(10), params=_linear_params(), context=lambda: mesh)


CONFIGS = {
    "AdamConfig (default)": _adam,
    "AdamConfig, skip_bad_steps (spike at step 4)": _skip_bad_steps,
    "AdamConfig, adamc_weight_decay": lambda: _adam(adamc_weight_decay=True),
    # Clips each block's update RMS between two norm-logging passthroughs
    # (optax.tree_utils.tree_l2_norm of the updates).
    "AdamConfig, update_rms_clipping": lambda: _adam(update_rms_clipping=1.0),
    "MuonConfig (haliax Linear)": _muon,
    # levanter's own transformations on optax's building blocks (its Mars and
    # RMSPropMomentum call jax.tree_map, gone from this jax: not run).
    "LionConfig": lambda: _build("LionConfig"),
    "AdoptConfig": lambda: _build("AdoptConfig"),
    "CautiousConfig": lambda: _build("CautiousConfig"),
    "MiniConfig (Adam-mini)": lambda: _build("MiniConfig"),
}
