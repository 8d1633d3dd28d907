"""gradax.microbatching against optax.microbatching."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

import gradax


def _assert_close(ours, theirs, rtol=1e-5, atol=1e-6):
    leaves_a, leaves_b = jax.tree.leaves(ours), jax.tree.leaves(theirs)
    assert len(leaves_a) == len(leaves_b)
    for a, b in zip(leaves_a, leaves_b, strict=True):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


def test_microbatching_matches_optax():
    def loss(w, x, y):
        return 0.5 * jnp.mean((x @ w - y) ** 2)

    x = jnp.linspace(-1.0, 1.0, 24).reshape(8, 3)
    y = jnp.arange(8.0)
    for kind in ("SUM", "MEAN", "RUNNING_MEAN"):
        for size in (None, 2, 4):

            def grads(m, kind=kind, size=size):
                acc = getattr(m.microbatching.AccumulationType, kind)
                return m.microbatching.micro_grad(
                    loss,
                    batch_argnums=(1, 2),
                    accumulator=acc,
                    microbatch_size=size,
                    transform_fn=lambda g: (g, g**2),
                    metrics_fn=jnp.linalg.norm,
                )(jnp.ones(3), x, y)

            _assert_close(grads(gradax), grads(optax))

    def split(m):
        acc = m.microbatching.AccumulationType
        fn = m.microbatch(
            lambda a, b: (a * b, jnp.sum(a)),
            argnums=(0, 1),
            microbatch_size=2,
            accumulator=(acc.CONCAT, acc.RUNNING_MEAN),
            num_real_microbatches=3,
        )
        return fn(jnp.arange(8.0), jnp.arange(8.0) + 1)

    _assert_close(split(gradax), split(optax))
    # optax's enum members work in gradax's functions (a switch one call at
    # a time), each as the member of the same name.
    mixed = gradax.microbatching.micro_grad(
        loss,
        batch_argnums=(1, 2),
        accumulator=optax.microbatching.AccumulationType.MEAN,
    )(jnp.ones(3), x, y)
    _assert_close(
        mixed,
        optax.microbatching.micro_grad(
            loss,
            batch_argnums=(1, 2),
            accumulator=optax.microbatching.AccumulationType.MEAN,
        )(jnp.ones(3), x, y),
    )
