"""``gradax demo``: train a small character-level transformer with several optimizers.

Every optimizer starts from the same initial parameters and sees the same
batches in the same order, so the curves differ only by the optimizer. The
table compares final training and validation loss, the steps each optimizer
needed to reach the reference (AdamW's) final validation loss, the time per
step and the size of the optimizer state. With ``--tune`` each optimizer's
learning rate is swept first and its best rate trained (see ``tune.py``).
Every run is wrapped in ``gradax.with_metrics``: a second figure shows its
metrics of each step (see ``_metrics_plot.py``), and a line says how often
the gradient clip fired.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import math
import platform
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import gradax

from . import _data as data_lib
from . import _metrics_plot as metrics_plot
from . import _tune as tune
from ._model import ModelConfig, count_params, init_params, loss_fn
from ._report import make_progress, plot, print_table, summary_line


class DemoError(Exception):
    """Bad input, explained in one line."""


# ---------------------------------------------------------------------------
# Optimizers: name -> (default peak learning rate, factory). A factory gets the
# learning-rate schedule, the AdamW rate schedule (for the non-matrix group of
# the Muon family) and the Muon routing of the parameters.


@dataclasses.dataclass(frozen=True)
class Recipe:
    """A default peak learning rate, a factory and a one-line description."""

    learning_rate: float
    build: Callable[..., Any]
    summary: str
    # Parameters stored in this dtype (None: float32), and a wrapper put
    # around the whole optimizer (clipping included), for 16-bit parameters.
    param_dtype: Any = None
    wrap: Callable[[Any], Any] | None = None


def _plain(name: str, **kwargs) -> Callable[..., Any]:
    return lambda lr, adam_lr, dims: getattr(gradax, name)(lr, **kwargs)


def _with_adamw(name: str, **kwargs) -> Callable[..., Any]:
    def build(lr, adam_lr, dims):
        return getattr(gradax, name)(
            lr,
            adam_learning_rate=adam_lr,
            adam_b2=0.95,
            muon_weight_dimension_numbers=dims,
            **kwargs,
        )

    return build


ADAMW_LR = 3e-3


def _adamw(moments: Any = None) -> Callable[..., Any]:
    """The demo's AdamW, both moments stored as `moments` (a dtype or spec)."""
    return _plain(
        "adamw", b2=0.95, weight_decay=0.01, mu_dtype=moments, nu_dtype=moments
    )


_CANDIDATES = {
    "adamw": Recipe(
        ADAMW_LR,
        _plain("adamw", b2=0.95, weight_decay=0.01),
        "adamw(b2=0.95, weight_decay=0.01)",
    ),
    "adam": Recipe(ADAMW_LR, _plain("adam", b2=0.95), "adam(b2=0.95)"),
    "sgd": Recipe(
        0.3, _plain("sgd", momentum=0.9, nesterov=True), "sgd(nesterov momentum)"
    ),
    "lion": Recipe(3e-3, _plain("lion", weight_decay=0.01), "lion(b1=0.9, b2=0.99)"),
    "muon": Recipe(
        0.05, _with_adamw("muon"), "muon on hidden matrices, AdamW on the rest"
    ),
    "normuon": Recipe(
        0.02, _with_adamw("normuon"), "normuon on hidden matrices, AdamW on the rest"
    ),
    "adamuon": Recipe(
        3e-3, _with_adamw("adamuon"), "adamuon on hidden matrices, AdamW on the rest"
    ),
    "adamw8bit": Recipe(
        ADAMW_LR,
        _adamw(gradax.int8_blockwise()),
        "adamw with 8-bit blockwise moments",
    ),
    "adamw8bit-float": Recipe(
        ADAMW_LR,
        _adamw(gradax.int8_blockwise(code="float")),
        "adamw with 8-bit blockwise moments, float code",
    ),
    "muon8bit": Recipe(
        0.05,
        _with_adamw("muon", mu_dtype=gradax.int8_blockwise()),
        "muon with 8-bit blockwise momentum, AdamW on the rest",
    ),
    "dion": Recipe(
        0.02,
        lambda lr, adam_lr, dims: gradax.dion(
            lr,
            adam_learning_rate=adam_lr,
            adam_b2=0.95,
            muon_weight_dimension_numbers=dims,
        ),
        "dion on hidden matrices, AdamW on the rest",
    ),
    "kron": Recipe(3e-3, _plain("kron"), "kron (PSGD, Kronecker-factored)"),
    "scion": Recipe(
        0.05,
        _plain("scion", unconstrained=True, embedding_radius=0.1, head_radius=8.0),
        "scion (uScion: spectral, row norm on embeddings, sign on the head)",
    ),
}
# Only those this build of gradax has.
OPTIMIZERS = {
    name: r
    for name, r in _CANDIDATES.items()
    if hasattr(gradax, name.partition("8bit")[0])
}


