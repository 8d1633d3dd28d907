"""A None or a leaf with no entries beside the params changes no number.

The registry's `test_odd_trees` checks that every transformation traces on
such trees; here the optimizers whose code reads the tree's structure (the
Kronecker-factored ones, the Muon family, SM3) give the other leaves the
numbers they get without the extra entries. One compiled program each.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance_base import make_params, quadratic_grads

import gradax

BUILDERS = {
    "soap": lambda: gradax.soap(0.1, precondition_frequency=1),
    "shampoo": lambda: gradax.shampoo(0.1, start_preconditioning_step=1),
    "kron": lambda: gradax.kron(0.1, preconditioner_update_probability=1.0),
    "scion": lambda: gradax.scion(0.05),
    "muon": lambda: gradax.muon(0.02, muon_weight_dimension_numbers="auto"),
    "dion": lambda: gradax.dion(0.02, rank=2),
    "sm3": lambda: gradax.sm3(0.1),
}


def _steps(tx, params, steps=3):
    state = tx.init(params)
    for i in range(steps):
        updates, state = tx.update(quadratic_grads(params, float(i)), state, params)
        params = gradax.apply_updates(params, updates)
    return params


@pytest.mark.parametrize("name", list(BUILDERS))
def test_extra_none_and_empty_leaves_change_no_number(name):
    params = make_params()
    # "zz" sorts last: the other leaves keep their positions (kron draws
    # each leaf's noise by its position).
    odd = {**params, "filtered": None, "zz": jnp.zeros((0, 3))}
    tx = BUILDERS[name]()

    @jax.jit
    def both(params, odd):
        return _steps(tx, params), _steps(tx, odd)

    plain, with_odd = both(params, odd)
    assert with_odd["filtered"] is None
    assert with_odd["zz"].shape == (0, 3)
    for key, value in plain.items():
        # The same arithmetic in one program; XLA may still fuse the two
        # copies differently (a contraction into a multiply-add), hence a
        # float32 rounding tolerance rather than equality.
        np.testing.assert_allclose(
            with_odd[key], value, rtol=1e-5, atol=1e-7, err_msg=key
        )


@pytest.mark.parametrize("name", ["dog", "prodigy", "schedule_free_adamw"])
def test_an_integer_leaf_is_refused_at_update_naming_it(name):
    """init takes an integer leaf, as optax's does; the update refuses it as
    every gradax optimizer does, naming the path. (Their init used to fail
    inside numpy: "data type int32 not inexact".)"""
    params = {"w": jnp.ones(3), "steps": jnp.asarray(3)}
    tx = getattr(gradax, name)()
    state = tx.init(params)
    with pytest.raises(gradax.UpdateError, match=r"\['steps'\] \(int32\)"):
        tx.update(params, state, params)
