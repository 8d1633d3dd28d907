"""Cases for test_precision_resume.py, and the fresh process that resumes them.

    python precision_resume_worker.py CHECKPOINT RESULT

restores params and state from the orbax CHECKPOINT against the abstract
tree of ``init`` built here, runs ``AFTER`` more steps of every case and
pickles the final params and state leaves (as bytes) to RESULT.
"""

from __future__ import annotations

import os
import pickle
import sys

import jax
import jax.numpy as jnp
import numpy as np

import gradax

AFTER = 3
Q8 = gradax.int8_blockwise(block_size=4)


def cases():
    return {
        "master_adamw": gradax.master_weights(
            gradax.adamw(1e-2, weight_decay=0.1, mu_dtype=Q8, nu_dtype=Q8)
        ),
        "master_muon": gradax.master_weights(gradax.muon(0.02)),
        "rounding_adamw": gradax.stochastic_rounding(
            gradax.adamw(1e-2, mu_dtype=Q8, nu_dtype=Q8), seed=4
        ),
    }


def start_params():
    key = jax.random.key(3)
    return {
        "m": (0.1 * jax.random.normal(key, (8, 6))).astype(jnp.bfloat16),
        "v": jnp.linspace(-1, 1, 8, dtype=jnp.bfloat16),
        "f": jnp.linspace(0, 1, 4),  # float32: passed through
    }


def grads_at(params, step):
    return jax.tree.map(
        lambda p: jnp.sin(3.0 * p.astype(jnp.float32) + step).astype(p.dtype), params
    )


@jax.jit
def step(trees, count):
    out = {}
    for name, tx in cases().items():
        params, state = trees[name]
        updates, state = tx.update(grads_at(params, count), state, params)
        out[name] = (gradax.apply_updates(params, updates), state)
    return out


def run(trees, first, steps):
    for i in range(first, first + steps):
        trees = step(trees, jnp.asarray(i, jnp.float32))
    return trees


def flat(trees):
    leaves = jax.tree_util.tree_flatten_with_path(trees)[0]
    return {
        jax.tree_util.keystr(path): np.asarray(jax.random.key_data(x))
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)
        else np.asarray(x)
        for path, x in leaves
    }


def abstract_trees():
    params = start_params()
    return {name: (params, tx.init(params)) for name, tx in cases().items()}


def main(checkpoint: str, result: str) -> None:
    import orbax.checkpoint as ocp

    target = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
        abstract_trees(),
    )
    with ocp.StandardCheckpointer() as ckpt:
        restored = ckpt.restore(os.path.abspath(checkpoint), target)
    before, count = restored, int(sys.argv[3])
    final = run(before, count, AFTER)
    with open(result, "wb") as f:
        pickle.dump(flat(final), f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
