"""Muon's routing as docs/muon.md documents it, in each framework.

The snippets of the guide's "Routing in each framework" section run here as
they are written, each through its framework's optimizer wrapper; then each
framework runs the three forms of the routing (a function calling
``muon_labels``, the tree ``muon_labels`` returns, a tree built by hand) and
they must agree, with the report printed once.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import equinox as eqx
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from flax.training import train_state

import gradax
from gradax.combinators.masked import MaskedNode

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "muon.md"
HEADER = re.compile(r"^path\s+shape\s+group\s+matrices\s+scale$", re.M)
EXCLUDE = "embed|head"


def framework_snippets() -> dict[str, str]:
    """The guide's snippet for each framework, by its heading."""
    text = GUIDE.read_text()
    start = text.index("## Routing in each framework")
    end = text.index("\n## ", start + 1) if "\n## " in text[start + 1 :] else None
    section = text[start:end]
    parts = re.split(r"^### (.+)$", section, flags=re.M)
    snippets = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        blocks = re.findall(r"^```python\n(.*?)^```$", body, re.S | re.M)
        assert len(blocks) == 1, f"{name}: expected one python block"
        snippets[name.strip()] = blocks[0]
    return snippets


def report_rows(out: str) -> dict[str, str]:
    """Path -> group, from a printed report."""
    rows = {}
    for line in out.splitlines():
        fields = line.split()
        groups = [f for f in fields[1:] if f in ("muon", "adam")]
        if groups:
            rows[fields[0]] = groups[0]
    return rows


def test_the_guide_has_a_snippet_for_each_framework():
    assert set(framework_snippets()) == {
        "Plain JAX",
        "flax nnx",
        "flax linen",
        "equinox",
    }


@pytest.mark.parametrize("name", ["Plain JAX", "flax nnx", "flax linen", "equinox"])
def test_documented_snippet_runs_and_reports_once(name):
    code = framework_snippets()[name]
    namespace = {"__name__": f"muon_guide_{name}"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, f"docs/muon.md ({name})", "exec"), namespace)
    printed = out.getvalue()
    assert len(HEADER.findall(printed)) == 1, printed
    rows = report_rows(printed)
    muon_rows = [path for path, group in rows.items() if group == "muon"]
    assert len(muon_rows) == 1 and "hidden" in muon_rows[0], printed
    assert "['hidden']['bias']" in rows or ".hidden.bias" in rows
    # No path shows an nnx variable's ".value".
    assert not any(path.endswith(".value") for path in rows), printed
    assert np.isfinite(float(namespace["loss"]))


# -- each framework with each form of the routing ------------------------------


def loss_of(logits, tokens):
    return gradax.softmax_cross_entropy_with_integer_labels(logits, tokens).mean()


TOKENS = jnp.arange(8)
STEPS = 2


def plain_params():
    k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
    return {
        "embed": {"embedding": jax.random.normal(k1, (50, 16))},
        "hidden": {
            "kernel": jax.random.normal(k2, (16, 24)) / 4,
            "bias": jnp.zeros(24),
        },
        "head": {"kernel": jax.random.normal(k3, (24, 50)) / 4, "bias": jnp.zeros(50)},
    }


def run_plain(routing_for):
    params = plain_params()

    def loss_fn(p):
        x = p["embed"]["embedding"][TOKENS]
        x = jax.nn.gelu(x @ p["hidden"]["kernel"] + p["hidden"]["bias"])
        return loss_of(x @ p["head"]["kernel"] + p["head"]["bias"], TOKENS)

    tx = gradax.muon(0.02, muon_weight_dimension_numbers=routing_for(params))
    state = tx.init(params)

    @jax.jit
    def step(params, state):
        grads = jax.grad(loss_fn)(params)
        updates, state = tx.update(grads, state, params)
        return gradax.apply_updates(params, updates), state

    for _ in range(STEPS):
        params, state = step(params, state)
    return params["hidden"]["kernel"], params["head"]["kernel"]


class NnxModel(nnx.Module):
    def __init__(self, rngs):
        self.embed = nnx.Embed(50, 16, rngs=rngs)
        self.hidden = nnx.Linear(16, 24, rngs=rngs)
        self.head = nnx.Linear(24, 50, rngs=rngs)

    def __call__(self, tokens):
        return self.head(jax.nn.gelu(self.hidden(self.embed(tokens))))


