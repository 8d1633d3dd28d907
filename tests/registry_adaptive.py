"""Conformance registry entries for the adaptive optimizers (see registry.py).

Entries with ``cautious=True`` or ``cautious_weight_decay=True`` have no
optax twin (``optax_name=""``); tests/optimizers/test_adaptive.py checks them against
NumPy renderings of the papers' rules.
"""

from __future__ import annotations

import optax
from registry_base import Entry, settling

import gradax

LR = dict(learning_rate=0.05)
NO_TWIN = ""
# The parameter tree the checks use has leaves "s", "v", "m", "t".
_MASK = {"s": False, "v": True, "m": True, "t": False}


def _cosine(init_value, decay_steps):
    return gradax.cosine_decay_schedule(init_value, decay_steps)


# Betas exactly representable in float32 (7/8 and 1 - 2**-9) where a run is
# sensitive to the float32 rounding of 1 - b2: inject_hyperparams stores
# float32 values, and with b2 = 0.999 (1 - b2 off by 1.3e-5 relative) these
# entries moved 3-13e-5 (relative) away from the plain run; optax does the same.
EXACT_B2 = 0.998046875
EXACT_BETAS = dict(b1=0.875, b2=EXACT_B2)
LION_CONVERGE = dict(learning_rate=_cosine(0.05, 500))


def _descending(name, module):
    """``name`` followed by a small negative step, in gradax or optax.

    Alone, a parameter-scaled transformation ascends the suite's quadratic
    and its parameters overflow within 5 of its 20 steps; the comparisons
    then compared inf with inf and checked nothing.
    """

    def build(min_scale=0.01):
        return module.chain(
            getattr(module, name)(min_scale=min_scale), module.scale(-0.02)
        )

    build.__name__ = f"descending_{name}"
    return build


def _opt(name, kwargs=None, **flags):
    """An optimizer entry: convergence checks, learning rate as the schedule."""
    flags.setdefault("schedule_arg", "learning_rate")
    return Entry(name, dict(LR if kwargs is None else kwargs), optimizer=True, **flags)


