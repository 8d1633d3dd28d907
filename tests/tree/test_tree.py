"""Tests for gradax.tree: same numbers as optax.tree, and state access by name."""

from __future__ import annotations

import dataclasses
import inspect
import math
import os
import subprocess
import sys
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from jax_versions import needs_jax

import gradax.tree as gt

FLOAT_DTYPES = [jnp.float32, jnp.complex64]


class Pair(NamedTuple):
    a: Any
    b: Any


def make_tree(dtype: Any, seed: int = 0) -> dict:
    """Scalars, vectors, matrices, a list, a NamedTuple, dicts and None leaves."""
    rng = np.random.default_rng(seed)

    def arr(shape):
        x = rng.uniform(0.5, 2.0, shape) * rng.choice([-1.0, 1.0], shape)
        if jnp.issubdtype(dtype, jnp.complexfloating):
            x = x + 1j * rng.uniform(-2.0, 2.0, shape)
        return jnp.asarray(x, dtype)

    return {
        "scalar": arr(()),
        "vec": arr((3,)),
        "mat": arr((2, 3)),
        "list": [arr((2,)), arr(())],
        "state": Pair(a=arr((4,)), b={"w": arr((3, 2)), "empty": None}),
        "none": None,
    }


def assert_same(actual: Any, expected: Any, rtol: float = 0.0) -> None:
    """Same structure, dtypes, weak types and shapes; values equal (or close)."""
    actual = gt.unwrap_random_key_data(actual)
    expected = optax.tree.unwrap_random_key_data(expected)
    leaves_a, def_a = jax.tree.flatten(actual)
    leaves_e, def_e = jax.tree.flatten(expected)
    assert def_a == def_e
    for a, e in zip(leaves_a, leaves_e, strict=True):
        assert type(a) is type(e) or isinstance(a, jax.Array) == isinstance(
            e, jax.Array
        )
        a_arr, e_arr = jnp.asarray(a), jnp.asarray(e)
        assert a_arr.dtype == e_arr.dtype
        assert a_arr.shape == e_arr.shape
        assert jax.typeof(a).weak_type == jax.typeof(e).weak_type
        if rtol:
            np.testing.assert_allclose(a_arr, e_arr, rtol=rtol)
        else:
            np.testing.assert_array_equal(a_arr, e_arr)


# ---------------------------------------------------------------------------
# The surface.
# ---------------------------------------------------------------------------

OPTAX_NAMES = sorted(n for n in dir(optax.tree) if not n.startswith("_"))


def test_every_optax_name_is_here():
    assert OPTAX_NAMES  # the comparison below is not vacuous
    missing = [name for name in OPTAX_NAMES if not hasattr(gt, name)]
    assert not missing


@pytest.mark.parametrize("name", OPTAX_NAMES)
def test_same_signature_as_optax(name):
    ours = inspect.signature(getattr(gt, name)).parameters
    theirs = inspect.signature(getattr(optax.tree, name)).parameters
    assert list(ours) == list(theirs)
    for p, q in zip(ours.values(), theirs.values(), strict=True):
        assert p.kind == q.kind
        assert p.default is q.default or p.default == q.default


def test_import_creates_no_device_arrays():
    # With an unknown platform any array creation raises, so importing the
    # whole package (every public subpackage) must not create one.
    code = (
        "import gradax, gradax.tree, gradax.contrib, gradax.transforms, jax\n"
        "try:\n"
        "    jax.numpy.zeros(1)\n"
        "except RuntimeError:\n"
        "    print('no backend')\n"
    )
    env = dict(os.environ, JAX_PLATFORMS="no_such_platform")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert "no backend" in out.stdout


