"""Registry entries for gradax/contrib (see tests/registry.py).

``ENTRIES`` get every conformance check. ``EXTRA_ARG_CASES`` are the ones
whose ``update`` needs more than gradients and params: ``momo``,
``momo_adam`` and ``reduce_on_plateau`` (``value=``), ``sophia`` with its
default estimator (``obj_fn=``), ``sam`` in opaque mode (``grad_fn=``);
test_contrib_extra_args.py runs the same checks on them with those
arguments, and the fault and resume suites run them too.
``hutchinson_estimator_diag_hessian`` is in neither: test_contrib_extra_args.py
tests it on its own.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from registry_base import LR, Entry, ExtraArgCase

import gradax


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


def _per_example(updates, params):
    """Three "examples" per gradient (the batch axis DP-SGD expects); mean g."""
    del params
    return jax.tree.map(lambda g: jnp.stack([g, 0.5 * g, 1.5 * g]), updates)


def _gx_private(make):
    return lambda **kw: gradax.chain(gradax.stateless(_per_example), make(**kw))


def _ox_private(make):
    return lambda **kw: optax.chain(optax.stateless(_per_example), make(**kw))


def _gx_galore_dims(params):
    """Project the matrix as is and the 3-D leaf as 2 x (3 * 2)."""
    dims = gradax.contrib.GaLoreDimensionNumbers
    return {"s": None, "v": None, "m": dims(), "t": dims(0, (1, 2))}


def _ox_galore_dims(params):
    dims = optax.contrib.GaLoreDimensionNumbers
    return {"s": None, "v": None, "m": dims(), "t": dims(0, (1, 2))}


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
    # No optax twin; test_contrib.py checks it against the paper's rule.
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
    # GaLore: make_params' 4 x 3 matrix is projected to rank 2; the other
    # leaves get plain Adam.
    Entry(
        "galore",
        dict(learning_rate=0.05, rank=2, update_proj_gap=5),
        optimizer=True,
        schedule_arg="learning_rate",
        optax_name="contrib.galore",
    ),
    Entry(
        "galore",
        dict(learning_rate=0.05, rank=1, update_proj_gap=3, weight_decay=1e-3),
        schedule_arg="scale",
        injectable=False,
        build_fn=lambda **kw: gradax.galore(
            **kw, weight_dimension_numbers=_gx_galore_dims
        ),
        optax_build_fn=lambda **kw: optax.contrib.galore(
            **kw, weight_dimension_numbers=_ox_galore_dims
        ),
    ),
    Entry(
        "scale_by_galore",
        dict(rank=2, update_proj_gap=4),
        schedule_arg="scale",
        optax_name="contrib.scale_by_galore",
    ),
    # ACProp.
    Entry(
        "acprop",
        LR,
        optimizer=True,
        schedule_arg="learning_rate",
        optax_name="contrib.acprop",
    ),
    Entry(
        "acprop",
        dict(learning_rate=0.05, b1=0.8, weight_decay=1e-3),
        schedule_arg="b1",
        optax_name="contrib.acprop",
    ),
    Entry(
        "scale_by_acprop",
        dict(b2=0.99),
        schedule_arg="b2",
        optax_name="contrib.scale_by_acprop",
    ),
    # Differential privacy: the gradients get a batch axis of 3 examples
    # first. Not injectable: inject_hyperparams wraps the bare factory.
    Entry(
        "dpsgd",
        dict(learning_rate=0.05, l2_norm_clip=5.0, noise_multiplier=0.02, seed=3),
        optimizer=True,
        schedule_arg="learning_rate",
        injectable=False,
        build_fn=_gx_private(gradax.dpsgd),
        optax_build_fn=_ox_private(optax.contrib.dpsgd),
    ),
    Entry(
        "dpsgd",
        dict(
            learning_rate=0.05,
            l2_norm_clip=1.0,
            noise_multiplier=0.5,
            seed=0,
            momentum=0.9,
            nesterov=True,
        ),
        schedule_arg="momentum",
        injectable=False,
        build_fn=_gx_private(gradax.dpsgd),
        optax_build_fn=_ox_private(optax.contrib.dpsgd),
    ),
    Entry(
        "differentially_private_aggregate",
        dict(l2_norm_clip=2.0, noise_multiplier=0.1, key=1),
        schedule_arg="noise_multiplier",
        injectable=False,
        build_fn=_gx_private(gradax.differentially_private_aggregate),
        optax_build_fn=_ox_private(optax.contrib.differentially_private_aggregate),
    ),
    # Complex parameters as pairs of real ones.
    Entry(
        "split_real_and_imaginary",
        {},
        optimizer=True,
        injectable=False,
        build_fn=lambda: gradax.split_real_and_imaginary(gradax.adam(0.05)),
        optax_build_fn=lambda: optax.contrib.split_real_and_imaginary(optax.adam(0.05)),
    ),
]


# Their update needs the objective's value, function or gradient
# (contrib/test_contrib_extra_args.py runs the checks with them).
def sam_opaque(**kw):
    return gradax.sam(
        gradax.sgd(0.05),
        gradax.chain(gradax.normalize(), gradax.sgd(0.01)),
        opaque_mode=True,
        **kw,
    )


def _sam_opaque_optax():
    return optax.contrib.sam(
        optax.sgd(0.05),
        optax.chain(optax.contrib.normalize(), optax.sgd(0.01)),
        opaque_mode=True,
        sync_period=3,
    )


def _plateau_chain(**kw):
    return gradax.chain(gradax.sgd(0.05), gradax.reduce_on_plateau(**kw))


PLATEAU = dict(factor=0.5, patience=1, rtol=0.3, cooldown=1, accumulation_size=2)

EXTRA_ARG_CASES: list[ExtraArgCase] = [
    ExtraArgCase(
        "momo",
        gradax.momo,
        lambda: optax.contrib.momo(0.5, beta=0.8),
        dict(learning_rate=0.5, beta=0.8),
        ("value",),
        schedule_arg="learning_rate",
    ),
    ExtraArgCase(
        "momo-adapt",
        gradax.momo,
        lambda: optax.contrib.momo(
            0.5, lower_bound=-1.0, weight_decay=1e-2, adapt_lower_bound=True
        ),
        dict(
            learning_rate=0.5,
            lower_bound=-1.0,
            weight_decay=1e-2,
            adapt_lower_bound=True,
        ),
        ("value",),
        schedule_arg="weight_decay",
    ),
    ExtraArgCase(
        "momo_adam",
        gradax.momo_adam,
        lambda: optax.contrib.momo_adam(0.05),
        dict(learning_rate=0.05),
        ("value",),
        schedule_arg="learning_rate",
    ),
    ExtraArgCase(
        "momo_adam-adapt",
        gradax.momo_adam,
        lambda: optax.contrib.momo_adam(
            0.05, b1=0.8, lower_bound=-1.0, weight_decay=1e-2, adapt_lower_bound=True
        ),
        dict(
            learning_rate=0.05,
            b1=0.8,
            lower_bound=-1.0,
            weight_decay=1e-2,
            adapt_lower_bound=True,
        ),
        ("value",),
        schedule_arg="b1",
    ),
    ExtraArgCase(
        "reduce_on_plateau",
        gradax.reduce_on_plateau,
        lambda: optax.contrib.reduce_on_plateau(**PLATEAU),
        PLATEAU,
        ("value",),
        schedule_arg="rtol",
    ),
    ExtraArgCase(
        "sgd+reduce_on_plateau",
        _plateau_chain,
        lambda: optax.chain(
            optax.sgd(0.05), optax.contrib.reduce_on_plateau(**PLATEAU)
        ),
        PLATEAU,
        ("value",),
        schedule_arg="factor",
        injectable=False,
    ),
    ExtraArgCase(
        "sophia-hutchinson",
        gradax.sophia,
        lambda: optax.contrib.sophia(0.05, update_interval=3),
        dict(learning_rate=0.05, update_interval=3),
        ("obj_fn",),
        schedule_arg="learning_rate",
        complex_ok=False,  # clips the step to a real interval
    ),
    ExtraArgCase(
        "scale_by_sophia-hutchinson",
        gradax.scale_by_sophia,
        None,
        dict(update_interval=2, gamma=0.05),
        ("obj_fn",),
        schedule_arg="gamma",
        complex_ok=False,  # clips the step to a real interval
    ),
    ExtraArgCase(
        "sam-opaque",
        sam_opaque,
        _sam_opaque_optax,
        dict(sync_period=3),
        ("grad_fn",),
        injectable=False,
    ),
]
