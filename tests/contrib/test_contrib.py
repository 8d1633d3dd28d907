"""The contrib optimizers beyond the conformance registry.

Signatures against optax.contrib, validation errors, non-constant schedules
against optax, the paper's Prodigy rule in NumPy for ``scale_by_prodigy``
(optax has none), schedule-free evaluation parameters, DoG's ``init_step``.
"""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from conformance_base import make_params, trajectory

import gradax

# name -> the optax.contrib attribute it mirrors.
OPTAX_TWINS = {
    "adopt": "adopt",
    "scale_by_adopt": "scale_by_adopt",
    "ademamix": "ademamix",
    "scale_by_ademamix": "scale_by_ademamix",
    "simplified_ademamix": "simplified_ademamix",
    "scale_by_simplified_ademamix": "scale_by_simplified_ademamix",
    "madgrad": "madgrad",
    "scale_by_madgrad": "scale_by_madgrad",
    "cocob": "cocob",
    "scale_by_cocob": "scale_by_cocob",
    "dog": "dog",
    "scale_by_dog": "_dog.scale_by_dog",
    "dowg": "dowg",
    "scale_by_dowg": "_dog.scale_by_dowg",
    "prodigy": "prodigy",
    "dadapt_adamw": "dadapt_adamw",
    "mechanize": "mechanize",
    "schedule_free": "schedule_free",
    "schedule_free_sgd": "schedule_free_sgd",
    "schedule_free_adamw": "schedule_free_adamw",
    "schedule_free_eval_params": "schedule_free_eval_params",
    "sophia": "sophia",
    "scale_by_sophia": "_sophia.scale_by_sophia",
    "hutchinson_estimator_diag_hessian": "hutchinson_estimator_diag_hessian",
    "sam": "sam",
    "normalize": "normalize",
    "reduce_on_plateau": "reduce_on_plateau",
    "momo": "momo",
    "momo_adam": "momo_adam",
}
STATES = [
    "COCOBState",
    "DAdaptAdamWState",
    "DoGState",
    "DoWGState",
    "HutchinsonState",
    "MadgradState",
    "MechanicState",
    "MomoAdamState",
    "MomoState",
    "ProdigyState",
    "ReduceLROnPlateauState",
    "SAMState",
    "ScaleByAdemamixState",
    "ScaleBySimplifiedAdEMAMixState",
    "ScheduleFreeState",
    "SophiaState",
]


# Options optax's contrib twins lack, with the default that keeps optax's rule.
GRADAX_ONLY_DEFAULTS = {"hessian_refresh": "interval_start", "bias_correction": True}


def _optax(path):
    target = optax.contrib
    for part in path.split("."):
        target = getattr(target, part)
    return target


@pytest.mark.parametrize("name", sorted(OPTAX_TWINS))
def test_signature_matches_optax(name):
    ours = inspect.signature(getattr(gradax.contrib, name)).parameters
    theirs = inspect.signature(_optax(OPTAX_TWINS[name])).parameters
    assert list(ours)[: len(theirs)] == list(theirs)
    # gradax-only options come last, keyword-only, defaulting to optax's rule.
    for extra in list(ours)[len(theirs) :]:
        assert ours[extra].kind is inspect.Parameter.KEYWORD_ONLY, extra
        assert ours[extra].default == GRADAX_ONLY_DEFAULTS[extra], extra
    for key, theirs_p in theirs.items():
        ours_p = ours[key]
        assert ours_p.kind == theirs_p.kind, key
        default = theirs_p.default
        if callable(default) or hasattr(default, "init"):
            continue  # a lambda or an estimator object: compared by behaviour
        assert ours_p.default == default, key


@pytest.mark.parametrize("name", sorted(OPTAX_TWINS) + STATES)
def test_exported_in_contrib_and_at_top_level(name):
    assert getattr(gradax.contrib, name) is getattr(gradax, name)


@pytest.mark.parametrize("name", STATES)
def test_state_fields_match_optax(name):
    assert getattr(gradax, name)._fields == getattr(optax.contrib, name)._fields


def test_schedule_free_eval_params_is_a_function():
    assert inspect.isfunction(gradax.schedule_free_eval_params)


# ---------------------------------------------------------------------------
# Validation names the argument.

