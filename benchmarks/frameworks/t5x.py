"""t5x: ``t5x.optimizers``' optax wrappers (``adamw``, ``chain``,
``OptaxWrapper``) driven through t5x's ``Optimizer`` (``create``,
``apply_gradient``), as its trainer does.

Two things t5x reads back from the optax state are probed each step: the
checkpoint dictionary (``Optimizer.state_dict``, flax serialization of the
NamedTuples with empty states dropped) and the logical axes that
``OptaxStatePartitionRules`` derives by looking up each state's class in a
table keyed by optax's state classes (``derive_optax_logical_axes``).
"""

import sys
from pathlib import Path

from ._harness import Case, gradients, params, stand_in

SOURCES = {"google-research/t5x": ["t5x/optimizers.py"]}


def prepare(root: Path) -> None:
    sys.path.insert(0, str(root))
    # jestimator's Amos optimizer (an alternative to optax) is imported at the
    # top of optimizers.py; no configuration here uses it.
    stand_in(["jestimator"])


def _case(make_opt_def, grads=gradients, logical_axes=True) -> Case:
    from t5x import optimizers

    p = params()
    opt_def = make_opt_def(optimizers)
    # Logical axis names per parameter, as t5x's partitioner supplies them.
    axes = {k: {n: f"{k}/{n}" for n in v} for k, v in p.items()}

    def step(_, grads, optimizer):
        optimizer = optimizer.apply_gradient(grads)
        return optimizer.target, optimizer

    def probe(optimizer):
        seen = {"state_dict": optimizer.state_dict()}
        if logical_axes:
            rules = optimizers.OptaxStatePartitionRules
            seen["axes"] = rules.derive_optax_logical_axes(
                optimizer.state.param_states, axes
            )
        return seen

    return Case(init=opt_def.create, step=step, params=p, probe=probe, grads=grads)


def _nan_at_step_3(step, params_like):
    import jax
    import jax.numpy as jnp

    g = gradients(step, params_like)
    if step == 3:
        g = jax.tree.map(lambda x: jnp.full_like(x, jnp.nan), g)
    return g


def _apply_if_finite(optimizers):
    import optax

    return optimizers.OptaxWrapper(
        optax.apply_if_finite(optax.adamw(1e-2, weight_decay=1e-4), 2)
    )


def _chain(optimizers):
    import optax

    return optimizers.chain([optax.clip_by_global_norm(1.0), optax.adam(1e-2)])


def _inject_hyperparams(optimizers):
    import optax

    schedule = optax.warmup_cosine_decay_schedule(0.0, 1e-2, 2, 10)
    return optimizers.OptaxWrapper(
        optax.inject_hyperparams(optax.adamw)(learning_rate=schedule, b2=0.95)
    )


CONFIGS = {
    "adamw": lambda: _case(lambda o: o.adamw(1e-2, b2=0.95, weight_decay=1e-4)),
    "chain(clip_by_global_norm, adam)": lambda: _case(_chain),
    # optax 0.2.8's InjectStatefulHyperparamsState is not in t5x's partition
    # table (t5x raises for it with optax too), so only the checkpoint dict.
    "inject_hyperparams(adamw), schedule (state_dict only)": lambda: _case(
        _inject_hyperparams, logical_axes=False
    ),
    "apply_if_finite(adamw), NaN at step 3": lambda: _case(
        _apply_if_finite, grads=_nan_at_step_3
    ),
}