# ---------------------------------------------------------------------------
# Arithmetic against optax.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "vdot"])
def test_binary_ops(name, dtype):
    x, y = make_tree(dtype, 0), make_tree(dtype, 1)
    assert_same(getattr(gt, name)(x, y), getattr(optax.tree, name)(x, y))


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.complex64, jnp.bfloat16])
def test_vdot_is_bitwise_optax(dtype, jit):
    # Complex products are where a conjugate computed apart from the product
    # (op by op) differed from optax's jnp.vdot in the last bit.
    rng = np.random.default_rng(0)

    def arr(shape):
        x = rng.normal(size=shape) * 10
        if dtype == jnp.complex64:
            x = x + 1j * rng.normal(size=shape)
        return jnp.asarray(x, dtype)

    shapes = [(3,), (7, 5), (100,), (4, 3, 2), (64, 64), ()]
    x = [arr(shape) for shape in shapes]
    y = [arr(shape) for shape in shapes]
    ours, theirs = gt.vdot, optax.tree.vdot
    if jit:
        ours, theirs = jax.jit(ours), jax.jit(theirs)
    for a, b in zip(x, y, strict=True):
        assert_same(ours(a, b), theirs(a, b))
        assert_same(ours(a, b), jnp.vdot(a, b, precision=jax.lax.Precision.HIGHEST))
    assert_same(ours(x, y), theirs(x, y))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_add_many_and_scale(dtype):
    x, y, z = (make_tree(dtype, s) for s in range(3))
    assert_same(gt.add(x, y, z), optax.tree.add(x, y, z))
    assert_same(gt.scale(0.3, x), optax.tree.scale(0.3, x))
    assert_same(gt.scale(jnp.float32(2.0), x), optax.tree.scale(jnp.float32(2.0), x))
    assert_same(gt.add_scale(x, 0.7, y), optax.tree.add_scale(x, 0.7, y))


def test_add_scale_keeps_none_of_first_tree():
    x = {"a": None, "b": jnp.ones(2)}
    y = {"a": jnp.ones(3), "b": jnp.ones(2)}
    out = gt.add_scale(x, 2.0, y)
    assert out["a"] is None
    assert_same(out, optax.tree.add_scale(x, 2.0, y))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_unary_ops(dtype):
    x = make_tree(dtype)
    for name in ["conj", "real", "size", "sum"]:
        assert_same(getattr(gt, name)(x), getattr(optax.tree, name)(x))
    assert gt.size(x) == 1 + 3 + 6 + 2 + 1 + 4 + 6
    assert_same(gt.batch_shape(x, (2, 1)), optax.tree.batch_shape(x, (2, 1)))
    cond = jnp.array(True)
    y = make_tree(dtype, 1)
    assert_same(gt.where(cond, x, y), optax.tree.where(cond, x, y))
    assert_same(gt.where(False, x, y), y)


# optax refuses associative_reduction=True before jax 0.6.0 (it needs
# jax.tree.reduce_associative; gradax has a fallback, tests/core/test_compat.py).
@needs_jax((0, 6, 0), "optax.tree.sum(associative_reduction=True) (the reference)")
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_associative_sum_matches_optax(dtype):
    x = make_tree(dtype)
    assert_same(
        gt.sum(x, associative_reduction=True),
        optax.tree.sum(x, associative_reduction=True),
    )


def test_real_only_ops():
    x = make_tree(jnp.float32)
    for name in ["max", "min"]:
        assert_same(getattr(gt, name)(x), getattr(optax.tree, name)(x))
    assert_same(gt.clip(x, -1.0, 0.5), optax.tree.clip(x, -1.0, 0.5))
    assert_same(gt.clip(x, max_value=0.0), optax.tree.clip(x, max_value=0.0))
    assert float(gt.max(x)) == max(float(jnp.max(v)) for v in jax.tree.leaves(x))


def test_empty_trees():
    for name in ["sum", "max", "min", "size", "norm", "vdot", "allclose"]:
        args = ({}, {}) if name in ("vdot", "allclose") else ({},)
        assert_same(getattr(gt, name)(*args), getattr(optax.tree, name)(*args))
    assert_same(gt.norm({}, squared=True), optax.tree.norm({}, squared=True))
    assert gt.max({"a": jnp.zeros((0, 2)), "b": jnp.array(-3.0)}) == -3.0


