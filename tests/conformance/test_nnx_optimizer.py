"""flax's `nnx.Optimizer` around gradax: the same steps as a plain loop.

`nnx.Optimizer` keeps the state `init` makes as nnx variables, one per
parameter's leaf. Where a transformation keeps a list per parameter (SM3,
SOAP, Shampoo, Kron) or stores a moment in 8 bits (a `QuantizedArray`), that
list or leaf sits inside one variable, and from the second step on nnx hands
it back as an nnx `State` mapping (keys 0, 1, ... or `codes`, `scales`;
a None in a tuple has no key).
optax's SM3 reads such a mapping by index; gradax's update used to refuse it
("given State") at the second step. It now reads the same leaves in its own
tree and hands the new ones back in nnx's, so the steps are a plain loop's.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import gradax

Q8 = gradax.int8_blockwise()

TRANSFORMATIONS = {
    "sm3": lambda: gradax.sm3(0.1),
    # The kernels' gradients have rank <= 16 (the batch), so SOAP's
    # eigenbases span directions where the rotated gradient is only
    # rounding; Adam's division with eps=1e-8 turns that into O(1) steps
    # that depend on how XLA fused each program. eps=1e-3 keeps them small.
    "soap": lambda: gradax.soap(0.01, precondition_frequency=1, eps=1e-3),
    # An axis longer than max_precond_dim gets None in the state's tuples,
    # which nnx leaves out of the mapping it hands back.
    "soap, an axis left unpreconditioned": lambda: gradax.soap(
        0.05, max_precond_dim=6, precondition_1d=True
    ),
    "shampoo": lambda: gradax.shampoo(0.01),
    "kron": lambda: gradax.kron(0.01),
    "adamw with 8-bit moments": lambda: gradax.adamw(0.01, mu_dtype=Q8, nu_dtype=Q8),
}
STEPS = 3


class Model(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        # 64 x 256 and 256 x 3: the 8-bit moments store the larger kernels
        # and biases as codes (a leaf of 256 entries or more).
        self.hidden = nnx.Linear(64, 256, rngs=rngs)
        self.out = nnx.Linear(256, 3, rngs=rngs)

    def __call__(self, x):
        return self.out(jnp.tanh(self.hidden(x)))


X = jax.random.normal(jax.random.key(1), (16, 64))
Y = jax.random.normal(jax.random.key(2), (16, 3))


def _loss(model):
    return jnp.mean((model(X) - Y) ** 2)


def _with_nnx(tx):
    model = Model(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)

    @nnx.jit
    def step(model, optimizer):
        optimizer.update(model, nnx.grad(_loss)(model))

    for _ in range(STEPS):
        step(model, optimizer)
    return nnx.state(model, nnx.Param)


def _plain(tx):
    graph, params = nnx.split(Model(nnx.Rngs(0)), nnx.Param)

    def loss(params):
        return _loss(nnx.merge(graph, params))

    @jax.jit
    def step(params, state):
        updates, state = tx.update(jax.grad(loss)(params), state, params)
        return gradax.apply_updates(params, updates), state

    state = tx.init(params)
    for _ in range(STEPS):
        params, state = step(params, state)
    return params


@pytest.mark.parametrize("name", list(TRANSFORMATIONS))
def test_nnx_optimizer_takes_the_steps_of_a_plain_loop(name):
    tx = TRANSFORMATIONS[name]()
    got, want = _with_nnx(tx), _plain(tx)
    # One jitted step each, of the same operations: equal up to how XLA
    # fuses each program. On this machine they are equal bit for bit; a
    # loop jitted whole (fused otherwise) is up to 1.0e-7 from them
    # (shampoo; sm3 and the 8-bit moments 6e-8, kron 1.5e-8), so atol
    # leaves a factor 10 for another machine's fusion. A leaf read from the
    # wrong place moves the params by a step's size, 1e-3 or more.
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)


def test_a_mapping_in_place_of_a_state_class_is_still_refused():
    """Only lists and 8-bit leaves are read through: a state whose
    NamedTuple is a dict (orbax without a template) still gets the
    diagnosis that says so."""
    params = {"w": jnp.ones((3, 4))}
    tx = gradax.adam(0.1)
    state = tx.init(params)
    as_dicts = (state[0]._asdict(), *state[1:])
    with pytest.raises(gradax.UpdateError, match="without a template"):
        tx.update(params, as_dicts, params)
