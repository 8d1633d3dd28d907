"""ADOPT, Prodigy, AdEMAMix, schedule-free AdamW and MARS against their
authors' torch code (elementwise optimizers: one tensor, no layout change).

  iShohei220/adopt            src/adopt/adopt.py
  konstmish/prodigy           prodigyopt/prodigy.py
  apple/ml-ademamix           pytorch/ademamix.py
  facebookresearch/schedule_free  schedulefree/adamw_schedulefree_reference.py
  AGI-Arena/MARS              MARS/optimizers/mars.py

Every one of these but MARS has an optax twin, whose conventions gradax
follows where the two differ (Prodigy's bias correction; schedule-free's
warmup), so those cases measure documented departures.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax.numpy as jnp

import gradax

from ._harness import Case, checkout, load
from ._torch_loop import run_torch
from .runners import run_gradax

SHAPES = (("2-D", (6, 4)), ("1-D", (5,)), ("stacked", (2, 3, 4)))


def _cases(optimizer, co, path, variants, fixture=None):
    """Every variant on every shape; the fixture keeps the 2-D and 1-D ones
    (the stacked leaf is elementwise the same rule)."""
    out = []
    for label, shape in SHAPES:
        for name, options, make_ref, make_ours in variants:
            out.append(
                Case(
                    optimizer,
                    f"{label} {'x'.join(map(str, shape))}{name}",
                    shape,
                    options,
                    lambda prob, steps, m=make_ref: run_torch(m, prob, steps),
                    lambda prob, steps, m=make_ours: run_gradax(m(), prob, steps),
                    source=(co.repo, co.commit, path),
                    fixture=None if label == "stacked" else fixture,
                )
            )
    return out


def _params(named):
    return [p for _, p in named]


def adopt_cases(fetch_dir: Path) -> list[Case]:
    path = "src/adopt/adopt.py"
    co = checkout(fetch_dir, "iShohei220/adopt", (path,), "ref_adopt")
    module = load("ref_adopt", "src.adopt.adopt")
    o = dict(learning_rate=0.01, b1=0.9, b2=0.9999, eps=1e-6)
    variants = [
        (
            ", clip step^0.25",
            o,
            lambda named: module.ADOPT(
                _params(named), lr=0.01, betas=(0.9, 0.9999), eps=1e-6, foreach=False
            ),
            lambda: gradax.adopt(**o),
        )
    ]
    return _cases("adopt", co, path, variants, "adaptive_authors.json")


def prodigy_cases(fetch_dir: Path) -> list[Case]:
    path = "prodigyopt/prodigy.py"
    co = checkout(fetch_dir, "konstmish/prodigy", (path,), "ref_prodigy")
    module = load("ref_prodigy", "prodigyopt.prodigy")

    def ref(bias_correction):
        return lambda named: module.Prodigy(
            _params(named),
            lr=1.0,
            betas=(0.9, 0.999),
            weight_decay=0.1,
            use_bias_correction=bias_correction,
        )

    o = dict(learning_rate=1.0, betas=(0.9, 0.999), weight_decay=0.1)
    variants = [
        (
            ", wd 0.1, use_bias_correction=True",
            o,
            ref(True),
            lambda: gradax.prodigy(**o),
        ),
        (
            ", wd 0.1, authors' default (no bias correction)",
            {**o, "bias_correction": False},
            ref(False),
            lambda: gradax.prodigy(**o, bias_correction=False),
        ),
    ]
    cases = _cases("prodigy", co, path, variants)
    for c in cases:
        if not c.name.startswith("stacked"):
            c.fixture = "adaptive_authors.json"
    return cases + _prodigy_before_progress(co, path, ref(False), o)


# A learning rate warmed up linearly from 0 over WARMUP steps, and zero
# gradients for the first QUIET: the steps before any progress, where the
# authors' code skips the moments (lr 0) and the step (no progress).
WARMUP, QUIET = 3, 2


def _prodigy_before_progress(co, path, make_ref, options):
    """Prodigy's authors' default (no bias correction) through a warmup
    from 0 and zero first gradients, on the 2-D and 1-D shapes."""
    schedule = gradax.linear_schedule(0.0, options["learning_rate"], WARMUP)

    def lr_at(t):
        # The values gradax's schedule gives at its int32 count (float32,
        # as optax's), so that the two runs see the same learning rates.
        return float(schedule(jnp.asarray(t, jnp.int32)))

    def make_ours():
        rest = {k: v for k, v in options.items() if k != "learning_rate"}
        return gradax.prodigy(schedule, **rest, bias_correction=False)

    def quiet(prob):
        return dataclasses.replace(prob, quiet_steps=QUIET)

    fixture_options = {
        **options,
        "bias_correction": False,
        "warmup_steps": WARMUP,
        "quiet_steps": QUIET,
    }
    return [
        Case(
            "prodigy",
            f"{label} {'x'.join(map(str, shape))}, authors' default, warmup "
            f"from 0 over {WARMUP} steps, first {QUIET} gradients zero",
            shape,
            fixture_options,
            lambda prob, steps: run_torch(make_ref, quiet(prob), steps, lr_at=lr_at),
            lambda prob, steps: run_gradax(make_ours(), quiet(prob), steps),
            source=(co.repo, co.commit, path),
            fixture="adaptive_authors.json",
        )
        for label, shape in SHAPES
        if label != "stacked"
    ]


def ademamix_cases(fetch_dir: Path) -> list[Case]:
    path = "pytorch/ademamix.py"
    co = checkout(fetch_dir, "apple/ml-ademamix", (path,), "ref_ademamix")
    module = load("ref_ademamix", "pytorch.ademamix")
    o = dict(
        learning_rate=0.01,
        b1=0.9,
        b2=0.999,
        b3=0.9999,
        alpha=5.0,
        eps=1e-8,
        weight_decay=0.1,
    )
    variants = [
        (
            ", alpha 5, wd 0.1",
            o,
            lambda named: module.AdEMAMix(
                _params(named),
                lr=0.01,
                betas=(0.9, 0.999, 0.9999),
                alpha=5.0,
                eps=1e-8,
                weight_decay=0.1,
            ),
            lambda: gradax.ademamix(**o),
        )
    ]
    return _cases("ademamix", co, path, variants, "adaptive_authors.json")


def schedule_free_cases(fetch_dir: Path) -> list[Case]:
    path = "schedulefree/adamw_schedulefree_reference.py"
    co = checkout(fetch_dir, "facebookresearch/schedule_free", (path,), "ref_sf")
    module = load("ref_sf", "schedulefree.adamw_schedulefree_reference")

    def ref(warmup):
        def make(named):
            opt = module.AdamWScheduleFreeReference(
                _params(named),
                lr=0.01,
                betas=(0.9, 0.999),
                weight_decay=0.1,
                warmup_steps=warmup,
            )
            opt.train()
            return opt

        return make

    def ours(warmup):
        return lambda: gradax.schedule_free_adamw(
            0.01, warmup_steps=warmup, b1=0.9, b2=0.999, weight_decay=0.1
        )

    # No warmup is warmup_steps=None here: optax's (and so gradax's)
    # warmup_steps=0 is a linear warmup of zero steps that stays at 0.
    variants = [
        (
            ", wd 0.1",
            dict(learning_rate=0.01, warmup_steps=None, weight_decay=0.1),
            ref(0),
            ours(None),
        ),
        (
            ", wd 0.1, warmup 5",
            dict(learning_rate=0.01, warmup_steps=5, weight_decay=0.1),
            ref(5),
            ours(5),
        ),
    ]
    cases = _cases("schedule_free_adamw", co, path, variants)
    for c in cases:
        if "warmup" not in c.name and not c.name.startswith("stacked"):
            c.fixture = "adaptive_authors.json"
    return cases


def mars_cases(fetch_dir: Path) -> list[Case]:
    path = "MARS/optimizers/mars.py"
    co = checkout(fetch_dir, "AGI-Arena/MARS", (path,), "ref_mars")
    module = load("ref_mars", "MARS.optimizers.mars")

    def ref(kind):
        return lambda named: module.MARS(
            _params(named),
            lr=0.003,
            betas=(0.95, 0.99),
            weight_decay=0.1,
            gamma=0.025,
            mars_type=kind,
            lr_1d=0.003,
            betas_1d=(0.9, 0.95),
            weight_decay_1d=0.1,
        )

    def ours(kind):
        return lambda: gradax.mars(
            0.003,
            b1=0.95,
            b2=0.99,
            weight_decay=0.1,
            gamma=0.025,
            mars_type=kind,
            b1_1d=0.9,
            b2_1d=0.95,
            weight_decay_1d=0.1,
        )

    variants = [
        (
            f", {kind}, wd 0.1",
            dict(
                learning_rate=0.003,
                b1=0.95,
                b2=0.99,
                weight_decay=0.1,
                gamma=0.025,
                mars_type=kind,
                b1_1d=0.9,
                b2_1d=0.95,
                weight_decay_1d=0.1,
            ),
            ref(kind),
            ours(kind),
        )
        for kind in ("mars-adamw", "mars-lion")
    ]
    return _cases("mars", co, path, variants, "adaptive_authors.json")


def cases(fetch_dir: Path) -> list[Case]:
    return [
        c
        for make in (
            adopt_cases,
            prodigy_cases,
            ademamix_cases,
            schedule_free_cases,
            mars_cases,
        )
        for c in make(fetch_dir)
    ]
