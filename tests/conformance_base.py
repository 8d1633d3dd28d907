"""What the conformance checks share: the parameters, gradients and runs.

The registry (``registry.py``) says what is checked; these say on what. The
suite in ``conformance/test_conformance.py`` and the checks of each package
that follow it (``contrib/test_contrib_extra_args.py``, ``sharding/``, ...)
use the same tree (a scalar, a vector, a matrix and a 3-D array), the same
gradients and the same tolerances.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from registry_base import Entry

import gradax


def make_params(dtype=jnp.float32):
    """A tree mixing a scalar, a vector, a matrix and a 3-D array."""
    keys = jax.random.split(jax.random.key(0), 4)
    shapes = {"s": (), "v": (5,), "m": (4, 3), "t": (2, 3, 2)}
    real = jnp.float32 if jnp.issubdtype(dtype, jnp.complexfloating) else dtype
    out = {}
    for key, (name, shape) in zip(keys, shapes.items(), strict=True):
        x = jax.random.normal(key, shape, jnp.float32)
        if jnp.issubdtype(dtype, jnp.complexfloating):
            x = x + 0.5j * jnp.cos(x)
        out[name] = x.astype(dtype if dtype != real else real)
    return out


def quadratic_grads(params, step):
    """Gradients of a quadratic around 0.5, perturbed by a step-dependent term."""
    return jax.tree.map(
        lambda p: (
            (p - 0.5)
            * (1.0 + 0.1 * jnp.sin(step + jnp.arange(p.size)))
            .reshape(p.shape)
            .astype(p.dtype)
        ),
        params,
    )


def run_history(tx, params, steps):
    """Params and updates after each of ``steps`` updates, in one scan."""

    def body(carry, step):
        p, s = carry
        g = quadratic_grads(p, step.astype(jnp.float32))
        u, s = tx.update(g, s, p)
        p = gradax.apply_updates(p, u)
        return (p, s), (p, u)

    _, history = jax.lax.scan(body, (params, tx.init(params)), jnp.arange(steps))
    return history


def trajectory(tx, params, steps):
    """Run ``steps`` updates in one compiled scan; return params and updates."""
    history, updates = run_history(tx, params, steps)
    return jax.tree.map(lambda h: h[-1], history), updates


def avals(tree):
    return jax.tree.map(
        lambda x: (x.shape, x.dtype, bool(getattr(x, "weak_type", False))), tree
    )


# Entries built on matrix functions: Newton-Schulz (the Muon family, Scion),
# inverse roots and eigenvectors (Shampoo, SOAP, Kron), QR and the SVD (Dion,
# GaLore).
MATRIX_FUNCTION_NAMES = ("muon", "shampoo", "soap", "kron", "dion", "scion", "galore")


def is_matrix_function(entry: Entry) -> bool:
    return any(k in entry.name for k in MATRIX_FUNCTION_NAMES)


def matrix_function_atol(entry: Entry, leaf) -> float:
    """Absolute tolerance between two compilations of the same computation.

    Two programs round differently (summation order, multiply-add
    contraction, constant folding): ~1e-7 relative. An elementwise optimizer
    keeps that scale, so 1e-6 covers it. A matrix function amplifies it by
    its conditioning: Newton-Schulz's quintic has slope a = 3.4445 at zero,
    so five iterations can grow a perturbation of a small singular direction
    ~a^5 = 490 times (3e-5 relative to the update); inverse roots and
    eigenvectors grow it by the inverse gap of their spectra. Seen: 1.2e-6
    on Muon's parameters of size ~2 over 20 steps, 1.9e-5 on SOAP's of size
    ~2.4. These are compared at 1e-4 of the leaf's largest entry, ~5x the
    largest seen; a wrong formula is off by order one.
    """
    if not is_matrix_function(entry):
        return 1e-6
    scale = float(np.max(np.abs(leaf))) if np.size(leaf) else 0.0
    return max(1e-6, 1e-4 * scale)


def sharding_params():
    """A scalar, a vector, a matrix and a 3-D array that split over a (4, 2) mesh."""
    assert len(jax.devices()) >= 8, "conftest sets XLA_FLAGS for 8 CPU devices"
    keys = jax.random.split(jax.random.key(1), 3)
    return {
        "s": jnp.asarray(0.3),
        "v": jnp.linspace(-1.0, 1.0, 8),
        "m": jax.random.normal(keys[0], (8, 6)),
        "t": jax.random.normal(keys[1], (2, 6, 8)),
    }


def meshes_and_shardings():
    """``(axis_type, mesh, shardings of sharding_params())`` for Auto and
    Explicit axes."""
    spec = jax.sharding.PartitionSpec
    for axis_type in ("Auto", "Explicit"):
        kind = getattr(jax.sharding.AxisType, axis_type)
        mesh = jax.make_mesh((4, 2), ("a", "b"), axis_types=(kind, kind))
        shardings = {
            "s": jax.NamedSharding(mesh, spec()),
            "v": jax.NamedSharding(mesh, spec("a")),
            "m": jax.NamedSharding(mesh, spec("a", None)),
            "t": jax.NamedSharding(mesh, spec(None, None, "b")),
        }
        yield axis_type, mesh, shardings
