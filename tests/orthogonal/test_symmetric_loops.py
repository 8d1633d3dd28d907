"""The symmetric products compile like the plain ones (issue 46).

The blocked products run as a loop over the upper tiles, and the symmetric
methods' Newton–Schulz steps as a loop over the steps, so the program holds
one `dot` per product of one step, whatever the number of blocks or steps
(it held one per block pair and step: 882 for three leaves of a GPT).
Counted in the lowered program, which is what XLA is handed to compile.
The branches of the looped Gram iteration (restart, first step of a run,
last step) are checked against the unrolled one in float64, with the bound
of tests/orthogonal/test_symmetric.py.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax_versions import enable_x64
from test_symmetric import float64_bound, well_conditioned

import gradax
from gradax.orthogonal import _symmetric as symmetric
from gradax.orthogonal.coefficients import resolve_coefficients
from gradax.orthogonal.newton_schulz import auto_method


def dots(method, shape, **options):
    """`dot_general`s in the lowered program of one orthogonalize call."""
    x = jax.ShapeDtypeStruct(shape, jnp.float32)
    fn = jax.jit(lambda x: gradax.orthogonalize(x, method=method, **options))
    return fn.lower(x).as_text().count("dot_general")


@pytest.mark.parametrize(
    "shape, plain, blocked",
    [
        ((512, 512), "ns", "symmetric"),
        ((2048, 2048), "ns", "symmetric"),
        ((2, 512, 2048), "gram", "gram_symmetric"),
        ((1024, 4096), "gram", "gram_symmetric"),
    ],
)
def test_blocked_methods_hold_no_more_dots_than_plain(shape, plain, blocked):
    m = min(shape[-2:])
    assert symmetric.cpu_blocks(m) > 1  # the blocks are there to count
    if jax.default_backend() != "cpu":
        pytest.skip("the CPU's blocked products are what is counted")
    limit = dots(plain, shape)
    for method in (blocked, "auto"):
        assert dots(method, shape) <= limit, method
    # Steps add no dots either: the loop body is traced once.
    assert dots(blocked, shape, steps=8, coefficients="polar_express") == dots(
        blocked, shape
    )


def test_dots_do_not_grow_with_the_blocks():
    if jax.default_backend() != "cpu":
        pytest.skip("the CPU's blocked products are what is counted")
    # 4 blocks of 128 rows against 16: the same program, larger.
    assert symmetric.cpu_blocks(512) == 4 and symmetric.cpu_blocks(2048) == 16
    assert dots("symmetric", (512, 512)) == dots("symmetric", (2048, 2048))


@pytest.fixture
def four_blocks(monkeypatch):
    """Small matrices cut into 4 blocks, so the loops run their tiles."""
    monkeypatch.setattr(symmetric, "cpu_blocks", lambda m: 4)


@pytest.mark.parametrize(
    "options",
    [
        dict(steps=1),
        dict(steps=2),  # no restart: it comes at the third step
        dict(steps=3),  # the restart is the last step
        dict(),
        dict(precondition="aol", normalization="none"),
        dict(precondition="aol", normalization="none", steps=3),
    ],
    ids=["1", "2", "3", "5", "aol", "aol-3"],
)
def test_looped_gram_iteration_takes_the_unrolled_branches(four_blocks, options):
    with enable_x64(True):
        x = jnp.asarray(well_conditioned((2, 40, 96), seed=4))
        got = gradax.orthogonalize(x, method="gram_symmetric", **options)
        want = gradax.orthogonalize(x, method="gram", **options)
    table, _ = resolve_coefficients("keller", options.get("steps"))
    bound = float64_bound(np.asarray(table, np.float64), 40, 96)
    diff = np.linalg.norm(np.asarray(got - want), ord=2, axis=(-2, -1)).max()
    assert diff <= bound, (diff, bound)


@pytest.mark.parametrize("shape", [(48, 48), (40, 96)], ids=["ns", "gram"])
def test_auto_blocks_x_xt_alone_within_the_bound(four_blocks, monkeypatch, shape):
    """ "auto" with its blocked X X^T (the rule widened to these sizes)."""
    from gradax.orthogonal import newton_schulz

    monkeypatch.setattr(newton_schulz, "AUTO_SYMMETRIC_MIN_ROWS", 1)
    monkeypatch.setattr(jax, "default_backend", lambda: "cpu")
    m, n = shape
    assert auto_method(m, n, jnp.float32, "cpu").endswith("symmetric")
    with enable_x64(True):
        # float64 is not what "auto" blocks: run float32's choice in float64.
        monkeypatch.setattr(
            newton_schulz,
            "auto_method",
            lambda m, n, dtype, backend: auto_method(m, n, jnp.float32, backend),
        )
        x = jnp.asarray(well_conditioned(shape, seed=5))
        got = gradax.orthogonalize(x)
        want = gradax.orthogonalize(x, method="gram" if n >= 2 * m else "ns")
    table, _ = resolve_coefficients("keller", None)
    bound = float64_bound(np.asarray(table, np.float64), m, n)
    assert np.linalg.norm(np.asarray(got - want), ord=2) <= bound


def test_auto_rule():
    f32 = jnp.float32
    # 512 and 768 rows (the GPT trees' matrices): nothing saved, plain.
    assert auto_method(512, 512, f32, "cpu") == "ns"
    assert auto_method(768, 3072, f32, "cpu") == "gram"
    assert auto_method(1024, 1024, f32, "cpu") == "symmetric"
    assert auto_method(1024, 16384, f32, "cpu") == "gram_symmetric"
    assert auto_method(1024, 50257, f32, "cpu") == "gram"  # rows read twice