BAD_ARGUMENTS = [
    (gradax.adopt, dict(learning_rate=0.1, b2=1.0), "b2"),
    (gradax.scale_by_adopt, dict(eps=-1.0), "eps"),
    (gradax.ademamix, dict(learning_rate=0.1, b3=1.5), "b3"),
    (gradax.ademamix, dict(learning_rate=0.1, weight_decay=-1.0), "weight_decay"),
    (gradax.simplified_ademamix, dict(learning_rate=0.1, alpha=-1.0), "alpha"),
    (gradax.madgrad, dict(learning_rate=0.1, momentum=1.0), "momentum"),
    (gradax.cocob, dict(alpha=0.0), "alpha"),
    (gradax.dog, dict(init_step=("nowhere", 1.0)), "init_step kind"),
    (gradax.dog, dict(init_step=("distance", -1.0)), "init_step value"),
    (gradax.dog, dict(init_step=0.1), "init_step"),
    (gradax.dowg, dict(init_estim_sq_dist=0.0), "init_estim_sq_dist"),
    (gradax.prodigy, dict(betas=(0.9, 1.2)), r"betas must be .*\[0, 1\).*\(0.9, 1.2\)"),
    (gradax.prodigy, dict(betas=0.9), "betas"),
    (gradax.prodigy, dict(estim_lr0=0.0), "estim_lr0"),
    (gradax.dadapt_adamw, dict(betas=(-0.1, 0.9)), r"betas must be .*\(-0.1, 0.9\)"),
    (gradax.mechanize, dict(base_optimizer=None), "base_optimizer"),
    (gradax.mechanize, dict(base_optimizer=gradax.sgd(0.1), num_betas=0), "num_betas"),
    (gradax.schedule_free_sgd, dict(b1=0.0), "b1"),
    (gradax.schedule_free_adamw, dict(b2=1.0), "b2"),
    (gradax.sophia, dict(learning_rate=0.1, clip_threshold=0.0), "clip_threshold"),
    (gradax.sophia, dict(learning_rate=0.1, update_interval=0), "update_interval"),
    (gradax.sam, dict(optimizer=gradax.sgd(0.1), adv_optimizer=1.0), "adv_optimizer"),
    (
        gradax.sam,
        dict(optimizer=gradax.sgd(0.1), adv_optimizer=gradax.sgd(0.1), sync_period=0),
        "sync_period",
    ),
    (gradax.reduce_on_plateau, dict(factor=1.0), "factor"),
    (gradax.reduce_on_plateau, dict(rtol=2.0), "rtol"),
    (gradax.reduce_on_plateau, dict(rtol=0.0, atol=0.0), "rtol or atol"),
    (gradax.momo, dict(beta=1.0), "beta"),
    (gradax.momo_adam, dict(b2=-0.5), "b2"),
]


@pytest.mark.parametrize(
    "factory, kwargs, argument",
    BAD_ARGUMENTS,
    ids=[f"{f.__name__}-{a}" for f, _, a in BAD_ARGUMENTS],
)
def test_bad_argument_is_named(factory, kwargs, argument):
    with pytest.raises((ValueError, TypeError), match=argument):
        factory(**kwargs)


def test_schedules_are_not_validated_at_construction():
    gradax.prodigy(lambda c: 1.0 - c, weight_decay=lambda c: -1.0 * c)


# ---------------------------------------------------------------------------
# Non-constant schedules, where gradax evaluates them at its own counters.


def _steps_equal(ours, theirs, steps=12, rtol=1e-5):
    params = make_params()
    a = jax.jit(lambda p: trajectory(ours, p, steps))(params)
    b = jax.jit(lambda p: trajectory(theirs, p, steps))(params)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(x, y, rtol=rtol, atol=1e-6)


def _decaying(count):
    return 0.1 / (1.0 + count)


def _warming(count):
    return jnp.minimum(1.0, (count + 1.0) / 5.0)


def _rising(count):
    return 0.02 * jnp.minimum(1.0 + count, 8.0)


