"""MARS against its rule written out in NumPy, and its special cases."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradax

SHAPES = {"s": (), "v": (5,), "m": (4, 3), "t": (2, 3, 2)}
STEPS = 15


def make_params():
    rng = np.random.default_rng(0)
    return {k: rng.normal(size=s).astype(np.float32) for k, s in SHAPES.items()}


def make_grads(scales):
    """One gradient tree per step; ``scales[t]`` sets the size at step t."""
    rng = np.random.default_rng(1)
    return [
        {k: (scale * rng.normal(size=s)).astype(np.float32) for k, s in SHAPES.items()}
        for scale in scales
    ]


# Small steps (no clipping) alternate with large ones (||c|| > 1 on every leaf).
MIXED = [0.05, 0.05, 2.0, 0.05, 1.5] * 3
SMALL = [0.05] * STEPS


def numpy_mars(
    params,
    grads_seq,
    *,
    lr,
    b1,
    b2,
    eps,
    weight_decay,
    gamma,
    mars_type="mars-adamw",
    optimize_1d=False,
    betas_1d=(0.9, 0.95),
    lr_1d=None,
    weight_decay_1d=0.1,
):
    """The authors' approximate MARS step, leaf by leaf, in float64.

    Returns the final params and how many (leaf, step) corrections were clipped
    and left alone.
    """
    lr_1d = lr if lr_1d is None else lr_1d
    p = {k: np.asarray(x, np.float64) for k, x in params.items()}
    m = {k: np.zeros_like(x) for k, x in p.items()}
    v = {k: np.zeros_like(x) for k, x in p.items()}
    last = {k: np.zeros_like(x) for k, x in p.items()}
    clipped = kept = 0
    for t, grads in enumerate(grads_seq, start=1):
        for k in p:
            g = np.asarray(grads[k], np.float64)
            if optimize_1d or g.ndim == 2:
                c = g + gamma * (b1 / (1 - b1)) * (g - last[k])
                norm = np.linalg.norm(c)
                if norm > 1:
                    c = c / norm
                    clipped += 1
                else:
                    kept += 1
                m[k] = b1 * m[k] + (1 - b1) * c
                if mars_type == "mars-adamw":
                    v[k] = b2 * v[k] + (1 - b2) * c * c
                    denom = (np.sqrt(v[k]) / np.sqrt(1 - b2**t) + eps) * (1 - b1**t)
                    direction = m[k] / denom
                else:
                    direction = np.sign(m[k])
                p[k] = p[k] - lr * (weight_decay * p[k] + direction)
            else:
                c1, c2 = betas_1d
                m[k] = c1 * m[k] + (1 - c1) * g
                v[k] = c2 * v[k] + (1 - c2) * g * g
                denom = (np.sqrt(v[k]) / np.sqrt(1 - c2**t) + eps) * (1 - c1**t)
                p[k] = p[k] - lr_1d * (weight_decay_1d * p[k] + m[k] / denom)
            last[k] = g
    return p, clipped, kept


def run(tx, params, grads_seq):
    params = jax.tree.map(jnp.asarray, params)
    state = tx.init(params)
    step = jax.jit(tx.update)
    for grads in grads_seq:
        updates, state = step(jax.tree.map(jnp.asarray, grads), state, params)
        params = gradax.apply_updates(params, updates)
    return params, state


def assert_tree_close(actual, expected, rtol=1e-5, atol=1e-6):
    for k in expected:
        np.testing.assert_allclose(
            np.asarray(actual[k]), expected[k], rtol=rtol, atol=atol, err_msg=k
        )


HYPER = dict(lr=0.01, b1=0.95, b2=0.99, eps=1e-8, weight_decay=0.05, gamma=0.025)


@pytest.mark.parametrize(
    "options",
    [
        dict(),
        dict(optimize_1d=True),
        dict(mars_type="mars-lion"),
        dict(mars_type="mars-lion", optimize_1d=True),
        dict(betas_1d=(0.8, 0.9), lr_1d=0.03, weight_decay_1d=0.2, gamma=0.1),
    ],
    ids=["adamw", "adamw-1d", "lion", "lion-1d", "own-1d-settings"],
)
def test_matches_numpy_rule(options):
    params, grads_seq = make_params(), make_grads(MIXED)
    hyper = {**HYPER, **options}
    expected, clipped, kept = numpy_mars(params, grads_seq, **hyper)
    assert clipped > 0 and kept > 0  # both branches of the clipping are taken
    betas_1d = hyper.pop("betas_1d", (0.9, 0.95))
    tx = gradax.mars(
        hyper.pop("lr"),
        hyper.pop("b1"),
        hyper.pop("b2"),
        hyper.pop("eps"),
        hyper.pop("weight_decay"),
        hyper.pop("gamma"),
        b1_1d=betas_1d[0],
        b2_1d=betas_1d[1],
        learning_rate_1d=hyper.pop("lr_1d", None),
        **hyper,
    )
    actual, _ = run(tx, params, grads_seq)
    assert_tree_close(actual, expected)


def test_first_step_uses_zero_previous_gradient_and_clips():
    # c_1 = (1 + gamma b1 / (1 - b1)) g_1, as with the reference's zero g_0.
    g = jnp.full((3, 4), 2.0)
    tx = gradax.scale_by_mars(b1=0.9, gamma=0.1)
    _, state = tx.update(g, tx.init(g))
    c = (1 + 0.1 * 0.9 / 0.1) * np.full((3, 4), 2.0)
    np.testing.assert_allclose(state.mu, 0.1 * c / np.linalg.norm(c), rtol=1e-6)
    np.testing.assert_array_equal(state.last_grad, g)
    # A small correction is not scaled up.
    small = jnp.full((3, 4), 0.01)
    _, state = tx.update(small, tx.init(small))
    np.testing.assert_allclose(state.mu, 0.1 * 1.9 * 0.01, rtol=1e-6)


def test_gamma_zero_is_adamw():
    params, grads_seq = make_params(), make_grads(SMALL)
    kw = dict(b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.01)
    ours, _ = run(
        gradax.mars(0.01, gamma=0.0, optimize_1d=True, b1_1d=0.5, b2_1d=0.5, **kw),
        params,
        grads_seq,
    )
    adamw, _ = run(gradax.adamw(0.01, **kw), params, grads_seq)
    assert_tree_close(ours, jax.tree.map(np.asarray, adamw), rtol=1e-6, atol=1e-7)


def test_gamma_zero_lion_is_lion_with_one_momentum():
    params, grads_seq = make_params(), make_grads(SMALL)
    tx = gradax.mars(
        0.01,
        b1=0.9,
        weight_decay=0.1,
        gamma=0.0,
        mars_type="mars-lion",
        optimize_1d=True,
    )
    ours, _ = run(tx, params, grads_seq)
    lion, _ = run(gradax.lion(0.01, 0.9, 0.9, weight_decay=0.1), params, grads_seq)
    assert_tree_close(ours, jax.tree.map(np.asarray, lion), rtol=1e-6, atol=1e-7)


def test_non_2d_leaves_are_adamw_with_1d_settings():
    # Large gradients and gamma > 0: MARS would differ; AdamW is untouched.
    params, grads_seq = make_params(), make_grads(MIXED)
    tx = gradax.mars(
        0.01,
        weight_decay=0.3,
        gamma=0.5,
        b1_1d=0.8,
        b2_1d=0.9,
        learning_rate_1d=0.02,
        weight_decay_1d=0.05,
    )
    ours, _ = run(tx, params, grads_seq)
    adamw, _ = run(
        gradax.adamw(0.02, b1=0.8, b2=0.9, weight_decay=0.05), params, grads_seq
    )
    for k in ("s", "v", "t"):
        np.testing.assert_allclose(ours[k], adamw[k], rtol=1e-6, atol=1e-7)
    assert not np.allclose(ours["m"], adamw["m"], atol=1e-4)


def test_learning_rate_1d_default_and_schedule():
    params, grads_seq = make_params(), make_grads(SMALL[:4])
    default, _ = run(gradax.mars(0.01), params, grads_seq)
    same, _ = run(gradax.mars(0.01, learning_rate_1d=0.01), params, grads_seq)
    assert_tree_close(default, jax.tree.map(np.asarray, same), rtol=0, atol=0)
    # A schedule for the other leaves leaves the MARS leaf alone.
    scheduled, _ = run(
        gradax.mars(0.01, learning_rate_1d=lambda count: 0.01 * (count + 1)),
        params,
        grads_seq,
    )
    np.testing.assert_array_equal(scheduled["m"], default["m"])
    assert not np.allclose(scheduled["v"], default["v"])


def test_state_keeps_only_the_buffers_each_leaf_needs():
    params = jax.tree.map(jnp.asarray, make_params())
    state = gradax.scale_by_mars(mars_type="mars-lion").init(params)
    assert state.nu["m"] is None and state.nu["v"] is not None
    assert state.last_grad["m"] is not None and state.last_grad["v"] is None
    state = gradax.scale_by_mars(optimize_1d=True).init(params)
    assert all(x is not None for x in state.nu.values())
    assert all(x is not None for x in state.last_grad.values())


def test_params_needed_only_for_weight_decay():
    g = {"m": jnp.ones((2, 2)), "v": jnp.ones(2)}
    tx = gradax.mars(0.1, weight_decay_1d=0.0)
    tx.update(g, tx.init(g))  # no decay: no params needed
    tx = gradax.mars(0.1)
    with pytest.raises(ValueError, match="params"):
        tx.update(g, tx.init(g))


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(b1=1.0), "b1"),
        (dict(b2=-0.1), "b2"),
        (dict(eps=-1.0), "eps"),
        (dict(gamma=-0.5), "gamma"),
        (dict(weight_decay=-1.0), "weight_decay"),
        (dict(b1_1d=1.0), "b1_1d"),
        (dict(b2_1d=2.0), "b2_1d"),
        (dict(weight_decay_1d=-0.1), "weight_decay_1d"),
        (dict(mars_type="adamw"), "mars_type"),
        (dict(mars_type="mars-shampoo"), "mars-shampoo"),
    ],
)
def test_validation_names_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        gradax.mars(1e-3, **kwargs)
    transform_kwargs = {k: v for k, v in kwargs.items() if "weight_decay" not in k}
    if transform_kwargs:
        with pytest.raises(ValueError, match=name):
            gradax.scale_by_mars(**transform_kwargs)
