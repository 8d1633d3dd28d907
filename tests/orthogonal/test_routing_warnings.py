"""Muon never silently orthogonalizes a likely input or output layer.

The default routing (optax's: every 2-D leaf to Muon) is kept; a leaf routed
to Muon that looks like the model's input or output layer, by its name or by a
width no other matrix has, gets one MuonRoutingWarning at the user's line,
with the `exclude=` that moves it to AdamW. Covered here: the three ways of
naming an MLP classifier's layers in each framework, a CNN, transformers in
flax linen, flax nnx and equinox (no false warnings on their hidden layers),
where the warning points, that it fires once, how it is silenced, and the
`exclude=` patterns that match nothing. docs/muon.md's table of what the
warning names is checked against these models.
"""

from __future__ import annotations

import inspect
import re
import warnings
from pathlib import Path

import equinox as eqx
import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
import pytest
from flax import nnx
from flax.training import train_state

import gradax
from gradax.combinators.masked import MaskedNode
from gradax.orthogonal import routing_checks
from gradax.orthogonal.routing_checks import MuonRoutingWarning

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "muon.md"
SUGGESTED = re.compile(r'exclude=r?"([^"]*)"')


@pytest.fixture(autouse=True)
def fresh_warnings():
    """Each test sees every warning: the once-per-process memory is cleared."""
    routing_checks._warned.clear()
    yield
    routing_checks._warned.clear()


def routing_warnings(run) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run()
    return [w for w in caught if issubclass(w.category, MuonRoutingWarning)]


def named_layers(run) -> set[str]:
    """The layers the warning names: those of the `exclude=` it suggests."""
    caught = routing_warnings(run)
    if not caught:
        return set()
    assert len(caught) == 1, [str(w.message) for w in caught]
    suggested = SUGGESTED.findall(str(caught[0].message))
    assert len(suggested) == 1, str(caught[0].message)
    # A name suggested as a whole word (`\\bhead\\b`) is the same layer.
    return {
        name.removeprefix(r"\b").removesuffix(r"\b") for name in suggested[0].split("|")
    }


# -- MLP classifiers: three ways of naming the layers, four frameworks --------

STYLES = {
    "fc": ("fc1", "fc2", "fc3"),
    "input/classifier": ("input", "hidden", "classifier"),
    "inp/out": ("inp", "hidden", "out"),
}
WIDTHS = (784, 256, 256, 10)  # an MNIST classifier


def dense(key, fan_in, fan_out):
    return {
        "kernel": jax.random.normal(key, (fan_in, fan_out)) / fan_in**0.5,
        "bias": jnp.zeros(fan_out),
    }


def plain_mlp(names):
    keys = jax.random.split(jax.random.key(0), 3)
    return {
        name: dense(key, fan_in, fan_out)
        for name, key, fan_in, fan_out in zip(
            names, keys, WIDTHS[:-1], WIDTHS[1:], strict=True
        )
    }


def init_plain(names, tx=None):
    params = plain_mlp(names)
    return lambda: (tx or gradax.muon(0.02)).init(params)


def init_nnx(names):
    class MLP(nnx.Module):
        def __init__(self, rngs):
            for name, fan_in, fan_out in zip(
                names, WIDTHS[:-1], WIDTHS[1:], strict=True
            ):
                setattr(self, name, nnx.Linear(fan_in, fan_out, rngs=rngs))

    model = MLP(nnx.Rngs(0))
    return lambda: nnx.Optimizer(model, gradax.muon(0.02), wrt=nnx.Param)


def init_linen(names):
    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            for name, width in zip(names, WIDTHS[1:], strict=True):
                x = nn.Dense(width, name=name)(x)
            return x

    model = MLP()
    params = model.init(jax.random.key(0), jnp.zeros((1, WIDTHS[0])))["params"]
    return lambda: train_state.TrainState.create(
        apply_fn=model.apply, params=params, tx=gradax.muon(0.02)
    )


