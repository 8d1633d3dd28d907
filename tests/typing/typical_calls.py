"""Typical gradax calls: a static type checker must accept every one.

Checked by tests/typing/test_static_types.py (pyrefly, as in CI); not
collected by pytest (no test functions), and imported nowhere.
"""

import jax
import jax.numpy as jnp
import optax

import gradax

params = {"w": jnp.ones((4, 3)), "b": jnp.zeros(3)}

tx = gradax.adamw(learning_rate=1e-3, weight_decay=0.1)
tx = gradax.adam(1e-3, b1=0.95, nesterov=True)
tx = gradax.sgd(gradax.cosine_decay_schedule(0.1, 1000), momentum=0.9)
tx = gradax.chain(gradax.clip_by_global_norm(1.0), optax.adam(1e-3))
tx = gradax.chain(gradax.clip_by_global_norm(1.0), gradax.adamw(1e-3))
tx = gradax.inject_hyperparams(gradax.adamw)(learning_rate=1e-3)
tx = gradax.masked(gradax.add_decayed_weights(1e-4), {"w": True, "b": False})
tx = gradax.partition(
    {"muon": gradax.contrib.muon(1e-3), "adam": optax.adam(1e-3)},
    {"w": "muon", "b": "adam"},
)
tx = gradax.MultiSteps(gradax.adam(1e-3), every_k_schedule=4)
tx = gradax.apply_if_finite(gradax.adam(1e-3), max_consecutive_errors=3)
tx = gradax.lion(3e-4, b1=0.9, b2=0.99)
tx = gradax.contrib.muon(0.02, ns_steps=5, nesterov=True)
schedule = gradax.warmup_cosine_decay_schedule(0.0, 1e-3, 100, 1000)
schedule = gradax.linear_schedule(1e-3, 0.0, 1000)
tx = gradax.adamw(schedule).replace(weight_decay=0.05)

state = tx.init(params)
updates, state = tx.update(params, state, params)
params = gradax.apply_updates(params, updates)
norm = gradax.tree.norm(updates)
loss = gradax.losses.softmax_cross_entropy(jnp.zeros((2, 3)), jnp.ones((2, 3)) / 3)
key = jax.random.key(0)
