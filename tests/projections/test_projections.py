"""gradax.projections: optax's names, signatures, values and derivatives.

Every projection of a case is computed by one jitted function per library, so
a case costs two compilations whatever the number of projections.
"""

from __future__ import annotations

import functools
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from compile_once import jit_once

import gradax
from gradax import projections as gp

NAMES = sorted(n for n in dir(optax.projections) if not n.startswith("_"))

# Both libraries evaluate the same formulas in float32, in a different order
# (gradax's simplex threshold is x - (S_k - 1) / k, optax's 1 / k + x - S_k / k;
# sums reduce in different orders). That is rounding: a few ulps of the largest
# magnitude involved, times the length of the sums (here at most 50 entries).
EPS32 = float(jnp.finfo(jnp.float32).eps)

RTOL = ATOL = 64 * EPS32


def _signature(fn):
    parameters = inspect.signature(fn).parameters.values()
    return [(p.name, p.kind, p.default) for p in parameters]


def test_same_names_and_signatures_as_optax():
    ours = sorted(n for n in dir(gp) if not n.startswith("_"))
    assert ours == NAMES
    for name in NAMES:
        assert _signature(getattr(gp, name)) == _signature(
            getattr(optax.projections, name)
        ), name


def _all_projections(lib, x, a, scale):
    """Every projection of ``x`` (radius/mass ``scale``; ``a`` for the affine sets)."""
    # optax's box needs bounds with the structure of the tree, and so its
    # hypercube (whose lower bound is the scalar 0) takes single arrays only.
    lower = jax.tree.map(lambda v: jnp.full_like(v, -0.5), x)
    out = {
        "non_negative": lib.projection_non_negative(x),
        "box": lib.projection_box(x, lower, a),
        "simplex": lib.projection_simplex(x, scale),
        "l1_sphere": lib.projection_l1_sphere(x, scale),
        "l1_ball": lib.projection_l1_ball(x, scale),
        "l2_sphere": lib.projection_l2_sphere(x, scale),
        "l2_ball": lib.projection_l2_ball(x, scale),
        "linf_ball": lib.projection_linf_ball(x, scale),
        "vector": lib.projection_vector(x, a),
        "hyperplane": lib.projection_hyperplane(x, a, scale),
        "halfspace": lib.projection_halfspace(x, a, scale),
        "halfspace_inside": lib.projection_halfspace(x, a, 1e3),
    }
    if len(jax.tree.leaves(x)) == 1:
        out["hypercube"] = lib.projection_hypercube(x, scale)
        out["hypercube_default"] = lib.projection_hypercube(x)
    return out


@functools.partial(jit_once, static_argnums=0)
def _every_case(lib, cases):
    """:func:`_all_projections` of every case, at two radii, in one program.

    Each case is a batch (a leading axis) of inputs of one shape.
    """
    scales = jnp.array([1.0, 0.8])

    def one(x, a):
        return jax.vmap(lambda s: _all_projections(lib, x, a, s))(scales)

    return {name: jax.vmap(one)(x, a) for name, (x, a) in cases.items()}


def _assert_trees_close(actual, expected, rtol=RTOL, atol=ATOL):
    assert jax.tree.structure(actual) == jax.tree.structure(expected)
    for a, e in zip(jax.tree.leaves(actual), jax.tree.leaves(expected), strict=True):
        assert jnp.shape(a) == jnp.shape(e)
        assert jnp.result_type(a) == jnp.result_type(e)
        np.testing.assert_allclose(a, e, rtol=rtol, atol=atol, equal_nan=True)


def _random(shape, seed):
    return jnp.asarray(np.random.default_rng(seed).normal(size=shape), jnp.float32)


