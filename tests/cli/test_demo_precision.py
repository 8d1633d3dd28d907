"""``gradax demo``'s bfloat16 rows: round-to-nearest, stochastic rounding, master."""

from __future__ import annotations

import json
import textwrap

import jax
import jax.numpy as jnp
import pytest

import gradax
from gradax_cli import main
from gradax_cli._demo import OPTIMIZERS, RunSpec, build_optimizer

ROWS = [
    f"adamw{bits}-bf16{how}" for bits in ("", "8bit") for how in ("", "-sr", "-master")
]
TINY = ["--context", "16", "--d-model", "16", "--layers", "1", "--heads", "2"]


def test_rows_exist_and_wrap_the_whole_optimizer():
    for name in ROWS:
        assert OPTIMIZERS[name].param_dtype == jnp.bfloat16, name
        tx = build_optimizer(RunSpec(name, name, 1e-3), 10, None)
        if name.endswith("-master"):
            assert isinstance(tx, gradax.master_weights)
        elif name.endswith("-sr"):
            assert isinstance(tx, gradax.stochastic_rounding)
        else:
            assert isinstance(tx, gradax.chain)
    # The default list is unchanged.
    assert "adamw" in OPTIMIZERS and "muon" in OPTIMIZERS


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "code.txt"
    path.write_text(textwrap.dedent("def f(n):\n    return n + 1\n") * 200)
    out = tmp_path_factory.mktemp("demo")
    names = ",".join(["adamw", *ROWS])
    args = ["--data", str(path), "--steps", "4", "--optimizers", names]
    code = main(["demo", "--out", str(out), "--batch-size", "4", *TINY, *args])
    assert code == 0
    return json.loads((out / "results.json").read_text())


def test_rows_train_and_report_their_state(results):
    runs = results["optimizers"]
    assert set(runs) == {"adamw", *ROWS}
    for name in ROWS:
        assert runs[name]["final_val_loss"] < runs[name]["val_loss"][0], name
    # The master keeps 2 bytes of low bits per parameter on top of the
    # moments; 8-bit moments are smaller (this tiny model's leaves below a
    # block stay float32, so not a quarter here).
    n = results["config"]["params"]
    extra = runs["adamw-bf16-master"]["state_bytes"] - runs["adamw-bf16"]["state_bytes"]
    assert extra == 2 * n
    assert runs["adamw8bit-bf16"]["state_bytes"] < runs["adamw"]["state_bytes"]


def test_bf16_rows_start_from_bf16_params():
    params = {"w": jnp.ones((4, 4))}
    tx = build_optimizer(RunSpec("m", "adamw-bf16-master", 1e-3), 10, None)
    bf16 = jax.tree.map(lambda p: p.astype(jnp.bfloat16), params)
    state = tx.init(bf16)
    assert state.low_bits["w"].dtype == jnp.uint16
