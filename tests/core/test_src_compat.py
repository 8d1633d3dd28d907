"""gradax._src: optax's private import paths resolve to gradax's objects.

Each shim module offers exactly the names of the optax 0.2.8 module it stands
for, less the ones listed in ``LEFT_OUT`` (gradax has no counterpart), and each
name is gradax's own object. The idioms real code uses run, and the helpers
real code calls give optax's numbers.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import types
import typing

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradax

MODULES = [
    "alias",
    "base",
    "combine",
    "constrain",
    "factorized",
    "linear_algebra",
    "linesearch",
    "lookahead",
    "numerics",
    "schedule",
    "transform",
    "update",
    "utils",
    "wrappers",
]

# optax's names that gradax has no counterpart for (see each module's docstring).
LEFT_OUT = {
    "base": {"NO_PARAMS_MSG"},
    "linear_algebra": {"get_spectral_radius_upper_bound"},
    "linesearch": {
        "BacktrackingLineSearchState",
        "ZoomLinesearchState",
        "zoom_linesearch",
        "FLAG_INTERVAL_NOT_FOUND",
        "FLAG_INTERVAL_TOO_SMALL",
        "FLAG_CURVATURE_COND_NOT_SATISFIED",
        "FLAG_NO_STEPSIZE_FOUND",
        "FLAG_NOT_A_DESCENT_DIRECTION",
    },
    "utils": {
        "canonicalize_key",
        "check_rank",
        "check_shapes_equal",
        "check_subdtype",
        "set_diags",
        "tile_second_to_last_dim",
        "x64_precision",
    },
}

# What optax's and the shims' modules import for their own annotations.
TYPING_HELPERS = {
    "Any",
    "Callable",
    "Iterable",
    "Literal",
    "Mapping",
    "NamedTuple",
    "Optional",
    "Protocol",
    "Sequence",
    "Union",
    "runtime_checkable",
}

# Mapped names that are not in gradax's top-level namespace.
NOT_TOP_LEVEL = {
    "abs_sq": "gradax._core.numerics.abs_sq",
    "canonicalize_dtype": "gradax._core.numerics.canonical_dtype",
    "MultiNormalDiagFromLogScale": (
        "gradax._optax.distributions.MultiNormalDiagFromLogScale"
    ),
    # optax's annotation-only aliases.
    "PyTree": "typing.Any",
    "ArrayTree": "typing.Any",
    "PRNGKey": "jax.Array",
}


def _names(module: types.ModuleType) -> set[str]:
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and name not in TYPING_HELPERS
        and not isinstance(value, types.ModuleType)
    }


def _resolve(dotted: str) -> object:
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("name", MODULES)
def test_each_shim_has_optax_names_bound_to_gradax_objects(name):
    shim = importlib.import_module(f"gradax._src.{name}")
    theirs = importlib.import_module(f"optax._src.{name}")
    assert (shim.__doc__ or "").startswith("Compatibility shim for `optax._src.")
    left_out = LEFT_OUT.get(name, set())
    assert left_out <= _names(theirs), "LEFT_OUT names a name optax lacks"
    assert _names(shim) == _names(theirs) - left_out
    for attr in sorted(_names(shim)):
        ours = getattr(shim, attr)
        if attr == "Shape":  # optax's alias, rebuilt: a sequence of ints
            assert typing.get_origin(ours) is typing.get_origin(getattr(theirs, attr))
            assert typing.get_args(ours) == (int,)
        elif attr in NOT_TOP_LEVEL:
            assert ours is _resolve(NOT_TOP_LEVEL[attr]), attr
        else:
            assert ours is getattr(gradax, attr), attr
    for attr in left_out:
        with pytest.raises(AttributeError):
            getattr(shim, attr)


def test_import_gradax_does_not_load_the_shims():
    code = (
        "import sys, gradax\n"
        "print(sorted(m for m in sys.modules if m.startswith('gradax._src')))\n"
        "import gradax._src.base\n"
        "print(gradax._src.base.EmptyState is gradax.EmptyState)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert out[:2] == ["[]", "True"]


def test_attribute_path_after_a_bare_import():
    """``optax._src.base.X`` after only ``import optax``, switched to gradax."""
    code = (
        "import gradax as optax\n"
        "print(optax._src.base.GradientTransformation is optax.GradientTransformation)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert out[0] == "True"


def test_package_attributes_and_missing_modules():
    import gradax._src as src

    assert src.utils is importlib.import_module("gradax._src.utils")
    assert set(MODULES) <= set(dir(src))
    with pytest.raises(AttributeError):
        src.clipping  # noqa: B018
    # Modules optax 0.2.8 no longer has are not here either.
    for gone in ("clipping", "loss", "state_utils", "privacy", "second_order"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(f"gradax._src.{gone}")
    with pytest.raises(ImportError):
        exec("from gradax._src.utils import canonicalize_key", {})


def test_the_ademamix_notebook_idiom():
    from gradax._src import base

    def step(
        tx: base.GradientTransformation,
        state: base.OptState,
        grads: base.Updates,
        params: base.Params,
    ) -> tuple[base.Updates, base.OptState]:
        return tx.update(grads, state, params)

    hints = typing.get_type_hints(step, localns={"base": base})
    assert hints["tx"] is gradax.GradientTransformation
    assert hints["state"] is typing.Any

    tx = gradax.contrib.ademamix(learning_rate=0.003, b1=0.99, b2=0.999, b3=0.9999)
    assert isinstance(tx, base.GradientTransformation)
    assert isinstance(gradax.adam(0.1), base.GradientTransformationExtraArgs)
    params = jnp.array([-3.0, 5.0])
    updates, _ = step(tx, tx.init(params), jnp.array([1.0, -1.0]), params)
    assert updates.shape == params.shape
    assert base.EmptyState() == gradax.EmptyState()


def test_a_hand_written_transformation_in_optax_style():
    """``base.GradientTransformation(init_fn, update_fn)`` with ``EmptyState``."""
    from gradax._src import base, combine, transform, update

    def init_fn(params: base.Params) -> base.EmptyState:
        del params
        return base.EmptyState()

    def update_fn(updates, state, params=None):
        del params
        return jax.tree.map(lambda g: 2.0 * g, updates), state

    double = base.GradientTransformation(init_fn, update_fn)
    tx = combine.chain(double, transform.scale(-0.5))
    params = {"w": jnp.ones(3)}
    state = tx.init(params)
    assert state[0] == base.EmptyState()
    updates, _ = tx.update({"w": jnp.full(3, 0.25)}, state)
    new = update.apply_updates(params, updates)
    np.testing.assert_array_equal(new["w"], jnp.full(3, 0.75))
    adam_state = gradax.adam(0.1).init(params)[0]
    assert isinstance(adam_state, transform.ScaleByAdamState)


@pytest.mark.filterwarnings("ignore:optax.global_norm is deprecated")
def test_utils_and_numerics_give_optax_numbers():
    from optax._src import linear_algebra as o_linear_algebra
    from optax._src import numerics as o_numerics
    from optax._src import utils as o_utils

    from gradax._src import linear_algebra, numerics, utils

    for dtype in (None, jnp.float64, jnp.bfloat16, "float32", int):
        assert utils.canonicalize_dtype(dtype) == o_utils.canonicalize_dtype(dtype)

    top = jnp.asarray(np.iinfo(np.int32).max, jnp.int32)
    for count in (jnp.asarray(3, jnp.int32), top):
        ours = numerics.safe_int32_increment(count)
        theirs = o_numerics.safe_int32_increment(count)
        assert ours.dtype == theirs.dtype and int(ours) == int(theirs)

    # Exact: both take the same norm of the same array, and the same floor.
    x = jnp.array([[3.0, -4.0], [1e-3, 2.0]])
    for fn in ("safe_norm", "safe_root_mean_squares"):
        for v in (x, jnp.zeros((2, 2))):
            ours = jax.value_and_grad(lambda v, f=fn: getattr(numerics, f)(v, 0.1))
            theirs = jax.value_and_grad(lambda v, f=fn: getattr(o_numerics, f)(v, 0.1))
            (a, ga), (b, gb) = ours(v), theirs(v)
            np.testing.assert_array_equal(a, b)
            np.testing.assert_array_equal(ga, gb)
    np.testing.assert_array_equal(
        numerics.safe_norm(x, 0.0, axis=1), o_numerics.safe_norm(x, 0.0, axis=1)
    )
    z = jnp.array([1.0 + 2.0j, -3.0j])
    np.testing.assert_array_equal(numerics.abs_sq(z), o_numerics.abs_sq(z))

    tree = {"a": x, "b": [jnp.arange(3.0)]}
    np.testing.assert_array_equal(
        linear_algebra.global_norm(tree), o_linear_algebra.global_norm(tree)
    )

    grad = jax.grad(lambda v: jnp.sum(utils.scale_gradient(v, 0.5) ** 2))(x)
    o_grad = jax.grad(lambda v: jnp.sum(o_utils.scale_gradient(v, 0.5) ** 2))(x)
    np.testing.assert_array_equal(grad, o_grad)

    key = jax.random.key(0)
    loc, log_scale = jnp.array([0.5, -1.0]), jnp.array([0.1, -0.3])
    ours, theirs = (
        utils.multi_normal(loc, log_scale),
        o_utils.multi_normal(loc, log_scale),
    )
    assert isinstance(ours, utils.MultiNormalDiagFromLogScale)
    np.testing.assert_array_equal(ours.sample((4,), key), theirs.sample((4,), key))
