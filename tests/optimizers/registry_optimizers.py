"""Registry entries for gradax/optimizers (see tests/registry.py).

Entries with ``cautious=True`` or ``cautious_weight_decay=True`` have no
optax twin (``optax_name=""``); tests/optimizers/test_adaptive.py and
test_cautious.py check them against NumPy renderings of the papers' rules.
polyak_sgd / scale_by_polyak need ``value=`` in every update, so they are
checked in test_polyak_noisy_sgd.py instead of here.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from registry_base import LR, MASK, Q8, Entry, settling

import gradax


def _cosine(init_value, decay_steps):
    return gradax.cosine_decay_schedule(init_value, decay_steps)


# Betas exactly representable in float32 (7/8 and 1 - 2**-9) where a run is
# sensitive to the float32 rounding of 1 - b2: inject_hyperparams stores
# float32 values, and with b2 = 0.999 (1 - b2 off by 1.3e-5 relative) these
# entries moved 3-13e-5 (relative) away from the plain run; optax does the same.
EXACT_B2 = 0.998046875
EXACT_BETAS = dict(b1=0.875, b2=EXACT_B2)
LION_CONVERGE = dict(learning_rate=_cosine(0.05, 500))
_DECAYING = gradax.exponential_decay(0.05, 1, 0.995)

# MARS: the reference decays non-2-D leaves by 0.1 by default
# (weight_decay_1d), which would move the parabola's minimum away from 0.5.
_MARS_CONVERGE = dict(learning_rate=0.05, weight_decay_1d=0.0)


def _scalars_as_vectors(tx):
    """An optax transformation run with rank-0 leaves reshaped to (1,).

    optax's sm3 fails on scalar parameters and its DoG turns a scalar's
    update into shape (1,); gradax handles scalars as one-element arrays, so
    this is the optax twin to compare with.
    """

    def widen(tree):
        return jax.tree.map(lambda x: x.reshape(1) if x.ndim == 0 else x, tree)

    def init(params):
        return tx.init(widen(params))

    def update(updates, state, params=None):
        wide_params = None if params is None else widen(params)
        new, state = tx.update(widen(updates), state, wide_params)
        return jax.tree.map(lambda u, g: u.reshape(g.shape), new, updates), state

    return optax.GradientTransformation(init, update)


def _rprop_without_lag(tx, sign):
    """optax's (scale_by_)rprop emitting the step it computed, not the last one.

    optax 0.2.8 returns the previous step's update (a zero first update;
    optax PR #1725). The current step is what it stores in
    ``prev_updates``; gradax returns that (as torch.optim.Rprop does).
    """

    def update(updates, state, params=None):
        _, state = tx.update(updates, state, params)
        inner = state if hasattr(state, "prev_updates") else state[0]
        return jax.tree.map(lambda u: sign * u, inner.prev_updates), state

    return optax.GradientTransformation(tx.init, update)


def _stacked(params):
    """The 3-D leaf of the conformance params is a stack of (3, 2) layers."""
    return jax.tree.map(lambda x: x.ndim == 3, params)


ENTRIES: list[Entry] = [
    # Adam and SGD.
    Entry(
        "adam", LR, optimizer=True, schedule_arg="learning_rate", rosenbrock_steps=3000
    ),
    Entry(
        "adam",
        dict(learning_rate=0.05, nesterov=True),
        optimizer=True,
        schedule_arg="b1",
    ),
    Entry(
        "adamw",
        dict(learning_rate=0.05, weight_decay=1e-3),
        optimizer=True,
        schedule_arg="weight_decay",
        rosenbrock_steps=3000,
    ),
    Entry("sgd", LR, optimizer=True, schedule_arg="learning_rate"),
    Entry(
        "sgd",
        dict(learning_rate=0.05, momentum=0.9, nesterov=True),
        optimizer=True,
        schedule_arg="momentum",
        rosenbrock_steps=3000,
        converge_kwargs=dict(learning_rate=1e-3, momentum=0.9),
    ),
    Entry("scale_by_adam", dict(b1=0.8), schedule_arg="eps"),
    # The adaptive optimizers.
    Entry(
        "adabelief",
        LR,
        optimizer=True,
        schedule_arg="learning_rate",
        rosenbrock_steps=3000,
    ),
    Entry(
        "adabelief",
        dict(learning_rate=0.05, nesterov=True, **EXACT_BETAS),
        optimizer=True,
        schedule_arg="b1",
    ),
    # Adadelta's first steps are of size sqrt(eps); a larger eps lets it move
    # within the 500 steps of the parabola check.
    Entry(
        "adadelta",
        dict(learning_rate=1.0, eps=1e-3),
        optimizer=True,
        schedule_arg="rho",
    ),
    Entry(
        "adadelta",
        dict(learning_rate=0.5, weight_decay=0.01, eps=1e-3),
        optimizer=True,
        schedule_arg="learning_rate",
    ),
    Entry(
        "adafactor",
        dict(learning_rate=0.05),
        optimizer=True,
        schedule_arg="learning_rate",
        converge_kwargs=dict(learning_rate=0.05, multiply_by_parameter_scale=False),
    ),
    # min_dim_size_to_factor=2 factors the 4x3 and 2x3x2 leaves of the checks.
    Entry(
        "adafactor",
        dict(learning_rate=0.05, min_dim_size_to_factor=2, momentum=0.9),
        optimizer=True,
        schedule_arg="decay_rate",
        converge_kwargs=dict(
            learning_rate=0.05,
            min_dim_size_to_factor=2,
            momentum=0.5,
            multiply_by_parameter_scale=False,
        ),
    ),
    Entry(
        "adafactor",
        dict(learning_rate=0.05, weight_decay_rate=0.01, clipping_threshold=None),
        optimizer=True,
        schedule_arg="weight_decay_rate",
        converge_kwargs=dict(learning_rate=0.05, multiply_by_parameter_scale=False),
    ),
    Entry(
        "adagrad", dict(learning_rate=0.5), optimizer=True, schedule_arg="learning_rate"
    ),
    Entry(
        "adamax",
        LR,
        optimizer=True,
        schedule_arg="learning_rate",
        rosenbrock_steps=6000,
        converge_kwargs=dict(learning_rate=settling(0.1, 6000)),
    ),
    Entry(
        "adamaxw",
        dict(learning_rate=0.05, weight_decay=1e-3),
        optimizer=True,
        schedule_arg="learning_rate",
        rosenbrock_steps=6000,
        converge_kwargs=dict(learning_rate=settling(0.1, 6000), weight_decay=1e-3),
    ),
    # AMSGrad keeps the largest second moment seen: on Rosenbrock that is the
    # one of the steep start, and its steps stay too small to converge.
    Entry("amsgrad", LR, optimizer=True, schedule_arg="learning_rate"),
    Entry(
        "amsgrad",
        dict(
            learning_rate=0.05,
            bias_correction_mu=False,
            bias_correction_nu=False,
            **EXACT_BETAS,
        ),
        optimizer=True,
        schedule_arg="b2",
    ),
    Entry(
        "nadam", LR, optimizer=True, schedule_arg="learning_rate", rosenbrock_steps=3000
    ),
    Entry(
        "nadamw",
        dict(learning_rate=0.05, weight_decay=1e-3),
        optimizer=True,
        schedule_arg="learning_rate",
    ),
    # RAdam takes unscaled momentum steps until rho_t reaches the threshold,
    # which diverge on the steep start of Rosenbrock (as in optax).
    Entry("radam", LR, optimizer=True, schedule_arg="learning_rate"),
    Entry(
        "radam",
        dict(learning_rate=0.05, nesterov=True),
        optimizer=True,
        schedule_arg="threshold",
    ),
    Entry(
        "rmsprop",
        dict(learning_rate=0.01),
        optimizer=True,
        schedule_arg="learning_rate",
        rosenbrock_steps=3000,
        converge_kwargs=dict(learning_rate=_cosine(0.01, 3000)),
    ),
    Entry(
        "rmsprop",
        dict(learning_rate=0.01, centered=True, momentum=0.5, nesterov=True),
        optimizer=True,
        schedule_arg="momentum",
    ),
    Entry(
        "rmsprop",
        dict(learning_rate=0.01, eps_in_sqrt=False, bias_correction=True),
        optimizer=True,
        schedule_arg="decay",
    ),
    Entry(
        "rmsprop",
        dict(
            learning_rate=0.01, centered=True, bias_correction=True, initial_scale=0.1
        ),
        optimizer=True,
        schedule_arg="initial_scale",
    ),
    Entry(
        "yogi",
        dict(learning_rate=0.1, b2=EXACT_B2),
        optimizer=True,
        schedule_arg="learning_rate",
        rosenbrock_steps=3000,
    ),
    Entry(
        "novograd",
        dict(learning_rate=0.05),
        optimizer=True,
        schedule_arg="learning_rate",
    ),
    Entry(
        "novograd",
        dict(learning_rate=0.05, weight_decay=0.01),
        optimizer=True,
        schedule_arg="b2",
    ),
    Entry(
        "lamb", dict(learning_rate=0.02), optimizer=True, schedule_arg="learning_rate"
    ),
    Entry(
        "lamb",
        dict(learning_rate=0.02, weight_decay=0.01),
        optimizer=True,
        schedule_arg="weight_decay",
    ),
    Entry(
        "lars",
        dict(learning_rate=1.0, trust_coefficient=0.01),
        optimizer=True,
        schedule_arg="learning_rate",
    ),
    Entry(
        "lars",
        dict(
            learning_rate=1.0,
            weight_decay=0.01,
            weight_decay_mask=MASK,
            trust_ratio_mask=MASK,
            nesterov=True,
            momentum=0.5,
        ),
        optimizer=True,
        schedule_arg="trust_coefficient",
        # The unmasked leaves take plain momentum steps of size 1.0, which
        # diverge on the parabola; a smaller, decaying rate converges.
        converge_kwargs=dict(
            learning_rate=_cosine(0.1, 500),
            weight_decay=0.01,
            weight_decay_mask=MASK,
            trust_ratio_mask=MASK,
            trust_coefficient=0.5,
            nesterov=True,
            momentum=0.5,
        ),
    ),
    # Sign steps of a constant size oscillate around the minimum; a decaying
    # learning rate lets Lion converge.
    Entry(
        "lion",
        dict(learning_rate=0.01),
        optimizer=True,
        schedule_arg="learning_rate",
        converge_kwargs=LION_CONVERGE,
    ),
    Entry(
        "lion",
        dict(learning_rate=0.01, weight_decay=0.1),
        optimizer=True,
        schedule_arg="b2",
        converge_kwargs=dict(LION_CONVERGE, weight_decay=0.1),
    ),
    # Cautious variants (not in optax).
    Entry(
        "adam",
        dict(learning_rate=0.05, cautious=True),
        optimizer=True,
        schedule_arg="learning_rate",
        optax_name="",
    ),
    Entry(
        "adamw",
        dict(
            learning_rate=0.05,
            weight_decay=0.01,
            cautious=True,
            cautious_weight_decay=True,
        ),
        optimizer=True,
        optax_name="",
        schedule_arg="weight_decay",
    ),
    Entry(
        "nadam",
        dict(learning_rate=0.05, cautious=True),
        optimizer=True,
        schedule_arg="learning_rate",
        optax_name="",
    ),
    Entry(
        "nadamw",
        dict(learning_rate=0.05, weight_decay=0.01, cautious_weight_decay=True),
        optimizer=True,
        schedule_arg="learning_rate",
        optax_name="",
    ),
    Entry(
        "adamax",
        dict(learning_rate=0.05, cautious=True),
        optimizer=True,
        schedule_arg="learning_rate",
        optax_name="",
    ),
    Entry(
        "adamaxw",
        dict(
            learning_rate=0.05,
            weight_decay=0.01,
            cautious=True,
            cautious_weight_decay=True,
        ),
        optimizer=True,
        schedule_arg="learning_rate",
        optax_name="",
    ),
    Entry(
        "amsgrad",
        dict(learning_rate=0.05, cautious=True),
        optimizer=True,
        schedule_arg="learning_rate",
        optax_name="",
    ),
    Entry(
        "radam",
        dict(learning_rate=0.05, cautious=True),
        optimizer=True,
        schedule_arg="learning_rate",
        optax_name="",
    ),
    Entry(
        "adabelief",
        dict(learning_rate=0.05, cautious=True),
        optimizer=True,
        schedule_arg="learning_rate",
        optax_name="",
    ),
    Entry(
        "yogi",
        dict(learning_rate=0.1, b2=EXACT_B2, cautious=True),
        optimizer=True,
        schedule_arg="learning_rate",
        optax_name="",
    ),
    Entry(
        "lion",
        dict(learning_rate=0.01, cautious=True, cautious_weight_decay=True),
        optimizer=True,
        schedule_arg="learning_rate",
        optax_name="",
        converge_kwargs=dict(LION_CONVERGE, cautious=True, cautious_weight_decay=True),
    ),
    # The adaptive optimizers' building blocks.
    Entry("scale_by_adamax", dict(b1=0.8), schedule_arg="b2"),
    Entry("scale_by_amsgrad", dict(b1=0.8), schedule_arg="eps"),
    Entry("scale_by_belief", dict(b1=0.8), schedule_arg="eps_root"),
    Entry("scale_by_adadelta", dict(rho=0.8), schedule_arg="eps"),
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
    # Adan, fromage, noisy_sgd, the optimistic family, rprop, the sign
    # optimizers and sm3.
    Entry(
        "adan",
        LR,
        optimizer=True,
        schedule_arg="learning_rate",
        rosenbrock_steps=3000,
        converge_kwargs=dict(learning_rate=settling(0.05)),
    ),
    Entry(
        "adan",
        dict(learning_rate=0.05, b2=0.8, weight_decay=1e-3, eps_root=0.0),
        optimizer=True,
        schedule_arg="b3",
    ),
    Entry(
        "fromage",
        LR,
        optimizer=True,
        schedule_arg="learning_rate",
        # Fromage's steps are relative to each parameter's norm and it shrinks
        # the parameters: a small rate lands near the minimum, not on it.
        converge_kwargs=dict(learning_rate=0.01),
    ),
    Entry(
        "noisy_sgd",
        dict(learning_rate=0.05, eta=0.01, seed=3),
        optimizer=True,
        schedule_arg="learning_rate",
        complex_ok=False,  # add_noise draws real Gaussian noise
        converge_kwargs=dict(learning_rate=0.05, eta=1e-8, seed=0),
    ),
    Entry(
        "optimistic_gradient_descent",
        LR,
        optimizer=True,
        schedule_arg="learning_rate",
    ),
    Entry(
        "optimistic_gradient_descent",
        dict(learning_rate=0.05, alpha=0.5, beta=0.3),
        optimizer=True,
        schedule_arg="beta",
    ),
    Entry(
        "optimistic_adam_v2",
        LR,
        optimizer=True,
        schedule_arg="learning_rate",
        rosenbrock_steps=3000,
        converge_kwargs=dict(learning_rate=settling(0.03)),
    ),
    Entry(
        "optimistic_adam_v2",
        dict(learning_rate=0.05, alpha=0.7, b1=0.8, nesterov=False),
        optimizer=True,
        schedule_arg="alpha",
        converge_kwargs=dict(learning_rate=0.03),
    ),
    Entry(
        "rprop",
        LR,
        optimizer=True,
        schedule_arg="learning_rate",
        rosenbrock_steps=3000,
        complex_ok=False,  # compares the signs of successive gradients
        optax_build_fn=lambda **kw: _rprop_without_lag(optax.rprop(**kw), -1.0),
    ),
    Entry(
        "rprop",
        dict(learning_rate=0.1, eta_minus=0.3, eta_plus=1.5, max_step_size=1.0),
        optimizer=True,
        schedule_arg="eta_plus",
        complex_ok=False,
        optax_build_fn=lambda **kw: _rprop_without_lag(optax.rprop(**kw), -1.0),
    ),
    Entry("sign_sgd", LR, optimizer=True, schedule_arg="learning_rate"),
    Entry(
        "signum",
        dict(learning_rate=0.05, beta=0.8),
        optimizer=True,
        schedule_arg="beta",
        rosenbrock_steps=3000,
        # Fixed-size sign steps oscillate at the step size: decay it.
        converge_kwargs=dict(learning_rate=_DECAYING, beta=0.8),
    ),
    Entry(
        "sm3",
        LR,
        optimizer=True,
        schedule_arg="learning_rate",
        optax_build_fn=lambda **kw: _scalars_as_vectors(optax.sm3(**kw)),
        converge_kwargs=dict(learning_rate=0.3),
    ),
    # Their building blocks.
    Entry("scale_by_adan", dict(b1=0.9), schedule_arg="b2"),
    Entry("scale_by_optimistic_gradient", dict(alpha=0.5), schedule_arg="beta"),
    Entry(
        "scale_by_rprop",
        dict(learning_rate=0.1),
        schedule_arg="eta_minus",
        complex_ok=False,
        optax_build_fn=lambda **kw: _rprop_without_lag(optax.scale_by_rprop(**kw), 1.0),
    ),
    Entry(
        "scale_by_sm3",
        dict(b1=0.8, b2=0.95),
        schedule_arg="b2",
        optax_build_fn=lambda **kw: _scalars_as_vectors(optax.scale_by_sm3(**kw)),
    ),
    Entry(
        "scale_by_sm3",
        optax_build_fn=lambda **kw: _scalars_as_vectors(optax.scale_by_sm3(**kw)),
    ),
    Entry(
        "scale_by_distance_over_gradients",
        dict(reps_rel=1e-3, global_scale=0.5),
        schedule_arg="global_scale",
        optax_build_fn=lambda **kw: _scalars_as_vectors(
            optax.scale_by_distance_over_gradients(**kw)
        ),
    ),
    # optax's older optimistic Adam.
    Entry(
        "optimistic_adam",
        LR,
        optimizer=True,
        schedule_arg="learning_rate",
    ),
    Entry(
        "optimistic_adam",
        dict(learning_rate=0.05, optimism=0.02, b1=0.8, nesterov=False),
        schedule_arg="optimism",
    ),
    # MARS (no optax twin).
    Entry(
        "mars",
        dict(learning_rate=0.05),
        optimizer=True,
        schedule_arg="learning_rate",
        optax_name="",
        converge_kwargs=_MARS_CONVERGE,
    ),
    # Sign steps of a constant size oscillate around the minimum: converge
    # with a step size decaying like 1/t.
    Entry(
        "mars",
        dict(learning_rate=0.02, mars_type="mars-lion", optimize_1d=True),
        optimizer=True,
        schedule_arg="gamma",
        optax_name="",
        converge_kwargs=dict(
            learning_rate=lambda count: 0.05 / (1 + 0.05 * count),
            mars_type="mars-lion",
            optimize_1d=True,
            weight_decay_1d=0.0,
        ),
    ),
    # MARS' direction alone (no learning rate).
    Entry("scale_by_mars", dict(gamma=0.025), schedule_arg="b1", optax_name=""),
    # Shampoo and SOAP (no optax twins). Small blocks and frequent refreshes so the
    # conformance checks' few steps reach blocking, cached roots and basis
    # refreshes; complex parameters get Hermitian factors.
    Entry(
        "shampoo",
        dict(learning_rate=0.05, start_preconditioning_step=1, block_size=4),
        optimizer=True,
        schedule_arg="learning_rate",
        optax_name="",
    ),
    Entry(
        "shampoo",
        dict(
            learning_rate=0.05,
            b2=0.9,
            preconditioning_compute_steps=2,
            start_preconditioning_step=0,
            grafting_type="adagrad",
            nesterov=True,
        ),
        optimizer=True,
        # Not b2: a scheduled b2 gives ``1 - b2`` one ulp away from the folded
        # constant's, and the first update's rank-deficient factors amplify
        # rounding in their null space by up to matrix_epsilon**-0.25 (31x):
        # measured 3.8e-6 relative against the check's 1e-6.
        schedule_arg="b1",
        optax_name="",
        # AdaGrad's steps shrink like 1/sqrt(t): 0.05 is too slow for 500 steps.
        converge_kwargs=dict(learning_rate=0.5),
    ),
    Entry(
        "scale_by_shampoo",
        # Unscaled directions (no learning rate): from the second update on the
        # factors have full rank, so float32 rounding is not amplified (with 0,
        # sharded and injected runs differ by up to 5e-5 relative).
        dict(start_preconditioning_step=1, grafting_type="rmsprop_normalized"),
        schedule_arg="matrix_epsilon",
        optax_name="",
    ),
    Entry(
        "soap",
        dict(learning_rate=0.05, precondition_frequency=2),
        optimizer=True,
        schedule_arg="learning_rate",
        optax_name="",
    ),
    Entry(
        "soap",
        dict(learning_rate=0.05, max_precond_dim=6, precondition_1d=True),
        optimizer=True,
        # Not b2: one ulp in ``1 - b2`` moves eigh's rounding, and eigenvectors
        # of ill-separated eigenvalues by ~eps * lambda_1 / gap: measured 1e-5
        # relative on the (3, 2) slices against the check's 1e-6.
        schedule_arg="weight_decay",
        optax_name="",
    ),
    Entry(
        "scale_by_soap",
        dict(precondition_frequency=1, normalize_grads=True),
        schedule_arg="eps",
        optax_name="",
    ),
    # Kron. The default probability is a schedule; the schedule check needs a
    # number, so the entries that schedule another argument give one.
    Entry(
        "kron",
        dict(learning_rate=0.05),
        optimizer=True,
        schedule_arg="learning_rate",
        optax_name="",
    ),
    Entry(
        "kron",
        dict(
            learning_rate=0.05,
            memory_save_mode="one_diag",
            scanned_layers=_stacked,
            preconditioner_update_probability=0.5,
        ),
        optimizer=True,
        schedule_arg="preconditioner_update_probability",
        optax_name="",
    ),
    # psgd-jax be95524's rules: the interval rule adds update_counter.
    Entry(
        "kron",
        dict(
            learning_rate=0.05,
            output_clip="rms",
            damping=True,
            precond_update="interval",
            preconditioner_update_probability=0.5,
        ),
        optimizer=True,
        schedule_arg="preconditioner_update_probability",
        optax_name="",
    ),
    Entry(
        "scale_by_kron",
        dict(b1=0.8, min_ndim_triangular=1, precond_dtype=jnp.float32),
        schedule_arg="b1",
        optax_name="",
    ),
    # 8-bit moments through the dtype arguments.
    Entry(
        "adam",
        dict(learning_rate=0.05, mu_dtype=Q8, nu_dtype=Q8),
        optimizer=True,
        schedule_arg="learning_rate",
        optax_name="",
    ),
    # The float code (no table): every registry check on both moments.
    Entry(
        "adam",
        dict(
            learning_rate=0.05,
            mu_dtype=gradax.int8_blockwise(block_size=4, code="float"),
            nu_dtype=gradax.int8_blockwise(block_size=4, code="float"),
        ),
        optimizer=True,
        optax_name="",
    ),
    Entry(
        "adamw",
        dict(learning_rate=0.05, weight_decay=1e-3, nu_dtype=Q8),
        optimizer=True,
        schedule_arg="weight_decay",
        optax_name="",
    ),
    Entry("lion", dict(learning_rate=0.01, mu_dtype=Q8), optax_name=""),
    Entry(
        "sgd",
        dict(learning_rate=0.05, momentum=0.9, accumulator_dtype=Q8),
        optimizer=True,
        schedule_arg="momentum",
        optax_name="",
        converge_kwargs=dict(learning_rate=1e-3, momentum=0.9, accumulator_dtype=Q8),
    ),
    # Adam-mini: the default partition, and heads / full blocks with 8-bit mu.
    Entry(
        "adam_mini",
        LR,
        optimizer=True,
        schedule_arg="learning_rate",
        optax_name="",
        rosenbrock_steps=3000,
    ),
    Entry(
        "adam_mini",
        dict(
            learning_rate=0.05,
            weight_decay=1e-3,
            mu_dtype=Q8,
            partition={"s": "full", "v": "full", "m": 3, "t": "tensor"},
        ),
        optimizer=True,
        schedule_arg="weight_decay",
        optax_name="",
    ),
    # b2 = 0.99: with 0.999 a Python float's 1 - b2 is folded in float64 and
    # a schedule's or an injected one's in float32, 4.7e-5 apart relatively,
    # which the first step's bias correction shows in full on this direction
    # of size ~1 (no learning rate); the checks compare at 1e-6 and 2e-5.
    # For 0.99 the two differ by 9.5e-7.
    Entry(
        "scale_by_adam_mini", dict(b1=0.8, b2=0.99), schedule_arg="b2", optax_name=""
    ),
]