PYTREE = {"w": _random((2, 3), 4), "b": (_random(3, 5), jnp.float32(0.7))}
PYTREE_A = {"w": _random((2, 3), 6), "b": (_random(3, 7), jnp.float32(-1.2))}
INSIDE = jnp.array([0.01, -0.02, 0.03, 0.0])
CASES = {
    "vector": (_random((1, 50), 0), _random((1, 50), 1)),
    "pytree": jax.tree.map(lambda v: jnp.asarray(v)[None], (PYTREE, PYTREE_A)),
    "edge": (
        jnp.stack(
            [
                INSIDE,  # inside every ball and the box: must not move
                jnp.zeros(4),  # zero: a boundary case of every formula
                jnp.full(4, 0.25),  # ties, and a point already on the simplex
            ]
        ),
        jnp.array([[1.0, 2.0, 3.0, 4.0], [1.0, -1.0, 2.0, 0.5], [1.0, 1.0, 1.0, 1.0]]),
    ),
}


def test_values_match_optax():
    ours = _every_case(gp, CASES)
    theirs = _every_case(optax.projections, CASES)
    for case in CASES:
        _assert_trees_close(ours[case], theirs[case])
    for name in ("l1_ball", "l2_ball", "linf_ball", "halfspace_inside"):
        _assert_trees_close(ours["edge"][name][0], jnp.stack([INSIDE, INSIDE]))
    # The sphere of the zero vector is undefined (NaN) in both libraries.
    assert jnp.all(jnp.isnan(ours["edge"]["l2_sphere"][1]))


def test_sets_are_reached():
    """Invariants, independent of optax: mass, norms and feasibility."""
    out = _every_case(gp, CASES)["pytree"]  # compiled by the test above
    for i, scale in enumerate((1.0, 0.8)):
        # The i-th radius of the (only) pytree of the case, flattened.
        def leaves(name, i=i):
            return jnp.concatenate(
                [jnp.ravel(v[0, i]) for v in jax.tree.leaves(out[name])]
            )

        tol = 8 * EPS32 * scale
        assert jnp.all(leaves("simplex") >= 0)
        assert jnp.sum(leaves("simplex")) == pytest.approx(scale, abs=tol)
        assert jnp.sum(jnp.abs(leaves("l1_sphere"))) == pytest.approx(scale, abs=tol)
        assert jnp.linalg.norm(leaves("l2_sphere")) == pytest.approx(scale, abs=tol)
        assert jnp.max(jnp.abs(leaves("linf_ball"))) <= scale
        assert jnp.sum(jnp.abs(leaves("l1_ball"))) <= scale + tol
        assert jnp.linalg.norm(leaves("l2_ball")) <= scale + tol
    hypercube = jnp.concatenate(
        [jnp.ravel(v) for v in jax.tree.leaves(gp.projection_hypercube(PYTREE, 0.8))]
    )
    assert jnp.all((hypercube >= 0) & (hypercube <= 0.8))


def _jacobians(lib, x, a):
    """Jacobians (reverse mode) and JVPs (forward mode) of each projection."""
    fns = {
        "simplex": lambda x: lib.projection_simplex(x, 0.8),
        "l1_ball": lambda x: lib.projection_l1_ball(x, 0.8),
        "l2_sphere": lambda x: lib.projection_l2_sphere(x, 0.8),
        "l2_ball": lambda x: lib.projection_l2_ball(x, 0.8),
        "box": lambda x: lib.projection_box(x, -0.3, 0.4),
        "halfspace": lambda x: lib.projection_halfspace(x, a, -0.5),
    }
    out = {name: jax.jacrev(fn)(x) for name, fn in fns.items()}
    # Forward mode where gradax defines its own rule (the simplex's JVP).
    out.update({f"{n}_fwd": jax.jacfwd(fns[n])(x) for n in ("simplex", "l1_ball")})
    out["simplex_scale"] = jax.grad(lambda s: lib.projection_simplex(x, s)[0])(0.8)
    return out