@pytest.mark.parametrize("dtype", [*FLOAT_DTYPES, jnp.bfloat16])
@pytest.mark.parametrize("ord", [None, 2, 1, math.inf, "inf", "infinity"])
@pytest.mark.parametrize("squared", [False, True])
def test_norm(dtype, ord, squared):
    x = make_tree(dtype)
    assert_same(gt.norm(x, ord, squared), optax.tree.norm(x, ord, squared))


def test_norm_values_and_errors():
    x = {"a": jnp.array([3.0 + 4.0j]), "b": jnp.array([12.0 + 0.0j])}
    np.testing.assert_allclose(gt.norm(x), 13.0, rtol=1e-6)
    np.testing.assert_allclose(gt.norm(x, 1), 17.0, rtol=1e-6)
    np.testing.assert_allclose(gt.norm(x, "inf", squared=True), 144.0, rtol=1e-6)
    with pytest.raises(ValueError, match="ord"):
        gt.norm(x, ord=3)


def test_vdot_conjugates_first_argument():
    x, y = {"a": jnp.array([1j])}, {"a": jnp.array([1j])}
    np.testing.assert_allclose(gt.vdot(x, y), 1.0)
    with pytest.raises(ValueError, match="shapes"):
        gt.vdot({"a": jnp.ones(2)}, {"a": jnp.ones(3)})


def test_allclose():
    x = make_tree(jnp.complex64)
    y = gt.add_scale(x, 1e-3, gt.ones_like(x))
    assert bool(gt.allclose(x, x)) and bool(optax.tree.allclose(x, x))
    assert not bool(gt.allclose(x, y))
    assert bool(gt.allclose(x, y, atol=1e-2)) == bool(
        optax.tree.allclose(x, y, 0, 1e-2)
    )
    nan = {"a": jnp.array([jnp.nan])}
    assert not bool(gt.allclose(nan, nan))
    assert bool(gt.allclose(nan, nan, equal_nan=True))
    with pytest.raises(ValueError):
        gt.allclose({"a": 1.0}, {"b": 1.0})


# ---------------------------------------------------------------------------
# Dtypes and constructors.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [None, jnp.bfloat16, jnp.complex64, jnp.int32])
def test_constructors_and_cast(dtype):
    x = make_tree(jnp.float32)
    assert_same(gt.zeros_like(x, dtype), optax.tree.zeros_like(x, dtype))
    assert_same(gt.ones_like(x, dtype), optax.tree.ones_like(x, dtype))
    assert_same(gt.full_like(x, 3, dtype), optax.tree.full_like(x, 3, dtype))
    assert_same(gt.cast(x, dtype), optax.tree.cast(x, dtype))


def test_cast_like_and_dtype():
    x = make_tree(jnp.float32)
    other = gt.cast(make_tree(jnp.float32), jnp.bfloat16)
    other["vec"] = object()  # no dtype: that leaf keeps its own
    assert_same(gt.cast_like(x, other), optax.tree.cast_like(x, other))
    assert gt.cast_like(x, other)["mat"].dtype == jnp.bfloat16
    assert gt.cast_like(x, other)["vec"].dtype == jnp.float32
    assert gt.dtype(x) == optax.tree.dtype(x) == jnp.float32
    assert gt.dtype({}) == optax.tree.dtype({})
    mixed = {"a": jnp.ones(2, jnp.float16), "b": jnp.ones(2, jnp.bfloat16)}
    mixed["c"] = jnp.ones(1, jnp.float32)
    assert gt.dtype(mixed, "promote") == optax.tree.dtype(mixed, "promote")
    assert gt.dtype(mixed, "promote") == jnp.float32
    with pytest.raises(ValueError, match="float16"):
        gt.dtype(mixed)
    for handler in ["highest", "lowest"]:
        with pytest.raises(ValueError):
            gt.dtype(mixed, handler)  # float16 and bfloat16 are not ordered
        with pytest.raises(ValueError):
            optax.tree.dtype(mixed, handler)
    ordered = {"a": jnp.ones(1, jnp.float16), "c": jnp.ones(2, jnp.float32)}
    for handler, expected in [("highest", jnp.float32), ("lowest", jnp.float16)]:
        assert gt.dtype(ordered, handler) == expected
        assert optax.tree.dtype(ordered, handler) == expected
    with pytest.raises(ValueError, match="mixed_dtype_handler"):
        gt.dtype(mixed, "biggest")