def init_equinox(names):
    keys = jax.random.split(jax.random.key(0), 3)
    fields = {name: eqx.nn.Linear for name in names}
    MLP = type("MLP", (eqx.Module,), {"__annotations__": fields})
    model = MLP(
        **{
            name: eqx.nn.Linear(fan_in, fan_out, key=key)
            for name, key, fan_in, fan_out in zip(
                names, keys, WIDTHS[:-1], WIDTHS[1:], strict=True
            )
        }
    )
    params = eqx.filter(model, eqx.is_inexact_array)
    tx = gradax.muon(0.02, muon_weight_dimension_numbers=eqx_dims(params))
    return lambda: tx.init(params)


def eqx_dims(params):
    """equinox's Linear stores (out, in): the routing as the guide writes it."""
    dims = gradax.MuonDimensionNumbers(1, 0)
    return jax.tree.map(lambda x: dims if x.ndim == 2 else None, params)


FRAMEWORKS = {
    "plain": init_plain,
    "nnx": init_nnx,
    "linen": init_linen,
    "equinox": init_equinox,
}


@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
@pytest.mark.parametrize("style", sorted(STYLES))
def test_an_mlp_classifiers_input_and_output_layers_are_named(style, framework):
    first, hidden, last = STYLES[style]
    assert named_layers(FRAMEWORKS[framework](STYLES[style])) == {first, last}


@pytest.mark.parametrize("style", sorted(STYLES))
def test_the_suggested_exclude_moves_them_to_adamw(style):
    names = STYLES[style]
    (caught,) = routing_warnings(init_plain(names))
    message = str(caught.message)
    first, hidden, last = names
    assert f"['{first}']['kernel'] (784, 256): no other matrix is 784 wide" in message
    assert f"['{last}']['kernel'] (256, 10): no other matrix is 10 wide" in message
    (pattern,) = SUGGESTED.findall(message)
    assert "muon_weight_dimension_numbers=lambda params: gradax.muon_labels(" in message

    routing_checks._warned.clear()
    labels, dims = gradax.muon_labels(
        plain_mlp(names), exclude=pattern, print_report=False
    )
    assert {name: labels[name]["kernel"] for name in names} == {
        first: "adam",
        hidden: "muon",
        last: "adam",
    }
    tx = gradax.muon(0.02, muon_weight_dimension_numbers=dims)
    assert routing_warnings(init_plain(names, tx)) == []


# -- a CNN --------------------------------------------------------------------


class CNN(nn.Module):
    """flax's MNIST example: two conv layers, two dense layers."""

    @nn.compact
    def __call__(self, x):
        for features in (32, 64):
            x = nn.relu(nn.Conv(features, (3, 3))(x))
            x = nn.avg_pool(x, (2, 2), strides=(2, 2))
        x = x.reshape((x.shape[0], -1))  # 7 * 7 * 64 = 3136
        x = nn.relu(nn.Dense(256)(x))
        return nn.Dense(10)(x)


def cnn_params():
    return CNN().init(jax.random.key(0), jnp.zeros((1, 28, 28, 1)))["params"]


@pytest.mark.parametrize(
    "routing, named",
    [(None, {"Dense_1"}), ("auto", {"Conv_0", "Dense_1"})],
    ids=["default", "auto"],
)
def test_a_cnn(routing, named):
    params = cnn_params()
    assert params["Dense_0"]["kernel"].shape == (3136, 256)  # a flattened map
    tx = gradax.muon(0.02, muon_weight_dimension_numbers=routing)
    assert named_layers(lambda: tx.init(params)) == named


# -- transformers: no false warnings on the hidden layers ---------------------

VOCAB, D, HEADS, LAYERS = 50, 32, 4, 2