def _bf16_adamw(int8: bool, wrap: Callable[[Any], Any] | None, how: str) -> Recipe:
    q8 = gradax.int8_blockwise()
    dtype = q8 if int8 else jnp.float32
    build = _adamw(dtype)
    moments = "8-bit" if int8 else "float32"
    summary = f"adamw, bfloat16 params, {how}, {moments} moments"
    return Recipe(ADAMW_LR, build, summary, jnp.bfloat16, wrap)


# bfloat16 parameters: round-to-nearest (apply_updates alone), stochastic
# rounding, and an exact float32 master; each with float32 or 8-bit moments,
# so the rows differ only in how the parameters keep their steps.
if hasattr(gradax, "master_weights"):
    for _suffix, _int8 in (("", False), ("8bit", True)):
        OPTIMIZERS[f"adamw{_suffix}-bf16"] = _bf16_adamw(
            _int8, None, "round-to-nearest"
        )
        OPTIMIZERS[f"adamw{_suffix}-bf16-sr"] = _bf16_adamw(
            _int8,
            lambda tx: gradax.stochastic_rounding(tx, seed=0),
            "stochastic rounding",
        )
        OPTIMIZERS[f"adamw{_suffix}-bf16-master"] = _bf16_adamw(
            _int8, gradax.master_weights, "exact float32 master"
        )