def test_random_trees():
    key = jax.random.key(3)
    x = make_tree(jnp.float32)
    assert_same(gt.split_key_like(key, x), optax.tree.split_key_like(key, x))
    assert_same(gt.random_like(key, x), optax.tree.random_like(key, x))
    for sampler in [jax.random.uniform, lambda k, s, d: jax.random.normal(k, s, d)]:
        assert_same(
            gt.random_like(key, x, sampler, jnp.bfloat16),
            optax.tree.random_like(key, x, sampler, jnp.bfloat16),
        )
    raw = jax.random.PRNGKey(0)
    mixed = {"k": key, "raw": raw, "x": jnp.ones(2)}
    unwrapped = gt.unwrap_random_key_data(mixed)
    np.testing.assert_array_equal(unwrapped["k"], jax.random.key_data(key))
    assert unwrapped["raw"] is raw


# ---------------------------------------------------------------------------
# Moments.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("order", [1, 2])
def test_update_moment(dtype, order):
    g, m = make_tree(dtype, 0), make_tree(dtype, 1)
    assert_same(
        gt.update_moment(g, m, 0.9, order), optax.tree.update_moment(g, m, 0.9, order)
    )


@pytest.mark.parametrize("order", [1, 2, 3])
def test_update_moment_per_elem_norm(order):
    g, m = make_tree(jnp.complex64, 0), gt.real(make_tree(jnp.float32, 1))
    ours = gt.update_moment_per_elem_norm(g, m, 0.99, order)
    assert_same(ours, optax.tree.update_moment_per_elem_norm(g, m, 0.99, order))
    expected = 0.01 * jnp.abs(g["vec"]) ** order + 0.99 * m["vec"]
    np.testing.assert_allclose(ours["vec"], expected, rtol=1e-5)
    g = make_tree(jnp.float32, 2)
    assert_same(
        gt.update_moment_per_elem_norm(g, m, 0.99, order),
        optax.tree.update_moment_per_elem_norm(g, m, 0.99, order),
    )


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_update_infinity_moment(dtype):
    g, m = (
        gt.cast(make_tree(jnp.float32, 0), dtype),
        gt.cast(make_tree(jnp.float32, 1), dtype),
    )
    assert_same(
        gt.update_infinity_moment(g, m, 0.9, 1e-8),
        optax.tree.update_infinity_moment(g, m, 0.9, 1e-8),
    )


def test_moments_skip_none_updates():
    g = {"a": None, "b": jnp.ones(2)}
    m = {"a": jnp.zeros(3), "b": jnp.zeros(2)}
    for fn in [gt.update_moment, gt.update_moment_per_elem_norm]:
        out = fn(g, m, 0.9, 2)
        assert out["a"] is None
        np.testing.assert_allclose(out["b"], 0.1, rtol=1e-6)
    assert gt.update_infinity_moment(g, m, 0.9, 0.0)["a"] is None


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.complex64])
def test_bias_correction(dtype):
    m = gt.cast(make_tree(jnp.float32), dtype)
    for count in [jnp.array(1), jnp.array(7, jnp.int32)]:
        assert_same(
            gt.bias_correction(m, 0.9, count),
            optax.tree.bias_correction(m, 0.9, count),
            rtol=1e-6,
        )
    np.testing.assert_allclose(
        gt.bias_correction({"a": jnp.array(0.1)}, 0.9, jnp.array(1))["a"],
        1.0,
        rtol=1e-6,
    )


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16, jnp.float32])
def test_moments_keep_dtype_with_strong_decay(dtype):
    """A float32 array decay must not promote lower-precision moments."""
    g = gt.cast(make_tree(jnp.float32, 0), dtype)
    m = gt.cast(make_tree(jnp.float32, 1), dtype)
    decay = jnp.array(0.9, jnp.float32)  # strongly typed
    for fn, extra in [
        (gt.update_moment, 2),
        (gt.update_moment_per_elem_norm, 2),
        (gt.update_infinity_moment, jnp.array(1e-8, jnp.float32)),
    ]:
        out = jax.jit(fn)(g, m, decay, extra)
        assert jax.tree.structure(out) == jax.tree.structure(m)
        for o, t in zip(jax.tree.leaves(out), jax.tree.leaves(m), strict=True):
            assert o.dtype == t.dtype
            assert jax.typeof(o).weak_type == jax.typeof(t).weak_type
    # Same numbers as a Python float decay, up to the rounding of the result.
    close = gt.update_moment(g, m, decay, 2)
    ref = optax.tree.update_moment(g, m, 0.9, 2)
    tol = {jnp.bfloat16: 1e-2, jnp.float16: 1e-3, jnp.float32: 1e-6}[dtype]
    assert_same(gt.cast(close, jnp.float32), gt.cast(ref, jnp.float32), rtol=tol)
    out = gt.bias_correction(m, decay, jnp.array(3))
    assert all(o.dtype == dtype for o in jax.tree.leaves(out))