def run_nnx(routing_for):
    model = NnxModel(nnx.Rngs(0))
    spec = routing_for(nnx.state(model, nnx.Param))
    optimizer = nnx.Optimizer(
        model, gradax.muon(0.02, muon_weight_dimension_numbers=spec), wrt=nnx.Param
    )

    @nnx.jit
    def step(model, optimizer):
        grads = nnx.grad(lambda m: loss_of(m(TOKENS), TOKENS))(model)
        optimizer.update(model, grads)

    for _ in range(STEPS):
        step(model, optimizer)
    return model.hidden.kernel[...], model.head.kernel[...]


class LinenModel(nn.Module):
    @nn.compact
    def __call__(self, tokens):
        x = nn.Embed(50, 16, name="embed")(tokens)
        x = jax.nn.gelu(nn.Dense(24, name="hidden")(x))
        return nn.Dense(50, name="head")(x)


def run_linen(routing_for):
    model = LinenModel()
    params = model.init(jax.random.key(0), TOKENS)["params"]
    tx = gradax.muon(0.02, muon_weight_dimension_numbers=routing_for(params))
    state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=tx)

    @jax.jit
    def step(state):
        grads = jax.grad(
            lambda p: loss_of(state.apply_fn({"params": p}, TOKENS), TOKENS)
        )(state.params)
        return state.apply_gradients(grads=grads)

    for _ in range(STEPS):
        state = step(state)
    return state.params["hidden"]["kernel"], state.params["head"]["kernel"]


class EqxModel(eqx.Module):
    embed: eqx.nn.Embedding
    hidden: eqx.nn.Linear
    head: eqx.nn.Linear

    def __init__(self, key):
        k1, k2, k3 = jax.random.split(key, 3)
        self.embed = eqx.nn.Embedding(50, 16, key=k1)
        self.hidden = eqx.nn.Linear(16, 24, key=k2)
        self.head = eqx.nn.Linear(24, 50, key=k3)

    def __call__(self, token):
        return self.head(jax.nn.gelu(self.hidden(self.embed(token))))


def run_equinox(routing_for):
    model = EqxModel(jax.random.key(0))
    params = eqx.filter(model, eqx.is_inexact_array)
    tx = gradax.muon(0.02, muon_weight_dimension_numbers=routing_for(params))
    state = tx.init(params)

    @eqx.filter_jit
    def step(model, state):
        grads = eqx.filter_grad(lambda m: loss_of(jax.vmap(m)(TOKENS), TOKENS))(model)
        params = eqx.filter(model, eqx.is_inexact_array)
        updates, state = tx.update(grads, state, params)
        return eqx.apply_updates(model, updates), state

    for _ in range(STEPS):
        model, state = step(model, state)
    return model.hidden.weight, model.head.weight


# Each framework's matrices: flax and plain JAX store (in, out); equinox's
# Linear stores (out, in).
def layout(framework):
    dims = gradax.MuonDimensionNumbers(1, 0) if framework == "equinox" else None

    def matrices(params):
        if dims is None:
            return None
        return jax.tree.map(lambda x: dims if x.ndim == 2 else None, params)

    return matrices, dims or gradax.MuonDimensionNumbers(0, 1)


def by_hand(params, dims):
    """A routing tree written without muon_labels: the hidden kernel only."""

    def rule(path, x):
        text = jax.tree_util.keystr(path)
        return dims if "hidden" in text and x.ndim == 2 else None

    return jax.tree_util.tree_map_with_path(rule, params)


RUNS = {
    "plain": run_plain,
    "nnx": run_nnx,
    "linen": run_linen,
    "equinox": run_equinox,
}


