"""Muon: optax's numbers, the other conventions, routing, and transformations."""

from __future__ import annotations

import inspect
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax_versions import explicit_axes, set_mesh, shard_map

import gradax
from gradax.orthogonal import routing


def tree():
    keys = jax.random.split(jax.random.key(0), 5)
    return {
        "w1": jax.random.normal(keys[0], (8, 16)),
        "w2": jax.random.normal(keys[1], (16, 4)),
        "b": jax.random.normal(keys[2], (4,)),
        "s": jnp.asarray(0.5),
        "t": jax.random.normal(keys[3], (2, 3, 4)),
    }


def trajectory(tx, params, steps=10):
    def body(carry, i):
        p, s = carry
        g = jax.tree.map(lambda x: jnp.sin(x + i), p)
        u, s = tx.update(g, s, p)
        return (gradax.apply_updates(p, u), s), None

    (params, _), _ = jax.lax.scan(body, (params, tx.init(params)), jnp.arange(steps))
    return params


def close(a, b, atol=1e-6, rtol=1e-5):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(x, y, atol=atol, rtol=rtol)


OPTAX_OPTIONS = [
    {},
    dict(weight_decay=0.1),
    dict(nesterov=False),
    dict(ns_coeffs="dion"),
    dict(ns_steps=3),
    dict(beta=0.9, eps=1e-6),
    dict(consistent_rms=0.2),
    dict(adaptive=True),
    dict(preconditioning="aol"),
    dict(preconditioning="schatten"),
    dict(mu_dtype=jnp.bfloat16),
    dict(adam_b1=0.8, adam_b2=0.99, adam_eps_root=1e-9),
    dict(adam_learning_rate=0.003, adam_weight_decay=0.01),
    dict(
        weight_decay=0.1,
        weight_decay_mask={"w1": True, "w2": False, "b": False, "s": False, "t": False},
    ),
    dict(
        muon_weight_dimension_numbers={
            "w1": gradax.MuonDimensionNumbers(),
            "w2": None,
            "b": None,
            "s": None,
            "t": gradax.MuonDimensionNumbers(1, 2),
        }
    ),
]


@pytest.mark.parametrize(
    "options", OPTAX_OPTIONS, ids=lambda o: "-".join(o) or "defaults"
)
def test_muon_equals_optax(options):
    theirs_options = dict(options)
    if "muon_weight_dimension_numbers" in options:
        dims = options["muon_weight_dimension_numbers"]
        theirs_options["muon_weight_dimension_numbers"] = {
            k: None if d is None else optax.contrib.MuonDimensionNumbers(*d)
            for k, d in dims.items()
        }
    ours = jax.jit(lambda p: trajectory(gradax.muon(0.02, **options), p))(tree())
    theirs = jax.jit(
        lambda p: trajectory(optax.contrib.muon(0.02, **theirs_options), p)
    )(tree())
    # Two programs: 1-ulp differences pass through ten Newton-Schulz
    # iterations, whose quintic has slope 3.4445 at zero (see
    # test_conformance.matrix_function_atol). Seen: 7.5e-6 on parameters of
    # size ~1.4 with adaptive=True under the suite's compile options; a wrong
    # convention is off by 1e-3 or more.
    close(ours, theirs, atol=2e-5)


@pytest.mark.parametrize("preconditioning", ["aol", "schatten"])
def test_first_step_floor_ignores_eps_as_optax_does(preconditioning):
    # optax floors AOL's row sums and the Schatten-4 norm at 1e-8 whatever
    # eps is; with gradients of 1e-5 an eps of 1e-3 there moved the update by
    # 2e-2. One update each, same tolerance as above.
    params = {"w": jax.random.normal(jax.random.key(0), (16, 24))}
    grads = {"w": 1e-5 * jax.random.normal(jax.random.key(1), (16, 24))}

    def first_update(lib):
        tx = lib.contrib.muon(0.1, eps=1e-3, preconditioning=preconditioning)
        return jax.jit(tx.update)(grads, tx.init(params), params)[0]

    close(first_update(gradax), first_update(optax), atol=2e-5)