def test_moments_weak_decay_and_strict_promotion():
    m = {"a": jnp.ones(3, jnp.bfloat16)}
    with jax.numpy_dtype_promotion("strict"):
        for decay in [0.9, jnp.asarray(0.9), jnp.array(0.9, jnp.float32)]:
            out = jax.jit(gt.update_moment, static_argnums=3)(m, m, decay, 2)
            assert out["a"].dtype == jnp.bfloat16
    weak = {"a": jnp.asarray(1.0)}
    assert jax.typeof(gt.update_moment(weak, weak, 0.5, 1)["a"]).weak_type


# ---------------------------------------------------------------------------
# map_params.
# ---------------------------------------------------------------------------


def test_map_params():
    params = {"w": jnp.ones((2, 3)), "b": jnp.zeros(3)}
    opt = optax.adam(1e-3)
    state = opt.init(params)
    for initable in [opt, opt.init]:
        ours = gt.map_params(
            initable, lambda p: p.shape, state, transform_non_params=lambda _: None
        )
        theirs = optax.tree.map_params(
            initable, lambda p: p.shape, state, transform_non_params=lambda _: None
        )
        assert ours == theirs
        assert ours[0].mu == {"w": (2, 3), "b": (3,)}
        assert ours[0].count is None
    specs = {"w": "W", "b": "B"}
    out = gt.map_params(opt, lambda _, s: s, state, specs)
    assert out[0].nu == specs
    assert out[0].count is state[0].count


# ---------------------------------------------------------------------------
# get / get_all_with_path / set.
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class FrozenState:
    """A frozen dataclass pytree: ``count`` and ``inner`` are data, ``tag`` static."""

    count: Any
    inner: Any
    tag: str = "t"


jax.tree_util.register_pytree_with_keys(
    FrozenState,
    lambda s: (
        (
            (jax.tree_util.GetAttrKey("count"), s.count),
            (jax.tree_util.GetAttrKey("inner"), s.inner),
        ),
        s.tag,
    ),
    lambda tag, children: FrozenState(*children, tag=tag),
)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Hyper:
    learning_rate: Any
    b1: Any
    name: str = dataclasses.field(default="h", metadata={"static": True})


class Inner(NamedTuple):
    mu: Any
    hyper: Any


def make_state() -> FrozenState:
    return FrozenState(
        count=jnp.array(3),
        inner=Inner(mu={"w": jnp.ones(2)}, hyper={"learning_rate": jnp.array(0.1)}),
        tag="outer",
    )


def paths(found):
    return sorted(in_order(found))


def in_order(found):
    return [jax.tree_util.keystr(path) for path, _ in found]


