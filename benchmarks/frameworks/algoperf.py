"""AlgoPerf (mlcommons/algorithmic-efficiency): submissions' own
``init_optimizer_state`` and train steps, called the way the benchmark's
submission runner calls them, on a stand-in workload.

Three jitted submissions go through their own ``update_params`` (a
``jax.jit`` with shardings around their ``train_step``): the external-tuning
baseline ``jax_nadamw_full_budget`` (its own ``scale_by_nadam``
GradientTransformation, a warmup-cosine schedule, gradient clipping in the
step), the archived AdamW, and the target-setting Nesterov (a polynomial
schedule, an ``add_decayed_weights`` + ``sgd`` chain, the shared
``jax_submission_base`` step).

Two archived paper baselines, LAMB and SAM, were written for ``jax.pmap``:
their optimizer state is replicated by ``flax.jax_utils.replicate`` and their
``pmapped_train_step`` reduces over the ``batch`` axis with ``lax.psum``. This
jax's ``pmap`` rejects their decorator (nine ``in_axes`` for ten arguments:
``IndexError`` with optax too), so their undecorated step function runs
under ``jax.vmap`` with that axis name, a one-device pmap's semantics, inside
``jax.jit``. SAM is a transformation built from its own two functions whose
third argument is ``(grad_fn, params)``, not the parameters.

The workload is the smallest that satisfies the submissions' calls: its model
returns a loss that is linear plus a small quadratic in the parameters (so a
SAM step's second gradient, at perturbed parameters, differs from the first),
over two "examples". Hyperparameters are the first point of the baseline's
``tuning_search_space.json`` (grad_clip, rho and the Nesterov schedule's
fields added where a submission reads them), with a 10-step budget
(``step_hint``).
"""

import collections
import importlib
import importlib.util
import sys
from pathlib import Path

from ._harness import Case, params, stand_in

NADAMW = "algorithms/baselines/external_tuning/jax_nadamw_full_budget.py"
ARCHIVED = "algorithms/archived_paper_baselines/{}/jax/submission.py"
TARGET_SETTING = "algorithms/target_setting_algorithms"
SOURCES = {
    "mlcommons/algorithmic-efficiency": [
        "algoperf/spec.py",
        "algoperf/jax_sharding_utils.py",
        NADAMW,
        *(ARCHIVED.format(name) for name in ("adamw", "lamb", "sam")),
        "algorithms/__init__.py",
        *(
            f"{TARGET_SETTING}/{name}.py"
            for name in (
                "__init__",
                "jax_nesterov",
                "jax_submission_base",
                "data_selection",
                "get_batch_size",
            )
        ),
    ]
}
ROOT: Path | None = None

HYPERPARAMETERS = dict(
    dropout_rate=0.0,
    label_smoothing=0.1,
    learning_rate=0.001308209823469072,
    one_minus_beta1=0.02686663061,
    beta2=0.9981232922116359,
    weight_decay=0.16375311233774334,
    warmup_factor=0.1,
    grad_clip=1.0,
)


def prepare(root: Path) -> None:
    global ROOT
    ROOT = root
    # algoperf/__init__ reads a version file the build writes; spec.py and
    # jax_sharding_utils load as a namespace package. spec.py imports torch
    # for the PyTorch side's types and softmax.
    sys.path.insert(0, str(root))
    stand_in(["torch"])