@pytest.mark.parametrize("framework", sorted(RUNS))
def test_function_tree_and_hand_written_routing_agree(framework):
    matrices, dims = layout(framework)
    forms = {
        "function": lambda source: (
            lambda p: gradax.muon_labels(p, matrices(p), exclude=EXCLUDE)[1]
        ),
        "tree": lambda source: gradax.muon_labels(
            source, matrices(source), exclude=EXCLUDE
        )[1],
        "by hand": lambda source: by_hand(source, dims),
    }
    results = {}
    for form, routing_for in forms.items():
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            results[form] = RUNS[framework](routing_for)
        reports = len(HEADER.findall(out.getvalue()))
        assert reports == (0 if form == "by hand" else 1), (form, out.getvalue())
        if form != "by hand":
            rows = report_rows(out.getvalue())
            assert [p for p, g in rows.items() if g == "muon"] == [
                ".hidden.weight" if framework == "equinox" else "['hidden']['kernel']"
            ]
    for form in ("tree", "by hand"):
        for got, want in zip(results[form], results["function"], strict=True):
            np.testing.assert_array_equal(got, want, err_msg=f"{framework}: {form}")
    # The head is on AdamW: an Adam step moves every entry by about the
    # learning rate; Muon's orthogonalized step would not.
    start = {
        "plain": lambda: plain_params()["head"]["kernel"],
        "nnx": lambda: NnxModel(nnx.Rngs(0)).head.kernel[...],
        "linen": lambda: LinenModel().init(jax.random.key(0), TOKENS)["params"]["head"][
            "kernel"
        ],
        "equinox": lambda: EqxModel(jax.random.key(0)).head.weight,
    }[framework]()
    moved = np.abs(np.asarray(results["function"][1]) - np.asarray(start))
    assert np.median(moved) > 0.02  # two steps of ~0.02 each, mostly aligned


def test_report_prints_at_init_not_at_each_update():
    params = plain_params()
    tx = gradax.muon(
        0.02,
        muon_weight_dimension_numbers=lambda p: gradax.muon_labels(p, exclude=EXCLUDE)[
            1
        ],
    )
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        state = tx.init(params)
        for _ in range(3):  # not jitted: the routing runs at every update
            _, state = tx.update(params, state, params)
    assert len(HEADER.findall(out.getvalue())) == 1


def test_muon_labels_on_a_masked_tree_skips_the_hidden_leaves():
    # What a routing function sees inside a user's own partition or masked.
    params = {"embed": MaskedNode(), "w": jnp.zeros((4, 8)), "b": jnp.zeros(8)}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        labels, dims = gradax.muon_labels(params, exclude="embed")
    assert labels == {"embed": MaskedNode(), "w": "muon", "b": "adam"}
    assert dims["embed"] == MaskedNode() and dims["b"] is None
    assert report_rows(out.getvalue()) == {"['b']": "adam", "['w']": "muon"}


def test_muon_labels_on_an_equinox_filtered_tree_keep_its_nones():
    # eqx.filter(model, eqx.is_inexact_array): None where a field is no
    # array. Its label is None too (it was "adam"), as jax.tree.map gives.
    params = {"act": None, "w": jnp.zeros((4, 8)), "b": jnp.zeros(8)}
    labels, dims = gradax.muon_labels(params, print_report=False)
    assert labels == {"act": None, "w": "muon", "b": "adam"}
    assert dims["act"] is None and dims["b"] is None


def test_routing_function_inside_a_users_partition():
    params = plain_params()

    def routing(p):
        return gradax.muon_labels(p, exclude=EXCLUDE, print_report=False)[1]

    tx = gradax.partition(
        {
            "muon": gradax.scale_by_muon(weight_dimension_numbers=routing),
            "sgd": gradax.sgd(0.1),
        },
        lambda p: jax.tree_util.tree_map_with_path(
            lambda path, x: "muon" if x.ndim == 2 else "sgd", p
        ),
    )
    state = tx.init(params)
    updates, _ = jax.jit(tx.update)(params, state, params)
    assert updates["hidden"]["kernel"].shape == (16, 24)


def test_a_routing_function_returning_a_function_is_refused():
    params = plain_params()
    tx = gradax.muon(0.02, muon_weight_dimension_numbers=lambda p: lambda q: None)
    with pytest.raises(TypeError, match="returned a function"):
        tx.init(params)


def test_an_equinox_module_is_a_tree_not_a_function():
    # Modules define __call__; as a mask or labels they are trees.
    model = EqxModel(jax.random.key(0))
    params = eqx.filter(model, eqx.is_inexact_array)
    mask = jax.tree.map(lambda x: x.ndim == 2, params)
    tx = gradax.masked(gradax.sgd(1.0), mask)
    updates, _ = tx.update(params, tx.init(params), params)
    np.testing.assert_array_equal(updates.hidden.weight, -params.hidden.weight)
    np.testing.assert_array_equal(updates.hidden.bias, params.hidden.bias)