def test_scale_by_muon_equals_optax_on_stacked_weights():
    dims = gradax.MuonDimensionNumbers(1, 2)
    params = {"t": jax.random.normal(jax.random.key(1), (3, 6, 10))}
    ours = jax.jit(
        lambda p: trajectory(gradax.scale_by_muon(weight_dimension_numbers=dims), p)
    )(params)
    theirs = jax.jit(
        lambda p: trajectory(
            # optax only accepts a tree of dimension numbers here.
            optax.contrib.scale_by_muon(
                weight_dimension_numbers={"t": optax.contrib.MuonDimensionNumbers(1, 2)}
            ),
            p,
        )
    )(params)
    close(ours, theirs, atol=2e-5)


# --- Other conventions ----------------------------------------------------------
# torch.optim.Muon, KellerJordan, Moonlight and Keras, both groups: see
# tests/orthogonal/test_muon_conventions.py.


def test_cautious_weight_decay_only_where_signs_agree():
    params = {"w": jnp.array([[1.0, -1.0], [1.0, -1.0]])}
    grads = {"w": jnp.array([[1.0, 1.0], [-1.0, -1.0]])}
    plain = gradax.muon(0.1, weight_decay=0.5, beta=0.0, nesterov=False)
    cautious = gradax.muon(
        0.1, weight_decay=0.5, beta=0.0, nesterov=False, cautious_weight_decay=True
    )
    u_plain, _ = plain.update(grads, plain.init(params), params)
    u_cautious, _ = cautious.update(grads, cautious.init(params), params)
    direction = u_plain["w"] + 0.1 * 0.5 * params["w"]  # -lr * scale * O
    # arXiv:2510.12402: decay where update and weight agree (>= 0).
    agree = (-direction) * params["w"] >= 0
    expected = jnp.where(agree, u_plain["w"], direction)
    np.testing.assert_allclose(u_cautious["w"], expected, atol=1e-6)
    assert bool(agree.any()) and not bool(agree.all())


def test_polar_express_and_gram_options_run():
    params = tree()
    for kw in (
        dict(ns_coeffs="polar_express"),
        dict(method="gram"),
        dict(precision="bfloat16"),
    ):
        out = trajectory(gradax.muon(0.02, **kw), params, 3)
        assert all(bool(jnp.isfinite(x).all()) for x in jax.tree.leaves(out))


# --- Routing --------------------------------------------------------------------


def test_auto_routing_treats_stacked_weights_as_separate_matrices():
    stacked = jax.random.normal(jax.random.key(4), (3, 8, 12))
    tx = gradax.muon(0.02, muon_weight_dimension_numbers="auto")
    updates, _ = tx.update({"t": stacked}, tx.init({"t": stacked}), {"t": stacked})
    for i in range(3):
        one = gradax.muon(0.02)
        u, _ = one.update(
            {"w": stacked[i]}, one.init({"w": stacked[i]}), {"w": stacked[i]}
        )
        np.testing.assert_allclose(updates["t"][i], u["w"], atol=1e-6)


def test_auto_routing_flattens_conv_kernels():
    kernel = jax.random.normal(jax.random.key(5), (3, 3, 4, 8))
    tx = gradax.muon(0.02, muon_weight_dimension_numbers="auto")
    updates, _ = tx.update({"k": kernel}, tx.init({"k": kernel}), {"k": kernel})
    flat = kernel.reshape(36, 8)
    ref = gradax.muon(0.02)
    u, _ = ref.update({"w": flat}, ref.init({"w": flat}), {"w": flat})
    np.testing.assert_allclose(updates["k"].reshape(36, 8), u["w"], atol=1e-6)


def test_muon_labels_report(capsys):
    params = {"embed": jnp.zeros((10, 4)), "w": jnp.zeros((4, 8)), "b": jnp.zeros(8)}
    labels, dims = gradax.muon_labels(params, exclude="embed")
    assert labels == {"embed": "adam", "w": "muon", "b": "adam"}
    report = capsys.readouterr().out
    assert "['w']" in report and "1.414" in report
    rows = {line.split()[0]: line.split() for line in report.splitlines()[1:]}
    assert rows["['b']"][-3:] == ["adam", "-", "-"] and "muon" in rows["['w']"]
    tx = gradax.muon(0.02, muon_weight_dimension_numbers=dims)
    state = tx.init(params)
    assert state.inner_states["muon"].inner_state[0].mu["embed"] == gradax.MaskedNode()


def test_embedding_routed_to_muon_warns_once():
    routing._warned.clear()
    params = {"tok_embed": jnp.zeros((10, 4)), "w": jnp.zeros((4, 8))}
    tx = gradax.muon(0.02)
    with pytest.warns(UserWarning, match=r"tok_embed.*muon_labels"):
        tx.init(params)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tx.init(params)