def test_get_on_frozen_dataclass_and_namedtuple():
    state = make_state()
    assert int(gt.get(state, "count")) == 3
    assert float(gt.get(state, "learning_rate")) == pytest.approx(0.1)
    assert gt.get(state, "mu") is state.inner.mu
    assert gt.get(state, "w") is state.inner.mu["w"]
    assert gt.get(state, "Inner") is state.inner
    assert gt.get(state, "FrozenState") is state
    assert gt.get(state, "tag") is None  # static fields are not in the tree
    assert gt.get(state, "missing", default="d") == "d"
    found = gt.get_all_with_path(state, "learning_rate")
    assert paths(found) == [".innerInner.hyper['learning_rate']"]  # as optax
    path, _ = found[0]
    assert isinstance(path[0], jax.tree_util.GetAttrKey)
    assert path[1] == gt.NamedTupleKey("Inner", "hyper")
    assert path[2] == jax.tree_util.DictKey("learning_rate")


class Box:
    """A keyed pytree node that is not a dataclass."""

    def __init__(self, value):
        self.value = value


jax.tree_util.register_pytree_with_keys(
    Box,
    lambda b: (((jax.tree_util.GetAttrKey("value"), b.value),), None),
    lambda _, children: Box(*children),
)


def test_keyed_node_that_is_not_a_dataclass():
    tree = {"box": Box({"lr": 1.0})}
    assert gt.get(tree, "Box") is tree["box"]
    assert gt.get(tree, "value") is tree["box"].value
    new = gt.set(tree, Box=2.0)
    assert new == {"box": 2.0}
    assert gt.set(tree, lr=3.0)["box"].value == {"lr": 3.0}


def test_get_several_matches():
    state = {"a": make_state(), "b": Hyper(jnp.array(0.2), 0.9)}
    with pytest.raises(KeyError, match="learning_rate"):
        gt.get(state, "learning_rate")
    assert len(gt.get_all_with_path(state, "learning_rate")) == 2
    in_hyper = gt.get(
        state,
        "learning_rate",
        filtering=lambda path, _: isinstance(path[-1], jax.tree_util.GetAttrKey),
    )
    assert in_hyper is state["b"].learning_rate
    # A match is searched inside too: the nested dict's key is found as well.
    nested = {"lr": {"lr": 1.0}}
    assert [v for _, v in gt.get_all_with_path(nested, "lr")] == [{"lr": 1.0}, 1.0]


def test_two_counts_the_error_says_how_to_pick_one_and_each_way_works():
    # A schedule adds a second count: get(state, "count") is no longer one
    # value. The message names both and the two ways the docs give.
    import gradax

    schedule = gradax.linear_schedule(1e-3, 0.0, 100)
    state = gradax.adam(schedule).init({"w": jnp.ones(3)})

    def adams(path, _):
        return str(path[-1]) == "ScaleByAdamState.count"

    state = gt.set(state, adams, count=7)
    with pytest.raises(KeyError) as raised:
        gt.get(state, "count")
    assert raised.value.args[0] == (
        "Found 2 values for 'count', at [0]ScaleByAdamState.count, "
        "[1]ScaleByScheduleState.count. Pick one with filtering=lambda path, _: "
        "str(path[-1]) == 'ScaleByAdamState.count', or get the state that holds "
        "it: get(tree, 'ScaleByAdamState').count; get_all_with_path lists them all."
    )
    assert gt.get(state, "count", filtering=adams) == 7
    assert gt.get(state, "ScaleByAdamState").count == 7
    # Without a NamedTuple field last (a restored checkpoint's dicts), the
    # message filters on the whole path.
    restored = {"0": {"count": 7}, "1": {"count": 0}}
    with pytest.raises(KeyError) as raised:
        gt.get(restored, "count")
    assert "keystr(path) == \"['0']['count']\"" in raised.value.args[0]
    first = "['0']['count']"
    picked = gt.get(
        restored, "count", filtering=lambda p, _: jax.tree_util.keystr(p) == first
    )
    assert picked == 7


