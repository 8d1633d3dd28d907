"""Conformance registry entries for the contrib optimizers (see registry.py).

Not here, because ``update`` needs more than gradients and params (their
equivalent checks are in test_contrib_*.py): ``momo`` and ``momo_adam`` and
``reduce_on_plateau`` (``value=``), ``hutchinson_estimator_diag_hessian`` and
``sophia`` with its default estimator (``obj_fn=``), ``sam`` in opaque mode
(``grad_fn=``).
"""

from __future__ import annotations

import jax
import optax
from registry_base import Entry

import gradax

LR = dict(learning_rate=0.05)


def _squared_grads(updates, params):
    """A deterministic Hessian-diagonal stand-in (Gauss-Newton style)."""
    del params
    return jax.tree.map(lambda g: g * g, updates)


def _gx_sophia(**kwargs):
    return gradax.sophia(hessian_diagonal_fn=gradax.stateless(_squared_grads), **kwargs)


def _ox_sophia(**kwargs):
    return optax.contrib.sophia(
        hessian_diagonal_fn=optax.stateless(_squared_grads), **kwargs
    )


def _gx_scale_by_sophia(**kwargs):
    return gradax.scale_by_sophia(
        hessian_diagonal_fn=gradax.stateless(_squared_grads), **kwargs
    )


def _ox_scale_by_sophia(**kwargs):
    return optax.contrib._sophia.scale_by_sophia(
        hessian_diagonal_fn=optax.stateless(_squared_grads), **kwargs
    )


