"""gradax._core.leaf_ops: lax's primitives where jnp's promotion changes nothing.

`arithmetic` picks, once for a tree, the operations a formula is written
with. Whatever it picks, the formula must give what the same formula gives
with Python's operators (the code before): the same dtype, weak type, shape
and bits, for every kind of leaf and coefficient the optimizers meet. The
comparison runs traced (one compiled program for all the cases) and
eagerly; a second test checks which operations each kind gets (lax's only
when traced).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradax._core.leaf_ops import LAX, PYTHON, arithmetic, cast

_KEYS = jax.random.split(jax.random.key(0), 5)


def _normal(index, shape=(3, 4), dtype=jnp.float32):
    return jax.random.normal(_KEYS[index], shape).astype(dtype)


# Trees of leaves, by name; the pairs below are mapped together.
TREES = {
    "f32": {"a": _normal(0), "b": _normal(1, (5,))},
    "f32_other": {"a": _normal(2), "b": _normal(3, (5,))},
    "f32_rank0": {"a": _normal(4, ())},
    "f32_single": {"a": _normal(2)},
    "bf16": {"a": _normal(0, dtype=jnp.bfloat16)},
    "f16": {"a": _normal(1, dtype=jnp.float16)},
    "c64": {"a": (_normal(0) + 1j * _normal(1)).astype(jnp.complex64)},
}
# Coefficients: Python numbers and scalars, as hyperparameters are.
COEFFICIENTS = {
    "float": 0.9,
    "one_minus": 1 - 0.9,  # 0.09999999999999998: rounds once to float32
    "int": 2,
    "zero": 0.0,
    "f32_scalar": jnp.array(0.3, jnp.float32),
    "weak_scalar": jnp.asarray(0.7),
    "bf16_scalar": jnp.array(0.5, jnp.bfloat16),
}


def _formulas(op, c, d, e):
    """Each optimizer's leaf formula, written with `op`."""
    return {
        "ema": lambda g, t: op.add(op.mul(c, op.power(g, 2)), op.mul(d, t)),
        "ratio": lambda m, v: op.div(m, op.add(op.sqrt(op.add(op.power(v, 2), e)), c)),
        "decay": lambda g, p: op.add(g, op.mul(c, p)),
        "scale": lambda g, _: op.sub(op.mul(c, g), op.mul(g, d)),
    }


def _cases(trees):
    """`{case: (result with arithmetic's choice, result with PYTHON)}`."""
    out = {}
    pairs = [("f32", "f32_other"), ("f32_rank0", "f32_rank0"), ("bf16", "bf16")]
    pairs += [("f16", "f16"), ("c64", "c64"), ("bf16", "f32_single")]
    for left, right in pairs:
        x, y = trees[left], trees[right]
        for c_name, c in COEFFICIENTS.items():
            for d_name, d in (("float", 0.9), ("int", 2)):
                chosen, ready = arithmetic((x, y), (c, d, 1e-8), exponent=2)
                mine = _formulas(chosen, *ready)
                theirs = _formulas(PYTHON, c, d, 1e-8)
                for formula in mine:
                    try:
                        expected = jax.tree.map(theirs[formula], x, y)
                    except TypeError:
                        continue  # jnp refuses the operands (strict promotion)
                    case = f"{formula}[{left}, {right}; {c_name}, {d_name}]"
                    out[case] = (jax.tree.map(mine[formula], x, y), expected)
    return out


def _describe(x):
    return (jnp.dtype(x.dtype).name, bool(x.weak_type), tuple(x.shape))


def _assert_same(results):
    wrong = []
    for case, (ours, theirs) in results.items():
        for mine, expected in zip(
            jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True
        ):
            if _describe(mine) != _describe(expected):
                wrong.append(f"{case}: {_describe(mine)} != {_describe(expected)}")
            elif np.asarray(mine).tobytes() != np.asarray(expected).tobytes():
                wrong.append(f"{case}: values differ\n{mine}\n{expected}")
    assert not wrong, "\n".join(wrong)


def test_traced_formulas_give_pythons_results_bit_for_bit():
    results = jax.jit(_cases)(TREES)
    assert len(results) > 100  # the crossing really ran
    _assert_same(results)


def test_eager_formulas_give_pythons_results_bit_for_bit():
    results = _cases({name: TREES[name] for name in TREES})
    assert len(results) > 100
    _assert_same(results)


F32 = {"w": jnp.ones((2, 3)), "b": jnp.ones(3)}


@pytest.mark.parametrize(
    "trees, coefficients, exponent, expected",
    [
        pytest.param((F32, F32), (0.9, 2), 2, LAX, id="f32-numbers"),
        pytest.param((F32,), (jnp.asarray(0.9),), 1, LAX, id="f32-weak-scalar"),
        pytest.param((F32,), (jnp.float32(0.9),), 1, LAX, id="f32-numpy-scalar"),
        pytest.param(
            (F32,), (jnp.array(0.9, jnp.bfloat16),), 1, PYTHON, id="other-dtype"
        ),
        pytest.param((F32,), (jnp.ones(3),), 1, PYTHON, id="array-coefficient"),
        pytest.param((F32,), (0.9,), 2.0, PYTHON, id="float-exponent"),
        pytest.param(
            (jax.tree.map(lambda x: x.astype(jnp.bfloat16), F32),),
            (0.9,),
            1,
            PYTHON,
            id="bf16-number",
        ),
        pytest.param(({"w": jnp.asarray(1.0)},), (0.9,), 1, PYTHON, id="weak-leaf"),
        pytest.param((F32, {"w": F32["w"]}), (), 1, PYTHON, id="other-tree"),
        pytest.param((F32, {"w": F32["b"], "b": F32["w"]}), (), 1, PYTHON, id="shape"),
        pytest.param(({},), (0.9,), 1, PYTHON, id="empty"),
    ],
)
def test_which_arithmetic_each_kind_of_operand_gets(
    trees, coefficients, exponent, expected
):
    seen = []

    def traced(trees):
        seen.append(arithmetic(trees, coefficients, exponent))
        return trees

    jax.make_jaxpr(traced)(trees)
    ((chosen, ready),) = seen
    assert chosen is expected
    if chosen is PYTHON:
        assert ready == tuple(coefficients)


def test_eager_and_constant_leaves_keep_pythons_operators():
    # Eagerly a jnp operator is one cached compiled call: faster than lax's.
    assert arithmetic((F32, F32), (0.9,))[0] is PYTHON
    # A NumPy tree closed over keeps NumPy's arithmetic where it meets one.
    constant = jax.tree.map(np.asarray, F32)
    seen = []
    jax.make_jaxpr(lambda x: seen.append(arithmetic((x, constant), (0.9,))))(F32)
    assert seen[0][0] is PYTHON


def test_cast_skips_only_what_changes_nothing():
    strong = jnp.ones(2)
    assert cast(strong, jnp.float32) is strong
    weak = jnp.asarray(1.0)
    assert not cast(weak, jnp.float32).weak_type
    assert cast(strong, jnp.bfloat16).dtype == jnp.bfloat16


def test_plain_trees_trace_the_primitives_straight():
    # The point of the module: no jnp function (a nested `jit` equation).
    def step(m, g):
        op, (c, d) = arithmetic((m, g), (0.9, 0.1), exponent=2)
        return op.add(op.mul(c, m), op.mul(d, op.power(g, 2)))

    x = jnp.ones((2, 3))
    eqns = jax.make_jaxpr(step)(x, x).jaxpr.eqns
    assert [e.primitive.name for e in eqns] == ["mul", "integer_pow", "mul", "add"]