OPTIMIZERS: list[Entry] = [
    _opt("adabelief", rosenbrock_steps=3000),
    _opt(
        "adabelief",
        dict(learning_rate=0.05, nesterov=True, **EXACT_BETAS),
        schedule_arg="b1",
    ),
    # Adadelta's first steps are of size sqrt(eps); a larger eps lets it move
    # within the 500 steps of the parabola check.
    _opt("adadelta", dict(learning_rate=1.0, eps=1e-3), schedule_arg="rho"),
    _opt("adadelta", dict(learning_rate=0.5, weight_decay=0.01, eps=1e-3)),
    _opt(
        "adafactor",
        dict(learning_rate=0.05),
        converge_kwargs=dict(learning_rate=0.05, multiply_by_parameter_scale=False),
    ),
    # min_dim_size_to_factor=2 factors the 4x3 and 2x3x2 leaves of the checks.
    _opt(
        "adafactor",
        dict(learning_rate=0.05, min_dim_size_to_factor=2, momentum=0.9),
        schedule_arg="decay_rate",
        converge_kwargs=dict(
            learning_rate=0.05,
            min_dim_size_to_factor=2,
            momentum=0.5,
            multiply_by_parameter_scale=False,
        ),
    ),
    _opt(
        "adafactor",
        dict(learning_rate=0.05, weight_decay_rate=0.01, clipping_threshold=None),
        schedule_arg="weight_decay_rate",
        converge_kwargs=dict(learning_rate=0.05, multiply_by_parameter_scale=False),
    ),
    _opt("adagrad", dict(learning_rate=0.5)),
    _opt(
        "adamax",
        rosenbrock_steps=6000,
        converge_kwargs=dict(learning_rate=settling(0.1, 6000)),
    ),
    _opt(
        "adamaxw",
        dict(learning_rate=0.05, weight_decay=1e-3),
        rosenbrock_steps=6000,
        converge_kwargs=dict(learning_rate=settling(0.1, 6000), weight_decay=1e-3),
    ),
    # AMSGrad keeps the largest second moment seen: on Rosenbrock that is the
    # one of the steep start, and its steps stay too small to converge.
    _opt("amsgrad"),
    _opt(
        "amsgrad",
        dict(
            learning_rate=0.05,
            bias_correction_mu=False,
            bias_correction_nu=False,
            **EXACT_BETAS,
        ),
        schedule_arg="b2",
    ),
    _opt("nadam", rosenbrock_steps=3000),
    _opt("nadamw", dict(learning_rate=0.05, weight_decay=1e-3)),
    # RAdam takes unscaled momentum steps until rho_t reaches the threshold,
    # which diverge on the steep start of Rosenbrock (as in optax).
    _opt("radam"),
    _opt("radam", dict(learning_rate=0.05, nesterov=True), schedule_arg="threshold"),
    _opt(
        "rmsprop",
        dict(learning_rate=0.01),
        rosenbrock_steps=3000,
        converge_kwargs=dict(learning_rate=_cosine(0.01, 3000)),
    ),
    _opt(
        "rmsprop",
        dict(learning_rate=0.01, centered=True, momentum=0.5, nesterov=True),
        schedule_arg="momentum",
    ),
    _opt(
        "rmsprop",
        dict(learning_rate=0.01, eps_in_sqrt=False, bias_correction=True),
        schedule_arg="decay",
    ),
    _opt(
        "rmsprop",
        dict(
            learning_rate=0.01, centered=True, bias_correction=True, initial_scale=0.1
        ),
        schedule_arg="initial_scale",
    ),
    _opt("yogi", dict(learning_rate=0.1, b2=EXACT_B2), rosenbrock_steps=3000),
    _opt("novograd", dict(learning_rate=0.05)),
    _opt("novograd", dict(learning_rate=0.05, weight_decay=0.01), schedule_arg="b2"),
    _opt("lamb", dict(learning_rate=0.02)),
    _opt(
        "lamb", dict(learning_rate=0.02, weight_decay=0.01), schedule_arg="weight_decay"
    ),
    _opt("lars", dict(learning_rate=1.0, trust_coefficient=0.01)),
    _opt(
        "lars",
        dict(
            learning_rate=1.0,
            weight_decay=0.01,
            weight_decay_mask=_MASK,
            trust_ratio_mask=_MASK,
            nesterov=True,
            momentum=0.5,
        ),
        schedule_arg="trust_coefficient",
        # The unmasked leaves take plain momentum steps of size 1.0, which
        # diverge on the parabola; a smaller, decaying rate converges.
        converge_kwargs=dict(
            learning_rate=_cosine(0.1, 500),
            weight_decay=0.01,
            weight_decay_mask=_MASK,
            trust_ratio_mask=_MASK,
            trust_coefficient=0.5,
            nesterov=True,
            momentum=0.5,
        ),
    ),
    # Sign steps of a constant size oscillate around the minimum; a decaying
    # learning rate lets Lion converge.
    _opt("lion", dict(learning_rate=0.01), converge_kwargs=LION_CONVERGE),
    _opt(
        "lion",
        dict(learning_rate=0.01, weight_decay=0.1),
        schedule_arg="b2",
        converge_kwargs=dict(LION_CONVERGE, weight_decay=0.1),
    ),
]

# Cautious variants (not in optax).
CAUTIOUS: list[Entry] = [
    _opt("adam", dict(learning_rate=0.05, cautious=True), optax_name=NO_TWIN),
    _opt(
        "adamw",
        dict(
            learning_rate=0.05,
            weight_decay=0.01,
            cautious=True,
            cautious_weight_decay=True,
        ),
        optax_name=NO_TWIN,
        schedule_arg="weight_decay",
    ),
    _opt("nadam", dict(learning_rate=0.05, cautious=True), optax_name=NO_TWIN),
    _opt(
        "nadamw",
        dict(learning_rate=0.05, weight_decay=0.01, cautious_weight_decay=True),
        optax_name=NO_TWIN,
    ),
    _opt("adamax", dict(learning_rate=0.05, cautious=True), optax_name=NO_TWIN),
    _opt(
        "adamaxw",
        dict(
            learning_rate=0.05,
            weight_decay=0.01,
            cautious=True,
            cautious_weight_decay=True,
        ),
        optax_name=NO_TWIN,
    ),
    _opt("amsgrad", dict(learning_rate=0.05, cautious=True), optax_name=NO_TWIN),
    _opt("radam", dict(learning_rate=0.05, cautious=True), optax_name=NO_TWIN),
    _opt("adabelief", dict(learning_rate=0.05, cautious=True), optax_name=NO_TWIN),
    _opt(
        "yogi", dict(learning_rate=0.1, b2=EXACT_B2, cautious=True), optax_name=NO_TWIN
    ),
    _opt(
        "lion",
        dict(learning_rate=0.01, cautious=True, cautious_weight_decay=True),
        optax_name=NO_TWIN,
        converge_kwargs=dict(LION_CONVERGE, cautious=True, cautious_weight_decay=True),
    ),
    Entry(
        "add_cautious_decayed_weights",
        dict(weight_decay=0.1),
        schedule_arg="weight_decay",
        optax_name=NO_TWIN,
    ),
]