def test_get_all_with_path_order_is_optax():
    # optax lists the outermost matches first (in tree order), then the matches
    # nested inside each of them: here a deep match sorts before shallow ones
    # in plain depth-first order, and not in optax's.
    class S(NamedTuple):
        count: Any
        inner: Any

    tree = {
        "a": S(1, {"count": 2, "x": S(3, 4)}),
        "b": {"count": 5},
        "c": [S(6, S(7, 8))],
        "count": 9,
        "d": {"e": {"f": S(10, None)}, "g": {"count": 11}},
    }
    for key in ["count", "S"]:
        ours = gt.get_all_with_path(tree, key)
        theirs = optax.tree.get_all_with_path(tree, key)
        assert in_order(ours) == in_order(theirs)
        assert [v for _, v in ours] == [v for _, v in theirs]
    # Below the top: the same order inside a subtree without the key at its root.
    sub = {"top": tree}
    ours = gt.get_all_with_path(sub, "count")
    assert in_order(ours) == in_order(optax.tree.get_all_with_path(sub, "count"))
    # On an optimizer state: the counts of both chained states before the one
    # nested in the first.
    params = jnp.ones(2)
    opt = optax.chain(
        optax.inject_hyperparams(optax.adam)(0.1),
        optax.inject_hyperparams(optax.adam)(0.2),
    )
    state = opt.init(params)
    ours = gt.get_all_with_path(state, "count")
    assert in_order(ours) == in_order(optax.tree.get_all_with_path(state, "count"))


def test_get_ignores_positions():
    tree = [jnp.ones(1), {"x": 1}]
    assert gt.get(tree, 0) is None
    assert gt.get_all_with_path(tree, None) == []
    assert gt.get({0: "zero"}, 0) == "zero"


def test_set_on_frozen_dataclass_keeps_types_and_static_fields():
    state = make_state()
    new = gt.set(state, count=jnp.array(4), learning_rate=jnp.array(0.5))
    assert type(new) is FrozenState and new.tag == "outer"
    assert jax.tree.structure(new) == jax.tree.structure(state)
    assert int(new.count) == 4 and float(new.inner.hyper["learning_rate"]) == 0.5
    assert new.inner.mu is state.inner.mu  # untouched parts are shared
    assert int(state.count) == 3  # the original is unchanged
    replaced = gt.set(state, Inner=Inner(mu=None, hyper=None))
    assert replaced.inner == Inner(None, None) and replaced.count is state.count
    h = Hyper(jnp.array(0.1), jnp.array(0.9), name="mine")
    h2 = gt.set(h, b1=jnp.array(0.8))
    assert (
        type(h2) is Hyper and h2.name == "mine" and float(h2.b1) == pytest.approx(0.8)
    )


def test_set_errors_and_filtering():
    state = {"a": make_state(), "b": Hyper(jnp.array(0.2), 0.9)}
    with pytest.raises(KeyError, match="nope"):
        gt.set(state, nope=1)
    only_dicts = lambda path, _: isinstance(path[-1], jax.tree_util.DictKey)  # noqa: E731
    new = gt.set(state, only_dicts, learning_rate=7.0)
    assert new["a"].inner.hyper["learning_rate"] == 7.0
    assert new["b"].learning_rate is state["b"].learning_rate
    with pytest.raises(KeyError, match="filtering"):
        gt.set(state, lambda *_: False, learning_rate=1.0)
    assert gt.set(state) is state


def test_set_under_jit():
    state = make_state()

    @jax.jit
    def with_lr(state, lr):
        return gt.set(state, learning_rate=lr)

    new = with_lr(state, jnp.array(0.25))
    assert float(gt.get(new, "learning_rate")) == 0.25
    assert jax.tree.structure(new) == jax.tree.structure(state)


