"""Conformance registry entries for the sign optimizers (see registry.py).

Also: adan, fromage, noisy_sgd, the optimistic family, rprop, sm3 and DoG.
polyak_sgd / scale_by_polyak need ``value=`` in every update, so they are
checked in test_sign_misc.py instead of here.
"""

from __future__ import annotations

import jax
import optax
from registry_base import Entry, settling

import gradax

LR = dict(learning_rate=0.05)
_DECAYING = gradax.exponential_decay(0.05, 1, 0.995)


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


ENTRIES: list[Entry] = [
    # Optimizers.
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
    # Building blocks.
    Entry("scale_by_adan", dict(b1=0.9), schedule_arg="b2"),
    Entry("scale_by_optimistic_gradient", dict(alpha=0.5), schedule_arg="beta"),
    Entry(
        "scale_by_rprop",
        dict(learning_rate=0.1),
        schedule_arg="eta_minus",
        complex_ok=False,
        optax_build_fn=lambda **kw: _rprop_without_lag(optax.scale_by_rprop(**kw), 1.0),
    ),
    Entry("scale_by_sign"),
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
    Entry(
        "normalize_by_update_norm",
        dict(scale_factor=0.5),
        schedule_arg="scale_factor",
    ),
]
