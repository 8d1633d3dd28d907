"""The Muon family's one contract (gradax/orthogonal/_options.py).

Every member that orthogonalizes runs the iterations that
``newton_schulz_table(ns_coeffs, ns_steps)`` gives, through one step, with
the options under their user-facing names; a member that leaves out an
option its base requires fails when its class is created.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradax
from gradax._pytree import AbstractField
from gradax.orthogonal import _options as options
from gradax.orthogonal import newton_schulz
from gradax.orthogonal._options import MomentumOptions, NewtonSchulzOptions
from gradax.orthogonal.coefficients import newton_schulz_table

TWO_ROWS = ((3.0, -3.2, 1.2), (2.0, -1.5, 0.5))


def _directions(ns: dict[str, Any]) -> dict[str, Any]:
    momentum = dict(beta=0.9, nesterov=False)
    return {
        "scale_by_muon": gradax.scale_by_muon(**ns, **momentum),
        "scale_by_normuon": gradax.scale_by_normuon(**ns, **momentum),
        "scale_by_adamuon": gradax.scale_by_adamuon(**ns, **momentum),
        "scale_by_dion2": gradax.scale_by_dion2(**ns, fraction=1.0),
        "scale_by_scion": gradax.scale_by_scion(**ns, beta=0.0, lmo="spectral"),
        "muon": gradax.muon(0.1, **ns),
        "normuon": gradax.normuon(0.1, **ns),
        "adamuon": gradax.adamuon(0.1, **ns),
        "dion2": gradax.dion2(0.1, **ns, fraction=1.0),
        "scion": gradax.scion(0.1, **ns, lmo="spectral"),
    }


@pytest.mark.parametrize(
    "ns",
    [
        dict(ns_coeffs=TWO_ROWS, ns_steps=5),  # a table runs whole: 2 steps
        dict(ns_coeffs=(3.4445, -4.775, 2.0315), ns_steps=3),  # a row, 3 times
        dict(ns_coeffs="polar_express", ns_steps=4),
        dict(ns_coeffs="you5", ns_steps=7),
    ],
    ids=["two-row-table", "one-row", "polar-express", "preset"],
)
def test_every_member_runs_the_same_iterations(ns, monkeypatch):
    calls: list[tuple] = []

    def recording(x, **kwargs):
        coefficients = kwargs["coefficients"]
        if not isinstance(coefficients, str):
            coefficients = np.asarray(coefficients).tolist()
        calls.append((str(coefficients), kwargs["steps"], kwargs["eps"]))
        return newton_schulz.orthogonalize(x, **kwargs)

    monkeypatch.setattr(options, "orthogonalize", recording)
    params = {"w": jax.random.normal(jax.random.key(0), (6, 4))}
    grads = {"w": jax.random.normal(jax.random.key(1), (6, 4))}
    expected_coefficients, expected_steps = newton_schulz_table(
        ns["ns_coeffs"], ns["ns_steps"]
    )
    for name, tx in _directions(ns).items():
        calls.clear()
        tx.update(grads, tx.init(params), params)
        assert calls, f"{name} did not orthogonalize through the family's step"
        for coefficients, steps, eps in calls:
            assert steps == expected_steps, name
            assert eps == 1e-8, name
            if isinstance(expected_coefficients, str):
                assert coefficients == expected_coefficients, name
            else:
                assert coefficients == str([list(r) for r in expected_coefficients])


def test_the_one_rule():
    # optax's rule: a table runs whole, a row runs ns_steps times, a preset
    # runs ns_steps steps of its table.
    assert newton_schulz_table(TWO_ROWS, 5) == (TWO_ROWS, 2)
    assert newton_schulz_table((1.0, 2.0, 3.0), 4) == (((1.0, 2.0, 3.0),), 4)
    assert newton_schulz_table("you5", 7) == ("you5", 7)
    with pytest.raises(ValueError, match="2 rows but ns_steps is 1"):
        newton_schulz_table(TWO_ROWS, 1)
    # ... refused at construction by every member
    for make in (
        lambda: gradax.muon(0.1, ns_coeffs=TWO_ROWS, ns_steps=1),
        lambda: gradax.scale_by_scion(ns_coeffs=TWO_ROWS, ns_steps=1),
        lambda: gradax.dion2(0.1, ns_coeffs=TWO_ROWS, ns_steps=1),
    ):
        with pytest.raises(ValueError, match="must not have more rows than steps"):
            make()


def test_scion_spectral_oracle_is_muons_orthogonalization():
    # Same options, same matrix: Scion's spectral oracle (no momentum) is
    # Muon's orthogonalized matrix times Scion's shape factor sqrt(fan_out /
    # fan_in); both run the same program on the same input, so they agree to
    # float32 rounding of the final product (rtol 1e-6).
    g = jax.random.normal(jax.random.key(2), (8, 4))
    ns = dict(ns_coeffs=TWO_ROWS, ns_steps=5)
    scion = gradax.scale_by_scion(**ns, beta=0.0, lmo="spectral")
    muon = gradax.scale_by_muon(**ns, beta=0.0, nesterov=False)
    out_scion, _ = scion.update(g, scion.init(g))
    orthogonal = muon.orthogonalize_matrices(g)
    np.testing.assert_allclose(out_scion, orthogonal * np.sqrt(4 / 8), rtol=1e-6)


def test_a_member_must_declare_what_its_base_requires():
    with pytest.raises(TypeError, match="must declare 'eps'"):

        class _NoEps(NewtonSchulzOptions, gradax.GradientTransformation):
            ns_coeffs: Any = NewtonSchulzOptions.ns_coeffs.declare()
            ns_steps: int = NewtonSchulzOptions.ns_steps.declare()

    with pytest.raises(TypeError, match="beta must be declared"):

        class _OtherRange(MomentumOptions, gradax.GradientTransformation):
            beta: Any = gradax.declare.hyper(default=0.5, valid=gradax.declare.UNIT)

    class _Fine(MomentumOptions, gradax.GradientTransformation):
        beta: Any = MomentumOptions.beta.declare(default=0.5)

    assert _Fine().beta == 0.5
    assert isinstance(MomentumOptions.beta, AbstractField)


def test_momentum_step_is_shared():
    # normuon's direction and muon's keep the same momentum for the same
    # options: one method, MomentumOptions.momentum_step.
    g = {"w": jnp.arange(12.0).reshape(3, 4)}
    for nesterov in (False, True):
        kw = dict(beta=0.8, nesterov=nesterov, bias_correction=True)
        a = gradax.scale_by_muon(**kw)
        b = gradax.scale_by_normuon(**kw)
        sa, sb = a.init(g), b.init(g)
        for _ in range(2):
            _, sa = a.update(g, sa)
            _, sb = b.update(g, sb)
        np.testing.assert_array_equal(sa.mu["w"], sb.mu["w"])