ENTRIES: list[Entry] = [
    # ADOPT.
    Entry(
        "adopt",
        LR,
        optimizer=True,
        schedule_arg="learning_rate",
        optax_name="contrib.adopt",
        # The first update is zero, the clipping bound grows like t**0.25;
        # complex gradients cannot be clipped to a real interval.
        complex_ok=False,
    ),
    Entry(
        "adopt",
        dict(learning_rate=0.05, nesterov=True, use_clipping=False),
        optimizer=True,
        schedule_arg="b1",
        optax_name="contrib.adopt",
    ),
    Entry(
        "scale_by_adopt",
        dict(b1=0.8),
        schedule_arg="eps",
        optax_name="contrib.scale_by_adopt",
        complex_ok=False,  # clips to a real interval
    ),
    # AdEMAMix.
    Entry(
        "ademamix",
        dict(learning_rate=0.05, weight_decay=1e-3),
        optimizer=True,
        schedule_arg="b3",
        optax_name="contrib.ademamix",
        rosenbrock_steps=3000,
        converge_kwargs=dict(learning_rate=0.01, b3=0.99, alpha=2.0),
    ),
    Entry(
        "scale_by_ademamix",
        dict(b3=0.99),
        schedule_arg="alpha",
        optax_name="contrib.scale_by_ademamix",
    ),
    Entry(
        "simplified_ademamix",
        dict(learning_rate=0.01, alpha=2.0),
        optimizer=True,
        schedule_arg="alpha",
        optax_name="contrib.simplified_ademamix",
        converge_kwargs=dict(learning_rate=0.01, b1=0.9),
    ),
    Entry(
        "scale_by_simplified_ademamix",
        dict(alpha=1.0),
        schedule_arg="b1",
        optax_name="contrib.scale_by_simplified_ademamix",
    ),
    # MADGRAD: the cube root of the gradient sum has no complex meaning.
    Entry(
        "madgrad",
        dict(learning_rate=0.05, weight_decay=1e-3),
        optimizer=True,
        schedule_arg="learning_rate",
        optax_name="contrib.madgrad",
        complex_ok=False,
        converge_kwargs=LR,
    ),
    Entry(
        "scale_by_madgrad",
        LR,
        # Not momentum: the step is x_new - x, a cancellation that turns the
        # 1-ulp difference between a folded and a traced ``1 - momentum``
        # into 8e-6 relative (measured), past that check's 1e-6.
        schedule_arg="eps",
        optax_name="contrib.scale_by_madgrad",
        complex_ok=False,
    ),
    # COCOB: the wealth max(R - g (x - x0), 0) needs real numbers.
    Entry(
        "cocob",
        {},
        optimizer=True,
        schedule_arg="learning_rate",
        optax_name="contrib.cocob",
        complex_ok=False,
    ),
    Entry(
        "cocob",
        dict(alpha=10.0, weight_decay=1e-3),
        schedule_arg="weight_decay",
        optax_name="contrib.cocob",
        complex_ok=False,
    ),
    Entry(
        "scale_by_cocob",
        dict(alpha=50.0),
        schedule_arg="alpha",
        optax_name="contrib.scale_by_cocob",
        complex_ok=False,
    ),
    # DoG and DoWG (optax.contrib does not export their scale_by_*).
    Entry(
        "dog",
        {},
        optimizer=True,
        schedule_arg="learning_rate",
        optax_name="contrib.dog",
    ),
    Entry(
        "dog",
        dict(init_step=("learning_rate", 0.01), weight_decay=1e-3),
        optimizer=True,
        schedule_arg="weight_decay",
        optax_name="contrib.dog",
    ),
    Entry(
        "scale_by_dog",
        dict(init_step=("distance", 0.1)),
        schedule_arg="eps",
        optax_name="contrib._dog.scale_by_dog",
    ),
    Entry(
        "dowg",
        {},
        optimizer=True,
        schedule_arg="learning_rate",
        optax_name="contrib.dowg",
    ),
    Entry(
        "dowg",
        dict(init_estim_sq_dist=0.5, weight_decay=1e-3),
        schedule_arg="eps",
        optax_name="contrib.dowg",
    ),
    Entry(
        "scale_by_dowg",
        dict(init_estim_sq_dist=0.5),
        schedule_arg="eps",
        optax_name="contrib._dog.scale_by_dowg",
    ),
    # Prodigy and D-Adaptation.
    Entry(
        "prodigy",
        dict(learning_rate=0.5),
        optimizer=True,
        schedule_arg="learning_rate",
        optax_name="contrib.prodigy",
    ),
    Entry(
        "prodigy",
        dict(learning_rate=0.5, beta3=0.9, weight_decay=1e-3, safeguard_warmup=True),
        schedule_arg="weight_decay",
        optax_name="contrib.prodigy",
    ),
    # No optax twin; test_contrib_adaptive checks it against prodigy.
    Entry("scale_by_prodigy", dict(estim_lr0=1e-3), schedule_arg="eps", optax_name=""),
    Entry(
        "dadapt_adamw",
        {},
        optimizer=True,
        schedule_arg="learning_rate",
        optax_name="contrib.dadapt_adamw",
        converge_kwargs=dict(estim_lr0=1e-3),
    ),
    Entry(
        "dadapt_adamw",
        dict(learning_rate=0.5, estim_lr0=1e-3, weight_decay=1e-3),
        schedule_arg="weight_decay",
        optax_name="contrib.dadapt_adamw",
    ),
    # Mechanic.
    Entry(
        "mechanize",
        dict(weight_decay=1e-2),
        optimizer=True,
        schedule_arg="weight_decay",
        injectable=False,
        build_fn=lambda **kw: gradax.mechanize(gradax.adam(0.05), **kw),
        optax_build_fn=lambda **kw: optax.contrib.mechanize(optax.adam(0.05), **kw),
    ),
    Entry(
        "mechanize",
        dict(num_betas=3, s_init=1e-3),
        injectable=False,
        schedule_arg="s_init",
        build_fn=lambda **kw: gradax.mechanize(gradax.sgd(0.05), **kw),
        optax_build_fn=lambda **kw: optax.contrib.mechanize(optax.sgd(0.05), **kw),
    ),
    # Schedule-free.
    Entry(
        "schedule_free",
        dict(learning_rate=0.05, b1=0.8),
        optimizer=True,
        schedule_arg="learning_rate",
        injectable=False,
        build_fn=lambda **kw: gradax.schedule_free(gradax.adam(0.05, b1=0.0), **kw),
        optax_build_fn=lambda **kw: optax.contrib.schedule_free(
            optax.adam(0.05, b1=0.0), **kw
        ),
    ),
    Entry(
        "schedule_free_sgd",
        dict(learning_rate=0.1),
        optimizer=True,
        schedule_arg="learning_rate",
        optax_name="contrib.schedule_free_sgd",
        converge_kwargs=dict(learning_rate=0.2),
    ),
    Entry(
        "schedule_free_sgd",
        dict(learning_rate=0.1, warmup_steps=5, weight_decay=1e-3),
        # Not b1: the update is y_new - y, a cancellation that amplifies the
        # 1-ulp difference of a folded and a traced ``1 - b1`` (measured 8e-6).
        schedule_arg="weight_decay",
        optax_name="contrib.schedule_free_sgd",
    ),
    Entry(
        "schedule_free_adamw",
        LR,
        optimizer=True,
        schedule_arg="learning_rate",
        optax_name="contrib.schedule_free_adamw",
    ),
    Entry(
        "schedule_free_adamw",
        dict(learning_rate=0.05, warmup_steps=5, weight_decay=1e-3),
        schedule_arg="weight_decay",
        optax_name="contrib.schedule_free_adamw",
    ),
    # Sophia with a deterministic estimator (the default one needs obj_fn=).
    Entry(
        "sophia",
        dict(learning_rate=0.05, update_interval=3),
        schedule_arg="learning_rate",
        injectable=False,
        complex_ok=False,  # clips the step to a real interval
        build_fn=_gx_sophia,
        optax_build_fn=_ox_sophia,
    ),
    Entry(
        "sophia",
        dict(learning_rate=0.05, update_interval=2, clip_threshold=None),
        schedule_arg="gamma",
        injectable=False,
        build_fn=_gx_sophia,
        optax_build_fn=_ox_sophia,
    ),
    Entry(
        "scale_by_sophia",
        dict(update_interval=3),
        schedule_arg="b2",
        injectable=False,
        complex_ok=False,  # clips the step to a real interval
        build_fn=_gx_scale_by_sophia,
        optax_build_fn=_ox_scale_by_sophia,
    ),
    # SAM in transparent mode, and its normalize step.
    Entry(
        "sam",
        {},
        optimizer=True,
        injectable=False,
        build_fn=lambda: gradax.sam(
            gradax.sgd(0.05), gradax.chain(gradax.normalize(), gradax.sgd(0.01))
        ),
        optax_build_fn=lambda: optax.contrib.sam(
            optax.sgd(0.05), optax.chain(optax.contrib.normalize(), optax.sgd(0.01))
        ),
    ),
    Entry(
        "sam",
        dict(sync_period=3, reset_state=False),
        injectable=False,
        build_fn=lambda **kw: gradax.sam(
            gradax.adam(0.05),
            gradax.chain(gradax.normalize(), gradax.adam(0.01)),
            **kw,
        ),
        optax_build_fn=lambda **kw: optax.contrib.sam(
            optax.adam(0.05),
            optax.chain(optax.contrib.normalize(), optax.adam(0.01)),
            **kw,
        ),
    ),
    Entry("normalize", optax_name="contrib.normalize"),
]
