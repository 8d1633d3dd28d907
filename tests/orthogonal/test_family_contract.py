"""The Muon family's one contract (gradax/orthogonal/_fields.py, _steps.py).

Every member that orthogonalizes runs the iterations that
``newton_schulz_table(ns_coeffs, ns_steps)`` gives, through one step
(:class:`NewtonSchulz`), with the options under their user-facing names;
every member declares each shared option as gradax/orthogonal/_fields.py
declares it (same valid values, same default unless the member documents
another).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradax
from gradax._core.declarations import is_static, spec_of
from gradax.orthogonal import _fields as fields
from gradax.orthogonal import _steps, newton_schulz
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

    monkeypatch.setattr(_steps, "orthogonalize", recording)
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
        lambda: gradax.scion(0.1, ns_coeffs=TWO_ROWS, ns_steps=1),
        lambda: gradax.normuon(0.1, ns_coeffs=TWO_ROWS, ns_steps=1),
        lambda: gradax.muonh(0.1, ns_coeffs=TWO_ROWS, ns_steps=1),
        lambda: gradax.scale_by_muon(ns_coeffs=TWO_ROWS, ns_steps=1),
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
    orthogonal = muon.newton_schulz.orthogonalize_matrices(g, muon.eps)
    np.testing.assert_allclose(out_scion, orthogonal * np.sqrt(4 / 8), rtol=1e-6)


# Every class of the family, and the one Newton–Schulz configuration.
MEMBERS = (
    _steps.NewtonSchulz,
    gradax.scale_by_muon,
    gradax.muon,
    gradax.scale_by_normuon,
    gradax.normuon,
    gradax.scale_by_adamuon,
    gradax.adamuon,
    gradax.dion,
    gradax.scale_by_dion2,
    gradax.dion2,
    gradax.scale_by_scion,
    gradax.scion,
    gradax.muonh,
    gradax.adamh,
)

# The shared declarations, as gradax/orthogonal/_fields.py makes them.
POSITIONAL = (
    "ns_coeffs",
    "ns_steps",
    "eps",
    "beta",
    "mu_dtype",
    "weight_decay",
    "weight_decay_mask",
)
# The keyword-only options of Newton–Schulz, and those of Muon's momentum.
NEWTON_SCHULZ = {f.name: f for f in dataclasses.fields(_steps.NewtonSchulzOptions)}
# (NewtonSchulzMember adds no option: the NewtonSchulz it builds and holds.)
MOMENTUM = {
    f.name: f
    for f in dataclasses.fields(_steps.MuonOptions)
    if f.name not in {g.name for g in dataclasses.fields(_steps.NewtonSchulzMember)}
}
SHARED = (
    {name: fields.MUON.declared(name) for name in POSITIONAL}
    | NEWTON_SCHULZ
    | MOMENTUM
    | {
        "consistent_rms": fields.consistent_rms(None),
        "shape_scaling": fields.shape_scaling(None),
    }
)

# Defaults a member documents as its own (the option means the same).
OWN_DEFAULTS = {
    ("scale_by_dion2", "ns_coeffs"): "polar_express_fixed5",  # the reference's
    ("dion2", "ns_coeffs"): "polar_express_fixed5",
    ("scale_by_scion", "beta"): 0.9,  # Scion's momentum
    ("scion", "beta"): 0.9,
    ("dion", "shape_scaling"): "spectral",  # Dion's shape factor
    ("dion2", "shape_scaling"): "spectral",
    ("adamh", "nesterov"): False,  # Adam's
    ("muon", "shape_scaling"): None,
    ("muon", "consistent_rms"): None,
}
for _name in ("scale_by_normuon", "normuon", "scale_by_adamuon", "adamuon"):
    OWN_DEFAULTS[(_name, "bias_correction")] = False  # off, as in the papers
    OWN_DEFAULTS[(_name, "consistent_rms")] = 0.2  # the papers' update RMS


@pytest.mark.parametrize("cls", MEMBERS, ids=lambda c: c.__name__)
def test_every_member_declares_the_shared_options_as_declared(cls):
    # Each member declares its own fields, in its own order; an option it
    # shares is the one declaration of _fields.py: the same valid values,
    # leaf or static, and the same default unless documented above.
    declared = {f.name: f for f in dataclasses.fields(cls)}
    shared = [name for name in SHARED if name in declared]
    # NewtonSchulz holds no eps: its member passes its own (a leaf) at each call.
    needed = {"ns_coeffs", "ns_steps"} | (
        {"eps"} if cls is not _steps.NewtonSchulz else set()
    )
    assert needed <= set(shared) or cls in (
        gradax.dion,
        gradax.adamh,
    ), f"{cls.__name__} orthogonalizes without the Newton–Schulz options"
    for name in shared:
        mine, theirs = declared[name], SHARED[name]
        # What None means follows the default (a None default accepts None).
        ours, shared_spec = spec_of(mine), spec_of(theirs)
        if ours is None or shared_spec is None:
            assert ours is shared_spec, (cls.__name__, name)
        else:
            assert ours.valid == shared_spec.valid, (cls.__name__, name)
            assert ours.schedule == shared_spec.schedule, (cls.__name__, name)
            assert ours.array == shared_spec.array, (cls.__name__, name)
        assert is_static(mine) == is_static(theirs), (cls.__name__, name)
        default = OWN_DEFAULTS.get((cls.__name__, name), theirs.default)
        if name in ("consistent_rms", "shape_scaling") and (
            (cls.__name__, name) not in OWN_DEFAULTS
        ):
            continue  # no shared default: each member says its own
        assert mine.default == default, (cls.__name__, name, mine.default)


def test_the_keyword_options_are_declared_once():
    # A member takes the four Newton–Schulz keyword options together or none
    # (Scion: the defaults, no mesh), and then inherits them, and Muon's
    # momentum options, from the one base that declares them: the same
    # declaration (one Spec object each), keyword-only, never written again
    # (a member may give a plain default: NorMuon's bias_correction=False).
    for cls in MEMBERS:
        declared = {f.name: f for f in dataclasses.fields(cls)}
        taken = NEWTON_SCHULZ.keys() & declared.keys()
        assert taken in (set(), NEWTON_SCHULZ.keys()), cls.__name__
        if taken:
            assert issubclass(cls, _steps.NewtonSchulzOptions), cls.__name__
        if MOMENTUM.keys() <= declared.keys() and taken:
            assert issubclass(cls, _steps.MuonOptions), cls.__name__
        bases = NEWTON_SCHULZ | MOMENTUM if taken else {}
        for name in bases.keys() & declared.keys():
            mine, theirs = declared[name], bases[name]
            assert spec_of(mine) is spec_of(theirs), (cls.__name__, name)
            assert mine.kw_only and is_static(mine), (cls.__name__, name)


def test_a_member_without_the_newton_schulz_steps_is_refused():
    # The member's base requires what its NewtonSchulz is built from.
    with pytest.raises(TypeError, match="declares no eps, ns_steps"):

        class _half_member(_steps.NewtonSchulzMember, gradax.GradientTransformation):
            ns_coeffs: Any = fields.MUON.field()

            def update_state(self, updates, state, params=None, **extra_args):
                return updates, state


def test_momentum_step_is_shared():
    # normuon's direction and muon's keep the same momentum for the same
    # options: one function, gradax.orthogonal._steps.momentum_step.
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


def test_a_member_builds_its_newton_schulz_once_and_replace_rebuilds_it(
    monkeypatch,
):
    # A member builds its NewtonSchulz when it is constructed and holds it in
    # its tree definition: an update, jit's unflatten and a trace build none;
    # replace builds a new one, and the replaced options reach the iteration.
    built: list[Any] = []
    finish = _steps.NewtonSchulz._finish_init

    def counted(ns):
        built.append(ns)
        finish(ns)

    monkeypatch.setattr(_steps.NewtonSchulz, "_finish_init", counted)
    iterations: list[tuple] = []

    def recording(x, **kwargs):
        iterations.append((kwargs["method"], kwargs["steps"]))
        return newton_schulz.orthogonalize(x, **kwargs)

    monkeypatch.setattr(_steps, "orthogonalize", recording)
    params = {"w": jax.random.normal(jax.random.key(0), (6, 4)), "b": jnp.ones(4)}
    txs = [gradax.muon(rate, method="ns", ns_steps=3) for rate in (0.1, 0.2)]
    assert built, "muon builds its NewtonSchulz when it is constructed"
    assert txs[0].newton_schulz == _steps.NewtonSchulz(
        txs[0].ns_coeffs, 3, method="ns", owner="muon"
    )
    state = txs[0].init(params)  # builds the groups for this routing
    traces = []

    @jax.jit
    def step(tx, state):
        traces.append(None)
        return tx.update(params, state, params)

    built.clear()
    txs[0].update(params, state, params)
    for tx in txs:
        step(tx, state)
    assert len(traces) == 1  # a new learning rate: the same program
    assert not built, "an update or a trace built a NewtonSchulz"
    assert iterations and set(iterations) == {("ns", 3)}
    # Two equal members are equal, with equal hashes (jit's cache key).
    again = gradax.muon(0.1, method="ns", ns_steps=3)
    assert again == txs[0] and hash(again) == hash(txs[0])
    assert again != gradax.muon(0.1, method="gram", ns_steps=3)

    for tx, changes, expected in (
        (txs[0], dict(method="gram", ns_steps=2), ("gram", 2)),
        (
            gradax.scale_by_muon(method="ns"),
            dict(method="gram", ns_steps=2),
            ("gram", 2),
        ),
        # Scion's spectral oracle takes Muon's default method.
        (gradax.scale_by_scion(lmo="spectral"), dict(ns_steps=2), ("auto", 2)),
    ):
        built.clear()
        replaced = tx.replace(**changes)
        assert built, f"{type(tx).__name__}.replace built no NewtonSchulz"
        assert replaced.newton_schulz.ns_steps == 2
        iterations.clear()
        # (A direction orthogonalizes every leaf: the matrix alone.)
        matrix = {"w": params["w"]}
        replaced.update(matrix, replaced.init(matrix), matrix)
        assert set(iterations) == {expected}, type(tx).__name__


def test_a_gradient_reaches_eps_through_the_iteration():
    # eps is the member's leaf, given to the held NewtonSchulz at each call:
    # jax.grad with respect to the member reaches it. With no momentum
    # (beta=0) the direction is NS(g), so the gradient is that of
    # gradax.orthogonalize's eps; both run the same program (rtol 1e-5 for
    # the order of the float32 sums). eps=0.5 beside a norm near 5 makes it
    # far from zero.
    g = jax.random.normal(jax.random.key(3), (6, 4))
    weights = jax.random.normal(jax.random.key(4), (6, 4))
    tx = gradax.scale_by_muon(beta=0.0, eps=0.5, nesterov=False, method="ns")
    state = tx.init(g)

    def through_the_member(t):
        return jnp.sum(weights * t.update(g, state)[0])

    coefficients, steps = newton_schulz_table(tx.ns_coeffs, tx.ns_steps)

    def through_the_iteration(eps):
        o = gradax.orthogonalize(
            g, coefficients=coefficients, steps=steps, eps=eps, method="ns"
        )
        return jnp.sum(weights * o)

    ours = jax.jit(jax.grad(through_the_member))(tx).eps
    expected = jax.jit(jax.grad(through_the_iteration))(0.5)
    assert abs(float(expected)) > 1e-3
    np.testing.assert_allclose(ours, expected, rtol=1e-5)


def test_replace_refuses_the_newton_schulz_it_builds():
    # `newton_schulz` is made from the member's options at construction:
    # replacing it alone would be silently rebuilt from them (or disagree).
    for tx in (gradax.muon(0.1), gradax.scale_by_scion(lmo="spectral")):
        with pytest.raises(TypeError, match=r"cannot set \['newton_schulz'\]"):
            tx.replace(newton_schulz=tx.newton_schulz)