BLOCKS: list[Entry] = [
    Entry("scale_by_adamax", dict(b1=0.8), schedule_arg="b2"),
    Entry("scale_by_amsgrad", dict(b1=0.8), schedule_arg="eps"),
    Entry("scale_by_belief", dict(b1=0.8), schedule_arg="eps_root"),
    Entry("scale_by_adadelta", dict(rho=0.8), schedule_arg="eps"),
    Entry("scale_by_rms", dict(decay=0.8), schedule_arg="decay"),
    Entry(
        "scale_by_rms",
        dict(decay=0.8, eps_in_sqrt=False, bias_correction=True, initial_scale=0.1),
        schedule_arg="eps",
    ),
    Entry("scale_by_rss", dict(initial_accumulator_value=0.2), schedule_arg="eps"),
    Entry("scale_by_stddev", dict(decay=0.8), schedule_arg="decay"),
    Entry(
        "scale_by_stddev",
        # Without initial_scale the first bias-corrected variance is
        # g**2 - g**2: 0 or a rounding error, so 1/eps or NaN.
        dict(decay=0.8, eps_in_sqrt=False, bias_correction=True, initial_scale=0.1),
        schedule_arg="eps",
    ),
    Entry("scale_by_radam", dict(b1=0.8), schedule_arg="threshold"),
    Entry("scale_by_yogi", dict(b1=0.8), schedule_arg="initial_accumulator_value"),
    Entry("scale_by_novograd", dict(weight_decay=0.01), schedule_arg="weight_decay"),
    Entry("scale_by_lion", dict(b1=0.8), schedule_arg="b1"),
    Entry(
        "scale_by_lion",
        dict(mode="smooth", smooth_beta=2.0),
        schedule_arg="smooth_beta",
    ),
    # mu_dtype is tested in test_adaptive.py: with a bfloat16 momentum, the
    # float32 values inject_hyperparams stores make b1 * mu a float32 product
    # (a bfloat16 one with Python floats, as in optax): 4e-3 apart.
    Entry("scale_by_lion", dict(mode="refined")),
    Entry(
        "scale_by_trust_ratio",
        dict(min_norm=0.1, trust_coefficient=0.5, eps=1e-3),
        schedule_arg="trust_coefficient",
    ),
    Entry(
        "scale_by_param_block_norm",
        dict(min_scale=0.01),
        schedule_arg="min_scale",
        build_fn=_descending("scale_by_param_block_norm", gradax),
        optax_build_fn=_descending("scale_by_param_block_norm", optax),
    ),
    Entry(
        "scale_by_param_block_rms",
        dict(min_scale=0.01),
        schedule_arg="min_scale",
        build_fn=_descending("scale_by_param_block_rms", gradax),
        optax_build_fn=_descending("scale_by_param_block_rms", optax),
    ),
    Entry("scale_by_factored_rms", dict(decay_rate=0.7), schedule_arg="decay_rate"),
    Entry(
        "scale_by_factored_rms",
        # A positive offset is for a state that counted past it: from a fresh
        # state, step_offset=1 gave NaN from the first step (as in optax), and
        # every check passed on NaN == NaN. A negative one shifts the decay
        # schedule and stays finite.
        dict(min_dim_size_to_factor=2, step_offset=-1),
        schedule_arg="epsilon",
    ),
]

ENTRIES: list[Entry] = [*OPTIMIZERS, *CAUTIOUS, *BLOCKS]