def test_access_matches_optax_on_optax_states():
    params = {"w": jnp.ones((2, 2)), "b": jnp.zeros(2)}
    opt = optax.chain(
        optax.add_noise(0.1, 0.5, key=0),
        optax.inject_hyperparams(optax.adam)(learning_rate=0.1, b1=0.8),
    )
    state = opt.init(params)
    for key in ["learning_rate", "count", "mu", "b", "AddNoiseState", "b1"]:
        ours = gt.get_all_with_path(state, key)
        theirs = optax.tree.get_all_with_path(state, key)
        assert ours and paths(ours) == paths(theirs)
        for (_, v), (_, w) in zip(
            sorted(ours, key=lambda pv: jax.tree_util.keystr(pv[0])),
            sorted(theirs, key=lambda pv: jax.tree_util.keystr(pv[0])),
            strict=True,
        ):
            assert_same(v, w)
    assert_same(gt.get(state, "learning_rate"), optax.tree.get(state, "learning_rate"))
    with pytest.raises(KeyError):
        gt.get(state, "count")
    with pytest.raises(KeyError):
        optax.tree.get(state, "count")

    def in_adam(path, _):
        return any(getattr(e, "tuple_name", None) == "ScaleByAdamState" for e in path)

    assert gt.get(state, "count", filtering=in_adam) is state[1].inner_state[0].count
    assert_same(
        gt.set(state, learning_rate=jnp.array(0.3), b1=jnp.array(0.7)),
        optax.tree.set(state, learning_rate=jnp.array(0.3), b1=jnp.array(0.7)),
    )
    # optax 0.2.8 finds this count but its set leaves it unchanged (it does not
    # descend into the plain tuple ``inner_state``); gradax replaces what get finds.
    ours = gt.set(state, in_adam, count=jnp.array(5))
    assert int(ours[1].inner_state[0].count) == 5
    assert ours[0].count is state[0].count and ours[1].count is state[1].count
    assert jax.tree.structure(ours) == jax.tree.structure(state)


# ---------------------------------------------------------------------------
# Properties.
# ---------------------------------------------------------------------------


@st.composite
def float_trees(draw, n_trees=1):
    """One or more random trees of one structure and one (real or complex) dtype."""
    dtype = draw(st.sampled_from([np.float32, np.complex64]))
    shapes = draw(
        st.lists(
            hnp.array_shapes(min_dims=0, max_dims=2, max_side=3), min_size=1, max_size=3
        )
    )
    elements = st.floats(-10, 10, width=32)
    if dtype is np.complex64:
        elements = st.complex_numbers(max_magnitude=10, width=64)
    trees = []
    for _ in range(n_trees):
        leaves = [
            jnp.asarray(draw(hnp.arrays(dtype, shape, elements=elements)))
            for shape in shapes
        ]
        trees.append({"x": leaves[0], "rest": Pair(leaves[1:], None)})
    return trees


@settings(max_examples=25, deadline=None)
@given(float_trees())
def test_norm_squared_is_vdot_with_itself(trees):
    (x,) = trees
    sq = gt.norm(x, squared=True)
    np.testing.assert_allclose(sq, jnp.real(gt.vdot(x, x)), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gt.norm(x) ** 2, sq, rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(sq, optax.tree.norm(x, squared=True))
    assert sq.dtype == jnp.float32


@settings(max_examples=25, deadline=None)
@given(float_trees(n_trees=2))
def test_add_sub_roundtrip(trees):
    x, y = trees
    back = gt.sub(gt.add(x, y), y)
    assert jax.tree.structure(back) == jax.tree.structure(x)
    assert bool(gt.allclose(back, x, rtol=1e-5, atol=1e-5))
    assert_same(gt.add_scale(x, -1.0, x), gt.zeros_like(x))


@settings(max_examples=25, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["lr", "b1", "eps", "count"]),
        st.floats(-1, 1, width=32),
        min_size=1,
    ),
    st.floats(-1, 1, width=32),
)
def test_set_then_get(hyper, value):
    state = FrozenState(jnp.array(0), Inner(mu=None, hyper=hyper))
    key = sorted(hyper)[0]
    if key == "count":  # also a field of FrozenState: two matches
        with pytest.raises(KeyError):
            gt.get(state, key)
        return
    new = gt.set(state, **{key: value})
    assert gt.get(new, key) == value
    assert jax.tree.structure(new) == jax.tree.structure(state)
    for other in hyper:
        if other != key and other != "count":
            assert gt.get(new, other) == hyper[other]