REFERENCE = "adamw"


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One optimizer to train: ``name`` or ``name:learning_rate``."""

    label: str
    name: str
    learning_rate: float


def parse_optimizers(text: str) -> list[RunSpec]:
    """``"adamw,muon:0.03"`` -> run specs; unknown names raise DemoError."""
    specs: list[RunSpec] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            raise DemoError(f"empty name in --optimizers {text!r}")
        name, _, rate = item.partition(":")
        name = name.strip().lower()
        if name not in OPTIMIZERS:
            known = ", ".join(sorted(OPTIMIZERS))
            raise DemoError(f"unknown optimizer {name!r}; choose from: {known}")
        lr = OPTIMIZERS[name].learning_rate
        if rate:
            try:
                lr = float(rate)
            except ValueError:
                raise DemoError(f"bad learning rate in {item!r}") from None
            if not (math.isfinite(lr) and lr > 0):
                raise DemoError(f"learning rate in {item!r} must be positive")
        label = name if not rate else f"{name}:{rate.strip()}"
        if any(s.label == label for s in specs):
            raise DemoError(f"optimizer {label!r} is listed twice")
        specs.append(RunSpec(label, name, lr))
    return specs


def schedule(peak: float, steps: int):
    """Linear warmup over 5% of the steps, then cosine decay to 10% of peak."""
    warmup = max(1, steps // 20)
    return gradax.warmup_cosine_decay_schedule(
        0.0, peak, warmup, max(steps, warmup + 1), end_value=0.1 * peak
    )


CLIP = 1.0  # the global norm every recipe clips the gradients to


def build_optimizer(spec: RunSpec, steps: int, dims: Any):
    recipe = OPTIMIZERS[spec.name]
    inner = recipe.build(
        schedule(spec.learning_rate, steps), schedule(ADAMW_LR, steps), dims
    )
    tx = gradax.chain(gradax.clip_by_global_norm(CLIP), inner)
    # A wrapper for 16-bit parameters must be outermost (its float32 updates
    # carry the step exactly; a chain around it would round them).
    return recipe.wrap(tx) if recipe.wrap is not None else tx


# ---------------------------------------------------------------------------
# Training.


@dataclasses.dataclass(frozen=True)
class Preset:
    """The length of a run: steps, sequences per step, steps between evaluations."""

    steps: int
    batch_size: int
    eval_every: int


# The default run shows its table and plot in about 45 s of CPU time on 2
# cores (JAX's import and compiles included): half the steps of half the
# batch of the full run, so a quarter of its training work (a forward and
# backward pass is most of a step). An evaluation every 10 steps resolves
# "steps to adamw" to 10 steps. FULL is the earlier default run (--full).
QUICK = Preset(steps=150, batch_size=16, eval_every=10)
FULL = Preset(steps=300, batch_size=32, eval_every=15)


@dataclasses.dataclass(frozen=True)
class DemoConfig:
    optimizers: list[RunSpec]
    steps: int = QUICK.steps
    batch_size: int = QUICK.batch_size
    seed: int = 0
    out: Path = Path("gradax-demo")
    data: Path | None = None
    context: int = 64
    d_model: int = 128
    layers: int = 2
    heads: int = 4
    eval_every: int = QUICK.eval_every  # steps between validation losses
    full: bool = False  # the run of --full (FULL's steps, batch, eval_every)
    eval_batches: int = 4
    tune: bool = False  # sweep each optimizer's learning rate first
    tune_steps: int | None = None  # steps per sweep run; None: a third of steps
    grid: tuple[float, ...] | None = None  # rate multipliers; None: per family

    @property
    def sweep_steps(self) -> int:
        return self.tune_steps or max(1, self.steps // 3)


def eval_steps(steps: int, every: int) -> list[int]:
    """Steps after which the validation loss is measured (0 and the last included).

    A run of fewer than ``2 * every`` steps is evaluated at least twice after
    step 0, so its second stretch times the steps without the compile.
    """
    every = max(1, min(every, steps // 2))
    return sorted(set(range(0, steps, every)) | {steps})


def _as_float32(params: Any) -> Any:
    return jax.tree.map(lambda p: p.astype(jnp.float32), params)


@functools.cache
def compiled(heads: int) -> dict[str, Any]:
    """The jitted training stretch and loss, shared by every optimizer and run.

    ``"train"`` runs the steps between two evaluations as one ``lax.scan``:
    one dispatch and one compile per kind of optimizer (its numbers are
    leaves of the ``tx`` argument, so runs that differ only by learning rate
    share it), and no host round trip per step. Parameters stored in bfloat16
    are read as they are (widened exactly), and the arithmetic, gradients
    included, is float32 for every row (a no-op for float32 parameters), so
    the rows differ by how the parameters are stored and updated, not by the
    precision of the activations or gradients.
    """

    def loss(params, batch):
        return loss_fn(_as_float32(params), batch, heads=heads)

    value_and_grad = jax.value_and_grad(loss)

    def train(tx, params, state, batches):
        def step(carry, batch):
            params, state = carry
            value, grads = value_and_grad(params, batch)
            updates, state = tx.update(grads, state, params)
            # The optimizer's metrics of this step (gradax.with_metrics).
            logged = (value, gradax.metrics(state))
            return (gradax.apply_updates(params, updates), state), logged

        (params, state), (losses, metrics) = jax.lax.scan(
            step, (params, state), batches
        )
        return params, state, losses, metrics

    return {"train": jax.jit(train), "loss": jax.jit(loss)}


# The optimizer is an argument (a pytree whose numbers are leaves): runs with
# the same kind of optimizer share one compilation.
@jax.jit
def init_state(tx, params):
    return tx.init(params)


def state_bytes(state: Any) -> int:
    total = 0
    for x in jax.tree.leaves(state):
        if jax.dtypes.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key):
            # jax 0.6.0 gave key arrays nbytes; before, it raises
            # NotImplementedError (which hasattr does not catch).
            x = jax.random.key_data(x)
        total += getattr(x, "nbytes", 0)
    return total


def train_one(
    spec: RunSpec,
    config: DemoConfig,
    corpus: data_lib.Corpus,
    params0: Any,
    dims: Any,
    fns: dict[str, Any],
    progress: Callable[..., None],
) -> dict[str, Any]:
    """Train one optimizer from ``params0``; the curves and timings as a dict."""
    # The metrics of every step (the second figure): with_metrics keeps the
    # updates and state of what it wraps, a 16-bit wrapper's included.
    tx = gradax.with_metrics(build_optimizer(spec, config.steps, dims))
    dtype = OPTIMIZERS[spec.name].param_dtype
    if isinstance(tx.inner, gradax.master_weights):
        # The exact master starts where the float32 run starts: its high
        # halves are the parameters, its low halves the state's.
        params, inner_state = tx.inner.init_with_master(params0)
        state = init_state(tx, params)._replace(inner_state=inner_state)
    else:
        if dtype is not None:
            params0 = jax.tree.map(lambda p: p.astype(dtype), params0)
        params, state = params0, init_state(tx, params0)
    checkpoints = eval_steps(config.steps, config.eval_every)
    val_curve: list[float] = [float(fns["loss"](params, fns["val_batch"]))]
    train_losses: list[float] = []
    logged: dict[str, list[float]] = {}  # each metric of each step, by name
    length = config.context + 1
    progress(spec.label, 0, None, val_curve[0])
    # Seconds of the stretches as long as the first, after the first (which
    # compiles); a shorter last stretch compiles anew, so it is left out.
    timed_seconds, timed_steps, first_seconds = 0.0, 0, 0.0
    for begin, end in itertools.pairwise(checkpoints):
        batches = np.stack(
            [
                data_lib.sample_batch(
                    corpus.train, config.batch_size, length, (config.seed, 0, step)
                )
                for step in range(begin, end)
            ]
        )
        start = time.perf_counter()
        params, state, losses, metrics = jax.block_until_ready(
            fns["train"](tx, params, state, jnp.asarray(batches))
        )
        elapsed = time.perf_counter() - start
        if begin == 0:
            first_seconds = elapsed
        elif end - begin == checkpoints[1]:
            timed_seconds += elapsed
            timed_steps += end - begin
        losses = [float(x) for x in np.asarray(losses)]
        for step, loss in enumerate(losses, start=begin + 1):
            if not math.isfinite(loss):
                raise DemoError(
                    f"{spec.label}: the loss became {loss} at step {step}; "
                    "try a smaller learning rate (e.g. --optimizers "
                    f"{spec.name}:{spec.learning_rate / 3:.2g})"
                )
        train_losses += losses
        for name, values in metrics.items():
            logged.setdefault(name, []).extend(float(v) for v in np.asarray(values))
        val_curve.append(float(fns["loss"](params, fns["val_batch"])))
        progress(spec.label, end, losses[-1], val_curve[-1])
    final_train = float(fns["loss"](params, fns["train_batch"]))
    return {
        "optimizer": spec.name,
        "learning_rate": spec.learning_rate,
        "recipe": OPTIMIZERS[spec.name].summary,
        "final_train_loss": final_train,
        "final_val_loss": val_curve[-1],
        "eval_steps": checkpoints,
        "val_loss": val_curve,
        "train_loss": train_losses,
        "seconds_per_step": timed_seconds / timed_steps if timed_steps else None,
        "first_stretch_seconds": first_seconds,
        # The optimizer's own state, without the metrics' few scalars.
        "state_bytes": state_bytes(state.inner_state),
        "metrics": logged,
    }


def steps_to_reach(result: dict[str, Any], target: float) -> int | None:
    """The first evaluated step whose validation loss is at most ``target``."""
    for step, loss in zip(result["eval_steps"], result["val_loss"], strict=True):
        if loss <= target:
            return step
    return None


def prepare_output(out: Path) -> None:
    """Create ``out`` and check it can be written, before any training."""
    if out.exists() and not out.is_dir():
        raise DemoError(f"output path exists and is not a directory: {out}")
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".gradax-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        reason = error.strerror or str(error)
        raise DemoError(f"cannot write to output directory {out}: {reason}") from None


def load_corpus(config: DemoConfig) -> data_lib.Corpus:
    min_len = config.context + 1
    try:
        if config.data is None:
            return data_lib.stdlib_corpus(min_len)
        return data_lib.file_corpus(config.data, min_len)
    except data_lib.DataError as error:
        raise DemoError(str(error)) from None


def run_demo(config: DemoConfig, progress_factory=None) -> dict[str, Any]:
    """Train every optimizer (after a sweep, with --tune); write the results."""
    start = time.perf_counter()
    prepare_output(config.out)
    corpus = load_corpus(config)
    model = ModelConfig(
        vocab_size=corpus.vocab_size,
        context=config.context,
        d_model=config.d_model,
        layers=config.layers,
        heads=config.heads,
    )
    params0 = init_params(model, jax.random.key(config.seed))
    with warnings.catch_warnings():
        # The demo's routing is deliberate: the embeddings and the head on
        # AdamW, every block matrix on Muon (with --layers 1 the lone qkv
        # looks like an input layer to muon_labels' heuristic).
        warnings.simplefilter("ignore", gradax.MuonRoutingWarning)
        _, dims = gradax.muon_labels(params0, exclude="embed|head", print_report=False)
    length = config.context + 1
    rows = config.eval_batches * config.batch_size
    fns = {
        **compiled(model.heads),
        "val_batch": jnp.asarray(
            data_lib.sample_batch(corpus.validation, rows, length, (config.seed, 1))
        ),
        "train_batch": jnp.asarray(
            data_lib.sample_batch(corpus.train, rows, length, (config.seed, 2))
        ),
    }
    header = {
        "corpus": corpus.source,
        "train_chars": int(corpus.train.size),
        "val_chars": int(corpus.validation.size),
        "files": list(corpus.documents),
        "vocab_size": corpus.vocab_size,
        "params": count_params(params0),
    }
    factory = progress_factory or make_progress
    specs, tuning = config.optimizers, None
    if config.tune:
        short = dataclasses.replace(config, steps=config.sweep_steps)
        tuning = tune.sweep(
            specs,
            short.steps,
            config.grid,
            lambda spec, bar: train_one(spec, short, corpus, params0, dims, fns, bar),
            lambda labels: factory(labels, short.steps, header),
            DemoError,
        )
        specs = tune.tuned(specs, tuning, DemoError)
    runs: dict[str, Any] = {}
    with factory([s.label for s in specs], config.steps, header) as bar:
        for spec in specs:
            runs[spec.label] = train_one(spec, config, corpus, params0, dims, fns, bar)
    reference = next(
        (s.label for s in config.optimizers if s.name == REFERENCE),
        config.optimizers[0].label,
    )
    target = runs[reference]["final_val_loss"]
    for result in runs.values():
        result["steps_to_reference"] = steps_to_reach(result, target)
    results = {
        "gradax_version": gradax.__version__,
        "jax_version": jax.__version__,
        "device": str(jax.devices()[0]),
        "machine": platform.machine(),
        "config": {
            "steps": config.steps,
            "batch_size": config.batch_size,
            "seed": config.seed,
            "eval_every": config.eval_every,
            "full": config.full,
            "context": config.context,
            "d_model": config.d_model,
            "layers": config.layers,
            "heads": config.heads,
            "data": str(config.data) if config.data else None,
            **header,
        },
        "reference": reference,
        "reference_val_loss": target,
        "optimizers": runs,
        "tuning": tuning,
        "wall_seconds": time.perf_counter() - start,
    }
    (config.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    return results


def main(config: DemoConfig) -> int:
    results = run_demo(config)
    if results["tuning"]:
        tune.print_table(results["tuning"])
    print_table(results)
    line = summary_line(results)
    if line:
        tuned = "with each optimizer at its best rate of the sweep, "
        print((tuned if results["tuning"] else "") + line)
    for line in metrics_plot.clip_lines(results, CLIP):
        print(line)
    written = [config.out / "results.json"]
    if plot(results, config.out / "loss.png"):
        written.append(config.out / "loss.png")
        if metrics_plot.plot(results, config.out / "metrics.png", CLIP):
            written.append(config.out / "metrics.png")
        if results["tuning"] and tune.plot(results["tuning"], config.out / "tune.png"):
            written.append(config.out / "tune.png")
    else:
        print(
            "matplotlib is not installed, so no loss.png (pip install 'gradax[demo]')",
            file=sys.stderr,
        )
    print("wrote " + ", ".join(str(p) for p in written))
    if (config.steps, config.batch_size) == (QUICK.steps, QUICK.batch_size):
        print(
            f"the longer run: gradax demo --full ({FULL.steps} steps of "
            f"{FULL.batch_size} sequences, about 3 times the time)"
        )
    return 0