def test_one_state_buffer_per_matrix():
    params = {"w": jnp.zeros((16, 32)), "v": jnp.zeros((16, 64))}
    state = gradax.muon(0.02).init(params)
    # Besides the momenta: counts, and the (3,) coefficients optax keeps.
    big = [x for x in jax.tree.leaves(state) if x.size > 3]
    assert sum(x.size for x in big) == sum(p.size for p in params.values())


# --- Under JAX transformations ----------------------------------------------------


def test_schedule_learning_rate_and_jit_argument():
    schedule = gradax.cosine_decay_schedule(0.02, 10)
    ours = jax.jit(lambda p: trajectory(gradax.muon(schedule), p))(tree())
    theirs = jax.jit(lambda p: trajectory(optax.contrib.muon(schedule), p))(tree())
    close(ours, theirs)
    traces = []

    @jax.jit
    def step(tx, p, s):
        traces.append(None)
        u, s = tx.update(p, s, p)
        return gradax.apply_updates(p, u), s

    p = tree()
    s = gradax.muon(0.02).init(p)
    for lr in (0.02, 0.01):
        p, s = step(gradax.muon(lr), p, s)
    assert len(traces) == 1


def test_vmap_over_independent_models():
    batch = jax.tree.map(lambda x: jnp.stack([x, 2 * x]), tree())
    tx = gradax.muon(0.02)
    states = jax.vmap(tx.init)(batch)
    updates, _ = jax.vmap(lambda g, s, p: tx.update(g, s, p))(batch, states, batch)
    single, _ = tx.update(tree(), tx.init(tree()), tree())
    close(jax.tree.map(lambda u: u[0], updates), single)


@explicit_axes
def test_shard_map_and_sharded_params():
    mesh = jax.make_mesh((8,), ("d",), axis_types=(jax.sharding.AxisType.Explicit,))
    spec = jax.sharding.PartitionSpec
    params = {"w": jax.random.normal(jax.random.key(6), (16, 24))}
    tx = gradax.muon(0.02)
    single, _ = jax.jit(tx.update)(params, tx.init(params), params)
    with set_mesh(mesh):
        sharded = jax.device_put(params, jax.NamedSharding(mesh, spec("d", None)))
        updates, _ = jax.jit(tx.update)(sharded, jax.jit(tx.init)(sharded), sharded)
    close(updates, single, atol=1e-5)

    @jax.jit
    def per_device(p):
        # Each device runs Muon on its own replica (built outside any trace).
        def local(p):
            u, _ = tx.update(p, tx.init(p), p)
            return u

        return shard_map(local, mesh=mesh, in_specs=spec(), out_specs=spec())(p)

    with set_mesh(mesh):
        replicated = per_device(params)
    close(replicated, single, atol=1e-5)


def test_bad_options_are_named():
    with pytest.raises(ValueError, match="preconditioning"):
        gradax.muon(0.02, preconditioning="qr")
    with pytest.raises(ValueError, match="momentum"):
        gradax.muon(0.02, momentum="heavy")
    with pytest.raises(ValueError, match="beta"):
        gradax.muon(0.02, beta=1.0)
    with pytest.raises(ValueError, match="weight_decay"):
        gradax.muon(0.02, weight_decay=-1.0)
    with pytest.raises(ValueError, match="ns_coeffs"):
        gradax.muon(0.02, ns_coeffs=np.ones((7, 3)), ns_steps=5)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(ns_steps=0), r"ns_steps must be an integer >= 1, got 0"),
        (dict(ns_steps=2.5), r"ns_steps must be an integer >= 1"),
        (dict(ns_coeffs="kellerr"), r"ns_coeffs must be one of 'keller'.*'kellerr'"),
        (dict(ns_coeffs=np.ones((2, 4))), r"ns_coeffs must be one of .*\(T, 3\)"),
        (dict(ns_coeffs=(1.0, np.nan, 1.0)), r"ns_coeffs must be .*finite"),
        (dict(eps=-1e-8), r"eps must be in \[0, inf\)"),
        (dict(adam_b2=1.0), r"adam_b2 must be in \[0, 1\)"),
        (dict(adam_eps=-1.0), r"adam_eps must be in \[0, inf\)"),
        (
            dict(adam_learning_rate=float("nan")),
            r"adam_learning_rate must be a finite real number",
        ),
        (dict(consistent_rms=-0.2), r"consistent_rms must be in \[0, inf\)"),
        (dict(method="fast"), r"method must be one of 'auto', 'ns', 'gram'"),
        (dict(precision="int8"), r"precision must be one of"),
        (dict(shape_scaling="max"), r"shape_scaling must be one of 'keller'"),
        (dict(distributed="yes"), r"distributed must be one of 'auto', True, False"),
    ],
)
def test_invalid_options_fail_at_construction_naming_the_argument(kwargs, message):
    # Each fails when the optimizer is built, not at the first update, and the
    # error names the user's argument (ns_steps, not orthogonalize's steps).
    for name in ("muon", "normuon", "adamuon", "dion2", "scale_by_muon"):
        fn = getattr(gradax, name)
        fields = inspect.signature(fn).parameters
        if not set(kwargs) <= set(fields):
            continue
        args = () if name.startswith("scale_by") else (0.02,)
        with pytest.raises(ValueError, match=message):
            fn(*args, **kwargs)