def test_derivatives_match_optax():
    x, a = _random(12, 8), _random(12, 9)
    ours = jit_once(lambda x, a: _jacobians(gp, x, a))(x, a)
    theirs = jit_once(lambda x, a: _jacobians(optax.projections, x, a))(x, a)
    _assert_trees_close(ours, theirs)
    # The simplex Jacobian is diag(s) - s s^T / |s| on the support s.
    support = (gp.projection_simplex(x, 0.8) > 0).astype(jnp.float32)
    expected = jnp.diag(support) - jnp.outer(support, support) / jnp.sum(support)
    _assert_trees_close(ours["simplex"], expected)


def test_gradient_at_zero_is_the_identity():
    # Inside the ball the projection is the identity, also at the origin.
    l2, l1 = jax.grad(gp.projection_l2_ball), jax.grad(gp.projection_l1_ball)
    grads = jit_once(lambda x: (l2(x), l1(x)))(0.0)
    assert grads == (1.0, 1.0)


def test_simplex_with_minus_infinity():
    for scale in (1.0, 0.8):
        out = gp.projection_simplex(jnp.array([0.0, 0.0, -jnp.inf]), scale)
        np.testing.assert_allclose(out, [scale / 2, scale / 2, 0.0], atol=ATOL)


def test_vmap_with_per_row_scale():
    x = _random((3, 20), 10)
    scales = jnp.array([1.0, 0.8, 2.0])
    ours = jit_once(jax.vmap(gp.projection_simplex))(x, scales)
    theirs = jit_once(jax.vmap(optax.projections.projection_simplex))(x, scales)
    _assert_trees_close(ours, theirs)


def test_box_bounds_broadcast_over_subtrees():
    """A scalar bound applies to every leaf (optax needs one bound per leaf)."""
    tree = {"w": jnp.array([-2.0, 0.5, 3.0]), "b": (jnp.array(5.0), -1.0)}
    expected = jax.tree.map(lambda v: jnp.clip(v, 0.0, 2.0), tree)
    _assert_trees_close(gp.projection_box(tree, 0.0, 2.0), expected)
    _assert_trees_close(gp.projection_hypercube(tree, 2.0), expected)
    # A bound per subtree: a prefix of the tree.
    mixed = gp.projection_box(tree, {"w": 0.0, "b": -0.5}, 2.0)
    _assert_trees_close(mixed["b"], (jnp.array(2.0), jnp.array(-0.5)))
    # Bounds with the tree's own structure, as optax takes them.
    lower = jax.tree.map(lambda v: jnp.full_like(jnp.asarray(v), -1.0), tree)
    _assert_trees_close(
        gp.projection_box(tree, lower, 1.0),
        optax.projections.projection_box(
            tree, lower, jax.tree.map(lambda v: 1.0, tree)
        ),
    )


def test_half_precision_keeps_its_dtype():
    """gradax returns the input dtype; optax returns float32 for bfloat16."""
    half = _random(30, 11).astype(jnp.bfloat16)
    names = ("projection_simplex", "projection_l1_ball", "projection_linf_ball")

    @jit_once
    def run(half):
        ours = {n: getattr(gp, n)(half) for n in names}
        wide = {n: getattr(gp, n)(half.astype(jnp.float32)) for n in names}
        # optax's l1_ball raises on bfloat16 (its cond branches differ in dtype).
        return ours, wide, optax.projections.projection_simplex(half)

    ours, wide, theirs = run(half)
    # The float32 projection of the same input, rounded once to bfloat16
    # (8 significant bits: 2**-8 relative), plus the threshold's own rounding
    # in bfloat16, below 2**-8 of the largest entry (< 3).
    atol = 2 * 2.0**-8 * 3
    for name in names:
        assert ours[name].dtype == jnp.bfloat16
        rounded = ours[name].astype(jnp.float32)
        np.testing.assert_allclose(rounded, wide[name], atol=atol)
    assert theirs.dtype == jnp.float32
    np.testing.assert_allclose(
        ours["projection_simplex"].astype(jnp.float32), theirs, atol=atol
    )


def test_top_level_module():
    assert gradax.projections is gp