def _submission(relative: str):
    """Imports a submission module by its path, as the runner does."""
    if relative.startswith(TARGET_SETTING):  # imports its siblings by package
        return importlib.import_module(relative.removesuffix(".py").replace("/", "."))
    path = ROOT / relative
    name = "submission_" + path.parent.parent.name
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Workload:
    """The attributes of ``spec.Workload`` that the submissions use."""

    step_hint = 10
    metrics_logger = None

    def __init__(self, param_tree):
        import jax
        from algoperf import spec

        self.param_shapes = jax.tree.map(lambda x: spec.ShapeTuple(x.shape), param_tree)

    def model_fn(self, params, batch, model_state, mode, rng, **kwargs):
        import jax
        import jax.numpy as jnp

        del mode, rng, kwargs
        linear = jax.tree.map(lambda p, g: jnp.sum(p * g), params, batch["inputs"])
        quadratic = jax.tree.map(lambda p: 0.05 * jnp.sum(p * p), params)
        per_example = sum(jax.tree.leaves(linear)) + sum(jax.tree.leaves(quadratic))
        return per_example * batch["targets"], model_state

    def loss_fn(self, label_batch, logits_batch, mask_batch=None, label_smoothing=0.0):
        import jax.numpy as jnp

        del mask_batch, label_smoothing
        return {
            "summed": jnp.sum(logits_batch),
            "n_valid_examples": jnp.float32(label_batch.shape[0]),
        }


def _case(relative: str, pmap_era: bool = False, **hyperparameters) -> Case:
    import jax
    import jax.numpy as jnp

    submission = _submission(relative)
    values = HYPERPARAMETERS | hyperparameters
    hp = collections.namedtuple("Hyperparameters", values)(**values)
    p = params()
    workload = Workload(p)
    rng = jax.random.PRNGKey(0)
    step_index = [0]
    update_fn = []  # what init_optimizer_state returned beside the state

    def init(params):
        state, update = submission.init_optimizer_state(workload, params, None, hp, rng)
        update_fn.append(update)
        return state

    def batch_of(grads):
        return {"inputs": grads, "targets": jnp.ones((2,), jnp.float32)}

    def step(params, grads, optimizer_state):
        step_index[0] += 1
        (state, _), params, _ = submission.update_params(
            workload=workload,
            current_param_container=params,
            current_params_types=None,
            model_state=None,
            hyperparameters=hp,
            batch=batch_of(grads),
            loss_type=None,
            optimizer_state=(optimizer_state, update_fn[0]),
            eval_results=[],
            global_step=step_index[0],
            rng=rng,
        )
        return params, state

    def pmap_era_step(params, grads, optimizer_state):
        # update_params' call of its pmapped_train_step, with one device: the
        # state arrives replicated, parameters, batch and rngs get the axis.
        train_step = submission.pmapped_train_step.__wrapped__
        per_device = jax.tree.map(lambda x: x[None], (params, batch_of(grads)))
        rngs = jax.random.split(rng, 1)

        def one_device(state, params, batch, rng):
            outputs = train_step(
                workload, update_fn[0], None, state, params, batch, rng,
                hp.grad_clip, hp.label_smoothing, hp.dropout_rate,
            )  # fmt: skip
            return outputs[:2]

        stepped = jax.vmap(one_device, axis_name="batch")
        state, params = stepped(optimizer_state, *per_device, rngs)
        return jax.tree.map(lambda x: x[0], params), state

    if pmap_era:
        return Case(init=init, step=pmap_era_step, params=p)
    # update_params compiles its own train step (jit with shardings).
    return Case(init=init, step=step, params=p, jit=False)


CONFIGS = {
    "external_tuning nadamw_full_budget (own scale_by_nadam, clip)": lambda: _case(
        NADAMW
    ),
    "archived adamw": lambda: _case(ARCHIVED.format("adamw")),
    "target_setting nesterov (polynomial schedule, wd + sgd chain)": lambda: _case(
        f"{TARGET_SETTING}/jax_nesterov.py",
        beta1=0.9,
        warmup_steps=2,
        decay_steps_factor=0.9,
        end_factor=0.01,
    ),
    "archived lamb (replicated state, step under vmap)": lambda: _case(
        ARCHIVED.format("lamb"), pmap_era=True
    ),
    "archived sam (update gets (grad_fn, params), step under vmap)": lambda: _case(
        ARCHIVED.format("sam"), pmap_era=True, rho=0.05
    ),
}
