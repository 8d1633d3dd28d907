"""Adam-mini against the paper's rule written out in NumPy (arXiv:2406.16793)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradax


def _reference(params, grads_seq, lr, b1, b2, eps, wd, blocks):
    """Algorithm 1 of Adam-mini: m per element, v one per block (mean g^2)."""
    p = {k: np.asarray(v, np.float64) for k, v in params.items()}
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v = {k: np.zeros(len(blocks[k]), np.float64) for k in p}
    for t, grads in enumerate(grads_seq, start=1):
        for k in p:
            g = np.asarray(grads[k], np.float64)
            m[k] = b1 * m[k] + (1 - b1) * g
            denominator = np.empty_like(g)
            for b, index in enumerate(blocks[k]):
                v[k][b] = b2 * v[k][b] + (1 - b2) * np.mean(g[index] ** 2)
                denominator[index] = np.sqrt(v[k][b] / (1 - b2**t)) + eps
            p[k] = p[k] - lr * (m[k] / (1 - b1**t) / denominator + wd * p[k])
    return p


def _blocks(shape, label):
    """Index arrays of each block, from the paper's partition rules."""
    size = int(np.prod(shape))
    flat = np.arange(size).reshape(shape)
    if label == "full":
        return [np.unravel_index(i, shape) for i in range(size)]
    if label == "tensor":
        return [np.unravel_index(flat.ravel(), shape)]
    if label == "neuron":  # one block per output neuron (column)
        return [(np.arange(shape[0]), np.full(shape[0], j)) for j in range(shape[1])]
    if label == "rows":  # one block per row (a token of an embedding)
        return [(np.full(shape[1], i), np.arange(shape[1])) for i in range(shape[0])]
    width = shape[1] // label  # heads along the output axis
    return [
        np.unravel_index(flat[:, h * width : (h + 1) * width].ravel(), shape)
        for h in range(label)
    ]


def test_matches_the_papers_rule():
    rng = np.random.default_rng(0)
    shapes = {"embed": (6, 4), "q": (4, 8), "mlp": (4, 5), "norm": (4,), "e": (6, 3)}
    partition = {"embed": "full", "q": 2, "mlp": "neuron", "norm": "tensor"}
    partition["e"] = "rows"
    params = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    grads_seq = [
        {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
        for _ in range(4)
    ]
    hyper = dict(learning_rate=0.01, b1=0.9, b2=0.95, eps=1e-8, weight_decay=0.1)
    tx = gradax.adam_mini(**hyper, partition=partition)
    state = tx.init(jax.tree.map(jnp.asarray, params))
    p = jax.tree.map(jnp.asarray, params)
    step = jax.jit(tx.update)
    for grads in grads_seq:
        u, state = step(jax.tree.map(jnp.asarray, grads), state, p)
        p = gradax.apply_updates(p, u)
    blocks = {k: _blocks(shapes[k], partition[k]) for k in shapes}
    expected = _reference(params, grads_seq, 0.01, 0.9, 0.95, 1e-8, 0.1, blocks)
    for k in shapes:
        # float32 against float64 over 4 steps of size 0.01 (well conditioned:
        # the denominators are O(1)).
        np.testing.assert_allclose(p[k], expected[k], rtol=1e-5, atol=1e-6)
    assert state[0].nu["q"].shape == (2,) and state[0].nu["mlp"].shape == (5,)
    assert state[0].nu["embed"].shape == (6, 4) and state[0].nu["norm"].shape == ()
    assert state[0].nu["e"].shape == (6,)


def test_default_partition_and_prefix_labels():
    params = {
        "layer": {"w": jnp.ones((3, 4)), "b": jnp.ones(4)},
        "emb": jnp.ones((5, 2)),
    }
    state = gradax.scale_by_adam_mini().init(params)
    assert state.nu["layer"]["w"].shape == (4,) and state.nu["layer"]["b"].shape == ()
    by_prefix = gradax.scale_by_adam_mini(partition={"layer": "tensor", "emb": "full"})
    nu = by_prefix.init(params).nu
    assert nu["layer"]["w"].shape == () and nu["emb"].shape == (5, 2)
    from_fn = gradax.scale_by_adam_mini(
        partition=lambda p: jax.tree.map(lambda _: "tensor", p)
    )
    assert from_fn.init(params).nu["emb"].shape == ()


def test_default_partition_follows_the_authors_names():
    # zyushun/Adam-mini v1.1.1 (402aadf): "embed"/"embd"/"wte" in a name is
    # an embedding, one rate per token row; "bias" is plain Adam.
    params = {
        "wte": jnp.ones((7, 3)),
        "Embed_0": {"embedding": jnp.ones((5, 2))},
        "dense": {"kernel": jnp.ones((3, 4)), "bias": jnp.ones(4)},
        "norm": {"scale": jnp.ones(4)},
    }
    nu = gradax.scale_by_adam_mini().init(params).nu
    assert nu["wte"].shape == (7,) and nu["Embed_0"]["embedding"].shape == (5,)
    assert nu["dense"]["kernel"].shape == (4,) and nu["dense"]["bias"].shape == (4,)
    assert nu["norm"]["scale"].shape == ()


@pytest.mark.parametrize(
    ("label", "match"),
    [
        ("row", "must be 'full'"),
        ("rows", "needs a matrix"),
        (3, "heads must divide"),
        ("neuron", "needs a matrix"),
    ],
)
def test_bad_partition_is_refused(label, match):
    vector = label in ("neuron", "rows") and match == "needs a matrix"
    params = {"w": jnp.ones(4)} if vector else {"w": jnp.ones((2, 4))}
    with pytest.raises(ValueError, match=match):
        gradax.scale_by_adam_mini(partition={"w": label}).init(params)


def test_state_is_about_half_of_adamw():
    params = {"w": jnp.ones((64, 64)), "e": jnp.ones((32, 64))}
    partition = {"w": "neuron", "e": "full"}
    mini = gradax.adam_mini(1e-3, partition=partition).init(params)
    full = gradax.adamw(1e-3).init(params)
    # One value per neuron of "w", one per element of the "full" embedding.
    assert sum(x.size for x in jax.tree.leaves(mini[0].nu)) == 64 + 32 * 64
    mini_size = sum(x.size for x in jax.tree.leaves(mini))
    assert mini_size < 0.7 * sum(x.size for x in jax.tree.leaves(full))
