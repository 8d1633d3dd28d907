"""What the conformance checks share: the parameters, gradients and runs.

The registry (``registry.py``) says what is checked; these say on what. The
suite in ``conformance/test_conformance.py`` and the checks of each package
that follow it (``contrib/test_contrib_extra_args.py``, ``sharding/``, ...)
use the same tree (a scalar, a vector, a matrix and a 3-D array), the same
gradients and the same tolerances.
"""

from __future__ import annotations

import collections
import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax_versions import EXPLICIT_AXES_SUPPORTED, enable_x64, explicit_axes
from registry_base import Entry

import gradax
from gradax._core.pytree import ModuleMeta


@contextlib.contextmanager
def counting_constructions():
    """Count the gradax transformations built inside the block, by class name.

    A transformation holds its parts (built once, at construction): tracing
    its ``update`` with it as a ``jit`` argument builds none.
    """
    made: collections.Counter[str] = collections.Counter()
    original = ModuleMeta.__call__

    def counted(cls, *args, **kwargs):
        obj = original(cls, *args, **kwargs)
        if isinstance(obj, gradax.GradientTransformation):
            made[type(obj).__name__] += 1
        return obj

    ModuleMeta.__call__ = counted
    try:
        yield made
    finally:
        ModuleMeta.__call__ = original


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


# The dtypes of the state-type check; complex64 only where the entry says
# it handles complex parameters.
CONTROL_FLOW_DTYPES = ("float16", "bfloat16", "float32", "float64", "complex64")


def control_flow_dtypes(complex_ok: bool) -> list[str]:
    return [d for d in CONTROL_FLOW_DTYPES if d != "complex64" or complex_ok]


def state_type_problems(build, dtypes, grads_of, extra_of) -> list[str]:
    """Where ``update``'s state or updates change type, for each dtype.

    For each dtype: ``build()`` is initialised on ``make_params(dtype)`` and
    stepped inside ``lax.scan`` with ``grads_of(params)`` and the keyword
    arguments ``extra_of(params, value)``, where ``value`` (an objective's
    value) deliberately has another precision than the parameters.

    Tracing is the check, nothing is compiled. ``lax.cond``, ``while_loop``
    and ``scan`` all require a step to return its state with the types it
    was given (the LBFGS bug: float16 parameters, a float32 value, and a
    state leaf that became float32 broke ``cond``); ``scan`` raises on a
    changed dtype, and the comparison of the traced types, weak types
    included, catches what it would promote silently. The updates must keep
    the gradients' dtypes.
    """
    problems = []
    for dtype in dtypes:
        with enable_x64(dtype == "float64"):
            params = make_params(jnp.dtype(dtype))
            value = jnp.asarray(1.0, jnp.float16 if dtype == "float32" else jnp.float32)
            grads = grads_of(params)
            tx = build()

            def body(state, _, tx=tx, params=params, grads=grads, value=value):
                updates, state = tx.update(
                    grads, state, params, **extra_of(params, value)
                )
                return state, updates

            def steps(state, body=body):
                return jax.lax.scan(body, state, None, length=1)

            try:
                state = jax.eval_shape(tx.init, params)
                new_state, updates = jax.eval_shape(steps, state)
            except Exception as exc:  # noqa: BLE001 - reported with its dtype
                problems.append(f"{dtype}: {type(exc).__name__}: {exc}"[:2000])
                continue
            changed = [
                f"{jax.tree_util.keystr(path)}: {avals(before)} -> {avals(after)}"
                for (path, before), after in zip(
                    jax.tree_util.tree_flatten_with_path(state)[0],
                    jax.tree.leaves(new_state),
                    strict=True,
                )
                if avals(before) != avals(after)
            ]
            if changed:
                problems.append(f"{dtype}: state types changed: {changed}")
            want = jax.tree.map(lambda g: g.dtype, grads)
            got = jax.tree.map(lambda u: u.dtype, updates)
            if got != want:
                problems.append(f"{dtype}: updates {got}, gradients {want}")
    return problems


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


def mesh_and_shardings(axis_type: str):
    """A (4, 2) mesh with ``axis_type`` ("Auto" or "Explicit") axes, and the
    shardings of sharding_params() on it."""
    spec = jax.sharding.PartitionSpec
    kind = getattr(jax.sharding.AxisType, axis_type)
    mesh = jax.make_mesh((4, 2), ("a", "b"), axis_types=(kind, kind))
    shardings = {
        "s": jax.NamedSharding(mesh, spec()),
        "v": jax.NamedSharding(mesh, spec("a")),
        "m": jax.NamedSharding(mesh, spec("a", None)),
        "t": jax.NamedSharding(mesh, spec(None, None, "b")),
    }
    return mesh, shardings


AXIS_TYPES = ("Explicit", "Auto")


def meshes_and_shardings():
    """``(axis_type, mesh, shardings of sharding_params())`` for each kind of
    mesh axes."""
    for axis_type in AXIS_TYPES:
        if axis_type == "Explicit" and not EXPLICIT_AXES_SUPPORTED:
            continue  # gradax refuses Explicit axes before jax 0.7.0
        yield (axis_type, *mesh_and_shardings(axis_type))


def one_axis_type_in_turn(cases, name_of, in_ci=lambda case: True):
    """``(case, axis_type)`` test parameters: each case that runs in CI does
    so on one kind of mesh axes, Explicit and Auto in turn down the list; the
    other kind, and the cases ``in_ci`` rejects, are marked slow. Each kind
    is a compile of its own, and the two exercise different mechanisms
    (sharding in the types, the init wrapper's tie to the parameter)."""
    params, turn = [], 0
    for case in cases:
        ci = in_ci(case)
        for k, axis_type in enumerate(AXIS_TYPES):
            # Before jax 0.7.0 (no Explicit axes) every case runs on Auto.
            in_turn = (
                (turn + k) % 2 == 0 if EXPLICIT_AXES_SUPPORTED else axis_type == "Auto"
            )
            marks = [] if ci and in_turn else [pytest.mark.slow]
            if axis_type == "Explicit":
                marks.append(explicit_axes)
            params.append(
                pytest.param(
                    case, axis_type, id=f"{axis_type}-{name_of(case)}", marks=marks
                )
            )
        turn += ci
    return params