def test_muon_labels_names_a_bad_exclude_pattern():
    params = {"embed": jnp.zeros((10, 4)), "w": jnp.zeros((4, 8))}
    with pytest.raises(ValueError, match=r"exclude must be a valid regular .*'\(emb'"):
        gradax.muon_labels(params, exclude="(emb", print_report=False)
    with pytest.raises(ValueError, match="shape_scaling"):
        gradax.muon_labels(params, shape_scaling="max", print_report=False)


def test_options_reach_the_direction_of_every_variant():
    # Each option is passed on by name (no reflection): a changed option
    # shows in the direction that the optimizer builds.
    options = dict(
        ns_coeffs="you5",
        ns_steps=7,
        eps=1e-6,
        preconditioning="schatten",
        method="ns",
        precision="highest",
        distributed=False,
    )
    momentum = dict(beta=0.9, nesterov=False, momentum="sum", bias_correction=True)
    for name, extra in (
        ("muon", momentum),
        ("normuon", momentum),
        ("adamuon", momentum),
        ("dion2", {}),
    ):
        tx = getattr(gradax, name)(0.02, **options, **extra)
        # The direction heads the matrices' group of the parts it builds.
        parts = tx.parts_for({"w": jnp.zeros((4, 8))}, quiet=True)
        direction = parts.transforms["muon"].transforms[0]
        for key, value in {**options, **extra}.items():
            assert getattr(direction, key) == value, (name, key)
    # Each direction orthogonalizes itself with these options (the family's
    # one step, NewtonSchulz.orthogonalize_matrices): see
    # tests/orthogonal/test_family_contract.py.


def test_adam_argument_takes_any_transformation():
    params = {
        "t": jax.random.normal(jax.random.key(7), (2, 8, 16)),
        "b": jax.random.normal(jax.random.key(8), (16,)),
    }
    grads = jax.tree.map(lambda x: jnp.cos(3 * x), params)
    aux = optax.adam(0.01, b1=0.9, b2=0.95)  # an optax one, wrapped
    tx = gradax.muon(0.02, muon_weight_dimension_numbers="auto", adam=aux)
    default = gradax.muon(0.02, muon_weight_dimension_numbers="auto")

    def update(tx):
        return jax.jit(tx.update)(grads, tx.init(params), params)[0]

    ours = update(tx)
    alone, _ = aux.update(grads["b"], aux.init(params["b"]), params["b"])
    close(ours["b"], alone, atol=1e-7)
    close(ours["t"], update(default)["t"], atol=1e-7)  # matrices: unchanged
    # Stacked weights spread over a mesh: the same numbers.
    with set_mesh(jax.make_mesh((8,), ("d",))):
        close(update(tx), ours, atol=1e-5)


def test_adam_argument_replaces_the_adam_options():
    with pytest.raises(ValueError, match="adam_b1, adam_eps set the default"):
        gradax.muon(0.02, adam=gradax.adam(1e-3), adam_b1=0.8, adam_eps=1e-6)
    with pytest.raises(TypeError, match="adam must be a gradient transformation"):
        gradax.muon(0.02, adam="adamw")
    # Values equal to the defaults are no conflict.
    gradax.normuon(0.02, adam=gradax.adam(1e-3), adam_b1=0.9)