class LinenBlock(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = x + nn.MultiHeadDotProductAttention(HEADS)(nn.LayerNorm()(x))
        h = nn.gelu(nn.Dense(4 * D, name="up")(nn.LayerNorm()(x)))
        return x + nn.Dense(D, name="down")(h)


class LinenTransformer(nn.Module):
    @nn.compact
    def __call__(self, tokens):
        x = nn.Embed(VOCAB, D, name="embed")(tokens)
        for _ in range(LAYERS):
            x = LinenBlock()(x)
        return nn.Dense(VOCAB, name="head")(nn.LayerNorm()(x))


class NnxBlock(nnx.Module):
    def __init__(self, rngs):
        self.norm1 = nnx.LayerNorm(D, rngs=rngs)
        self.attention = nnx.MultiHeadAttention(HEADS, D, decode=False, rngs=rngs)
        self.norm2 = nnx.LayerNorm(D, rngs=rngs)
        self.up = nnx.Linear(D, 4 * D, rngs=rngs)
        self.down = nnx.Linear(4 * D, D, rngs=rngs)


class NnxTransformer(nnx.Module):
    def __init__(self, rngs):
        self.embed = nnx.Embed(VOCAB, D, rngs=rngs)
        self.blocks = nnx.List([NnxBlock(rngs) for _ in range(LAYERS)])
        self.norm = nnx.LayerNorm(D, rngs=rngs)
        self.head = nnx.Linear(D, VOCAB, rngs=rngs)


class EqxBlock(eqx.Module):
    norm1: eqx.nn.LayerNorm
    attention: eqx.nn.MultiheadAttention
    norm2: eqx.nn.LayerNorm
    up: eqx.nn.Linear
    down: eqx.nn.Linear

    def __init__(self, key):
        k1, k2, k3 = jax.random.split(key, 3)
        self.norm1 = eqx.nn.LayerNorm(D)
        self.attention = eqx.nn.MultiheadAttention(HEADS, D, key=k1)
        self.norm2 = eqx.nn.LayerNorm(D)
        self.up = eqx.nn.Linear(D, 4 * D, key=k2)
        self.down = eqx.nn.Linear(4 * D, D, key=k3)


class EqxTransformer(eqx.Module):
    embed: eqx.nn.Embedding
    blocks: list
    norm: eqx.nn.LayerNorm
    head: eqx.nn.Linear

    def __init__(self, key):
        keys = jax.random.split(key, LAYERS + 2)
        self.embed = eqx.nn.Embedding(VOCAB, D, key=keys[0])
        self.blocks = [EqxBlock(k) for k in keys[1:-1]]
        self.norm = eqx.nn.LayerNorm(D)
        self.head = eqx.nn.Linear(D, VOCAB, key=keys[-1])


def transformer_params(framework):
    if framework == "linen":
        tokens = jnp.zeros((1, 8), jnp.int32)
        return LinenTransformer().init(jax.random.key(0), tokens)["params"]
    if framework == "nnx":
        return nnx.state(NnxTransformer(nnx.Rngs(0)), nnx.Param)
    model = EqxTransformer(jax.random.key(0))
    return eqx.filter(model, eqx.is_inexact_array)


def guide_flax_routing(params):
    """The guide's routing of a flax transformer, run on `params`: `dims`."""
    text = GUIDE.read_text()
    section = text[text.index("### Input and output layers") :]
    (code,) = re.findall(
        r"^```python\n(.*?)^```$", section.split("\n## ")[0], re.S | re.M
    )
    namespace = {"params": params}
    exec(compile(code, "docs/muon.md (flax routing)", "exec"), namespace)
    return namespace["dims"]


def stacked_transformer_params():
    """A transformer whose layers are scanned: one (LAYERS, ...) leaf each."""
    keys = iter(jax.random.split(jax.random.key(0), 8))

    def normal(*shape):
        return jax.random.normal(next(keys), shape) / shape[-2] ** 0.5

    return {
        "embed": normal(VOCAB, D),
        "blocks": {
            "qkv": normal(LAYERS, D, 3 * D),  # fused: 3 * D is no other width
            "out": normal(LAYERS, D, D),
            "up": normal(LAYERS, D, 4 * D),
            "down": normal(LAYERS, 4 * D, D),
            "norm": jnp.ones((LAYERS, D)),
        },
        "head": normal(D, VOCAB),
    }


TRANSFORMERS = ("linen", "nnx", "equinox")


@pytest.mark.parametrize("framework", TRANSFORMERS)
def test_a_transformer_gets_its_embedding_and_head_named_and_nothing_else(framework):
    params = transformer_params(framework)
    assert named_layers(lambda: gradax.muon(0.02).init(params)) == {"embed", "head"}


@pytest.mark.parametrize("framework", TRANSFORMERS)
def test_a_transformer_routed_as_the_guide_says_gets_no_warning(framework):
    params = transformer_params(framework)

    def route_and_init():
        if framework == "equinox":
            dims = eqx_dims(params)
            dims = gradax.muon_labels(params, dims, exclude="embed|head")[1]
        else:
            dims = guide_flax_routing(params)
        gradax.muon(0.02, muon_weight_dimension_numbers=dims).init(params)
        return dims

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dims = route_and_init()
    assert [w for w in caught if w.category is MuonRoutingWarning] == []
    # Every hidden matrix goes to Muon, 6 a block: 4 attention kernels (the
    # exclude does not catch linen's MultiHeadDotProductAttention_0), 2 MLP.
    labels = gradax.muon_labels(params, dims, print_report=False)[0]
    assert jax.tree.leaves(labels).count("muon") == 6 * LAYERS


def test_a_scanned_transformer_with_fused_qkv_gets_no_false_warning():
    params = stacked_transformer_params()

    def route_and_init():
        dims = gradax.muon_labels(
            params, "auto", exclude="embed|head|norm", print_report=False
        )[1]
        gradax.muon(0.02, muon_weight_dimension_numbers=dims).init(params)

    assert routing_warnings(route_and_init) == []
    # Without the exclude, the stacked norms' (LAYERS, D) gains, 2-D, go to
    # Muon too: the layer count is no other matrix's width.
    tx = gradax.muon(0.02, muon_weight_dimension_numbers="auto")
    assert named_layers(lambda: tx.init(params)) == {"embed", "head", "norm"}


def test_a_tree_with_one_matrix_has_nothing_to_compare():
    params = {"w": jnp.ones((4, 8)), "b": jnp.zeros(8)}
    assert routing_warnings(lambda: gradax.muon(0.02).init(params)) == []


def test_heads_cut_by_muon_split_share_their_widths():
    # One layer's (D, 3 * D) fused kernel cut into q, k, v: three (D, D)
    # matrices. Whole, its 3 * D is a width of its own (the guide says so).
    params = {"qkv": jnp.ones((D, 3 * D)), "out": jnp.ones((D, D))}
    split = gradax.MuonSplit(split_sizes=(D, D, D))
    tx = gradax.muon(0.02, muon_weight_dimension_numbers={"qkv": split, "out": None})
    assert routing_warnings(lambda: tx.init(params)) == []
    whole = gradax.muon(0.02)
    assert named_layers(lambda: whole.init(params)) == {"qkv"}


# -- where the warning points, and how often ----------------------------------

PARAMS = plain_mlp(STYLES["fc"])


def _next_line() -> int:
    """The line after the caller's: where the call under test is written."""
    return inspect.currentframe().f_back.f_lineno + 1


def _at(caught, line):
    assert len(caught) == 1, [str(w.message) for w in caught]
    assert (caught[0].filename, caught[0].lineno) == (__file__, line), (
        f"points at {caught[0].filename}:{caught[0].lineno}"
    )


def test_it_points_at_the_nnx_optimizer_line():
    model = nnx.Sequential(
        nnx.Linear(784, 256, rngs=nnx.Rngs(0)), nnx.Linear(256, 10, rngs=nnx.Rngs(1))
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = _next_line()
        nnx.Optimizer(model, gradax.muon(0.02), wrt=nnx.Param)
    _at([w for w in caught if w.category is MuonRoutingWarning], line)


def test_it_points_at_the_train_state_line():
    model = nn.Dense(10)
    params = model.init(jax.random.key(0), jnp.zeros((1, 784)))["params"]
    params = {"Dense_0": {"kernel": jnp.ones((784, 256))}, "Dense_1": params}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = _next_line()
        train_state.TrainState.create(apply_fn=None, params=params, tx=gradax.muon(0.1))
    _at([w for w in caught if w.category is MuonRoutingWarning], line)


@pytest.mark.parametrize(
    "how",
    ["optax.chain", "jax.jit", "jax.jit(optax.chain)", "eqx.filter_jit"],
)
def test_it_points_at_the_init_call(how):
    muon = gradax.muon(0.02)
    init = {
        "optax.chain": optax.chain(optax.clip(1.0), muon).init,
        "jax.jit": jax.jit(muon.init),
        "jax.jit(optax.chain)": jax.jit(optax.chain(muon).init),
        "eqx.filter_jit": eqx.filter_jit(muon.init),
    }[how]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = _next_line()
        init(PARAMS)
    _at([w for w in caught if w.category is MuonRoutingWarning], line)


def test_from_a_routing_function_it_points_at_its_muon_labels_call():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")

        def routing(params):
            line[0] = _next_line()
            return gradax.muon_labels(params, exclude="emb", print_report=False)[1]

        line = [0]
        tx = gradax.muon(0.02, muon_weight_dimension_numbers=routing)
        jax.jit(tx.init)(PARAMS)
    ours = [w for w in caught if w.category is MuonRoutingWarning]
    assert len(ours) == 2  # the dead "emb", then the layers
    for warning in ours:
        assert (warning.filename, warning.lineno) == (__file__, line[0])
    # The suggestion keeps what the user excludes already.
    assert 'pass exclude="emb|fc1|fc3"' in str(ours[1].message)


def test_it_fires_once_not_per_step_nor_per_trace():
    tx = gradax.muon(0.02)

    def train():
        state = tx.init(PARAMS)
        step = jax.jit(tx.update)
        for _ in range(2):
            _, state = tx.update(PARAMS, state, PARAMS)
            _, state = step(PARAMS, state, PARAMS)
        jax.jit(tx.init)(PARAMS)  # a new trace of init
        tx.init(PARAMS)

    assert len(routing_warnings(train)) == 1
    assert routing_warnings(train) == []  # the same leaves again: not repeated


def test_other_members_of_the_family_warn_in_their_own_name():
    for build in (gradax.normuon, gradax.dion, gradax.adamuon):
        routing_checks._warned.clear()
        (warning,) = routing_warnings(lambda b=build: b(0.02).init(PARAMS))
        assert str(warning.message).startswith(f"gradax.{build.__name__} routes")


def test_the_category_silences_it():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=gradax.MuonRoutingWarning)
        gradax.muon(0.02).init(PARAMS)
        gradax.muon_labels(PARAMS, exclude="nothing", print_report=False)
    assert caught == []
    assert issubclass(gradax.MuonRoutingWarning, UserWarning)


# -- exclude= ------------------------------------------------------------------

LM = {
    "embed": {"embedding": jnp.ones((50, 16))},
    "hidden": {"kernel": jnp.ones((16, 16)), "bias": jnp.zeros(16)},
    "head": {"kernel": jnp.ones((16, 50))},
}


def test_exclude_with_the_wrong_case_is_named_with_the_path_it_missed():
    # The case: an upper-case E routes the embedding to Muon. Case
    # counts, as in Python's re (a caseless "head" would catch linen's
    # MultiHeadDotProductAttention_0), so the warning names the near miss.
    caught = routing_warnings(
        lambda: gradax.muon_labels(LM, exclude="Embed|head", print_report=False)
    )
    dead, routed = (str(w.message) for w in caught)
    assert "'Embed' in exclude='Embed|head' matches no path" in dead
    assert "'Embed' would match ['embed']['embedding'] if case were ignored" in dead
    # And the embedding, left on Muon, is named with the fixed pattern.
    assert 'pass exclude="Embed|head|embed"' in routed
    assert [w.filename for w in caught] == [__file__] * 2


def test_linen_auto_names_with_a_lower_case_exclude():
    params = {"Dense_0": LM["hidden"], "Dense_1": LM["hidden"]}
    caught = routing_warnings(
        lambda: gradax.muon_labels(params, exclude="dense_1", print_report=False)
    )
    assert len(caught) == 1
    assert "would match ['Dense_1']['kernel']" in str(caught[0].message)
    labels, _ = gradax.muon_labels(params, exclude="(?i:dense_1)", print_report=False)
    assert labels["Dense_1"]["kernel"] == "adam"


@pytest.mark.parametrize(
    "exclude, dead",
    [
        ("embd", "exclude='embd' matches no path"),
        ("embed|haed", "'haed' in exclude='embed|haed' matches no path"),
        ("x|y|head", "'x', 'y' in exclude='x|y|head' match no path"),
    ],
)
def test_a_branch_of_exclude_that_matches_nothing_is_named(exclude, dead):
    caught = routing_warnings(
        lambda: gradax.muon_labels(LM, exclude=exclude, print_report=False)
    )
    messages = [str(w.message) for w in caught if "matches no path" in str(w.message)]
    messages += [str(w.message) for w in caught if "match no path" in str(w.message)]
    assert len(messages) == 1 and dead in messages[0], messages
    assert "The paths read: ['embed']['embedding']" in messages[0]
    for w in caught:
        assert w.filename == __file__


def test_an_exclude_that_matches_gives_no_warning():
    caught = routing_warnings(
        lambda: gradax.muon_labels(LM, exclude="embed|head", print_report=False)
    )
    assert caught == []


def test_a_masked_part_counts_as_matched():
    # A routing function inside the user's partition: the embedding masked.
    params = {**LM, "embed": MaskedNode()}
    caught = routing_warnings(
        lambda: gradax.muon_labels(params, exclude="embed|head", print_report=False)
    )
    assert caught == []


@pytest.mark.parametrize(
    "pattern, branches",
    [
        ("embed|head", ["embed", "head"]),
        ("a(b|c)|d", ["a(b|c)", "d"]),
        ("[|x]|y", ["[|x]", "y"]),
        ("[]|]|y", ["[]|]", "y"]),
        (r"a\|b|c", [r"a\|b", "c"]),
        ("solo", ["solo"]),
    ],
)
def test_the_branches_of_a_pattern(pattern, branches):
    assert routing_checks.top_level_alternatives(pattern) == branches


# -- the guide's table ------------------------------------------------------------


def guide_table() -> list[tuple[str, set[str]]]:
    """(model, names) of each row of the guide's table of what is named."""
    text = GUIDE.read_text()
    start = text.index("### Input and output layers")
    rows = []
    for line in text[start:].splitlines():
        if line.startswith("| ") and not line.startswith("| model"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows.append((cells[0], set(re.findall(r"`([^`]+)`", cells[1]))))
        elif rows and not line.startswith("|"):
            break
    return rows


def test_the_guides_table_says_what_these_models_get():
    checks = [
        ("fc1", lambda: named_layers(init_plain(STYLES["fc"]))),
        ("classifier", lambda: named_layers(init_plain(STYLES["input/classifier"]))),
        ("inp", lambda: named_layers(init_plain(STYLES["inp/out"]))),
        ("CNN", lambda: named_layers(lambda: gradax.muon(0.02).init(cnn_params()))),
        (
            '"auto"',
            lambda: named_layers(
                lambda: gradax.muon(0.02, muon_weight_dimension_numbers="auto").init(
                    cnn_params()
                )
            ),
        ),
        (
            "transformer",
            lambda: named_layers(
                lambda: gradax.muon(0.02).init(transformer_params("nnx"))
            ),
        ),
    ]
    rows = guide_table()
    assert len(rows) == len(checks), rows
    for (model, names), (keyword, named) in zip(rows, checks, strict=True):
        assert keyword in model, (model, keyword)
        routing_checks._warned.clear()
        assert named() == names, model