def test_schedule_free_evaluates_its_rate_from_step_one():
    # schedule_free's own rate starts at step 1, its base optimizer's at 0.
    # Only a rising rate changes the averaging weights (they use the max).
    _steps_equal(
        gradax.schedule_free_sgd(_rising), optax.contrib.schedule_free_sgd(_rising)
    )
    _steps_equal(
        gradax.schedule_free_sgd(_decaying, weight_decay=1e-3),
        optax.contrib.schedule_free_sgd(_decaying, weight_decay=1e-3),
    )
    _steps_equal(
        gradax.schedule_free_adamw(_decaying),
        optax.contrib.schedule_free_adamw(_decaying),
    )


@pytest.mark.parametrize(
    "name, kwargs",
    [
        ("ademamix", dict(learning_rate=_decaying, b3=lambda c: 0.9 + 0.001 * c)),
        ("ademamix", dict(learning_rate=0.05, alpha=lambda c: 5.0 * _warming(c))),
        ("simplified_ademamix", dict(learning_rate=0.01, alpha=_warming)),
        ("madgrad", dict(learning_rate=_decaying)),
        ("prodigy", dict(learning_rate=_warming)),
        ("dadapt_adamw", dict(learning_rate=_warming)),
        ("adopt", dict(learning_rate=_decaying)),
        ("dog", dict(learning_rate=_warming)),
    ],
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_varying_schedule_equals_optax(name, kwargs):
    _steps_equal(
        getattr(gradax, name)(**kwargs), getattr(optax.contrib, name)(**kwargs)
    )


# ---------------------------------------------------------------------------
# scale_by_prodigy: no optax twin; the paper's rule in NumPy.


def _prodigy_numpy(params, grads_fn, steps, lr, b1=0.9, b2=0.999, d0=1e-6, eps=1e-8):
    """Algorithm 3 (Prodigy, Adam version) of the paper, written out in NumPy.

    The step size gamma_k is ``lr`` with Adam's bias correction, as in the
    authors' implementation.
    """
    x = {k: np.asarray(v, np.float64) for k, v in params.items()}
    x0 = {k: v.copy() for k, v in x.items()}
    m = {k: np.zeros_like(v) for k, v in x.items()}
    v = {k: np.zeros_like(v) for k, v in x.items()}
    s = {k: np.zeros_like(v) for k, v in x.items()}
    r, d, sb2 = 0.0, d0, np.sqrt(b2)
    for t in range(1, steps + 1):
        x32 = {k: val.astype(np.float32) for k, val in x.items()}
        g = {k: np.asarray(u, np.float64) for k, u in grads_fn(x32, t - 1).items()}
        gamma = lr * np.sqrt(1 - b2**t) / (1 - b1**t)
        inner = sum(np.sum(g[k] * (x0[k] - x[k])) for k in x)
        r = sb2 * r + (1 - sb2) * gamma * d**2 * inner
        for k in x:
            m[k] = b1 * m[k] + (1 - b1) * d * g[k]
            v[k] = b2 * v[k] + (1 - b2) * d**2 * g[k] ** 2
            s[k] = sb2 * s[k] + (1 - sb2) * gamma * d**2 * g[k]
        d_next = max(d, r / sum(np.sum(np.abs(s[k])) for k in x))
        for k in x:
            x[k] = x[k] - gamma * d * m[k] / (np.sqrt(v[k]) + d * eps)
        d = d_next
    return x


def test_scale_by_prodigy_follows_the_paper():
    from conformance_base import quadratic_grads

    params = make_params()
    lr, steps = 0.7, 15
    tx = gradax.chain(gradax.scale_by_prodigy(estim_lr0=1e-3), gradax.scale(-lr))

    def grads_fn(p, step):
        return quadratic_grads(p, float(step))

    def body(carry, step):
        p, s = carry
        u, s = tx.update(quadratic_grads(p, step.astype(jnp.float32)), s, p)
        return (gradax.apply_updates(p, u), s), None

    (ours, state), _ = jax.lax.scan(body, (params, tx.init(params)), jnp.arange(steps))
    expected = _prodigy_numpy(params, grads_fn, steps, lr, d0=1e-3)
    for k in params:
        np.testing.assert_allclose(ours[k], expected[k], rtol=2e-5, atol=1e-6)
    # The estimate d has grown well past d0 = 1e-3, so the test covers it.
    assert float(state[0].estim_lr) > 10 * 1e-3, state[0].estim_lr


def test_scale_by_prodigy_chain_equals_prodigy_for_a_constant_rate():
    _steps_equal(
        gradax.chain(gradax.scale_by_prodigy(weight_decay=1e-2), gradax.scale(-0.5)),
        gradax.prodigy(0.5, weight_decay=1e-2),
        steps=20,
        rtol=1e-4,  # the rate multiplies at another place: a few ulps apart
    )


# ---------------------------------------------------------------------------
# Schedule-free evaluation parameters.


def _run_schedule_free(tx, steps=6):
    params = make_params()
    state = tx.init(params)
    for i in range(steps):
        grads = jax.tree.map(lambda p, i=i: p - 0.5 + 0.1 * i, params)
        updates, state = tx.update(grads, state, params)
        params = gradax.apply_updates(params, updates)
    return params, state


def test_schedule_free_eval_params_equals_optax():
    params, state = _run_schedule_free(gradax.schedule_free_adamw(0.05))
    ref_tx = optax.contrib.schedule_free_adamw(0.05)
    ref_params, ref_state = make_params(), None
    ref_state = ref_tx.init(ref_params)
    for i in range(6):
        grads = jax.tree.map(lambda p, i=i: p - 0.5 + 0.1 * i, ref_params)
        updates, ref_state = ref_tx.update(grads, ref_state, ref_params)
        ref_params = optax.apply_updates(ref_params, updates)
    ours = gradax.schedule_free_eval_params(state, params)
    theirs = optax.contrib.schedule_free_eval_params(ref_state, ref_params)
    for x, y in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
    # The evaluation point is the average x, not the training point y.
    assert not np.allclose(ours["v"], params["v"])


def test_schedule_free_eval_params_finds_a_nested_state():
    tx = gradax.chain(
        gradax.clip_by_global_norm(10.0), gradax.schedule_free_sgd(b1=lambda c: 0.9)
    )
    params, state = _run_schedule_free(tx)
    direct = gradax.schedule_free_eval_params(state[1].inner_state, params)
    nested = gradax.schedule_free_eval_params(state, params)
    for x, y in zip(jax.tree.leaves(direct), jax.tree.leaves(nested), strict=True):
        np.testing.assert_array_equal(x, y)
    injected = gradax.inject_hyperparams(gradax.schedule_free_sgd)(learning_rate=0.5)
    params, state = _run_schedule_free(injected)
    gradax.schedule_free_eval_params(state, params)
    with pytest.raises(ValueError, match="ScheduleFreeState"):
        gradax.schedule_free_eval_params(gradax.adam(0.1).init(params), params)


# ---------------------------------------------------------------------------
# DoG's init_step reads like the tuple optax takes.


def test_dog_init_step_reads_like_a_tuple():
    tx = gradax.dog(init_step=("distance", 0.5))
    kind, value = tx.init_step
    assert (kind, value) == ("distance", 0.5)
    assert tx.init_step[0] == "distance" and len(tx.init_step) == 2
    assert "('distance', 0.5)" in repr(tx)
    # The value is a leaf (differentiable, changeable without retracing).
    assert 0.5 in jax.tree.leaves(tx)
    assert gradax.dog() == gradax.dog(init_step=("heuristic", 1e-6))


def test_dog_inside_inject_hyperparams():
    tx = gradax.inject_hyperparams(gradax.dog)(
        learning_rate=0.5, init_step=("learning_rate", 0.1)
    )
    params = make_params()
    state = tx.init(params)
    tx.update(jax.tree.map(jnp.ones_like, params), state, params)
    assert float(gradax.tree.get(state, "learning_rate")) == 0.5


def test_mechanize_inside_inject_hyperparams():
    tx = gradax.inject_hyperparams(gradax.mechanize)(gradax.adam(0.1), s_init=1e-4)
    params = make_params()
    state = tx.init(params)
    _, state = tx.update(jax.tree.map(jnp.ones_like, params), state, params)
    assert float(gradax.tree.get(state, "s_init")) == pytest.approx(1e-4)


def test_optax_base_optimizer_inside_gradax_wrappers():
    _steps_equal(
        gradax.mechanize(optax.adam(0.05)),
        optax.contrib.mechanize(optax.adam(0.05)),
    )
    _steps_equal(
        gradax.schedule_free(optax.sgd(0.1), 0.1),
        optax.contrib.schedule_free(optax.sgd(0.1), 0.1),
    )
