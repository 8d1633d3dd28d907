"""``gradax.losses`` against ``optax.losses``: names, signatures, values, gradients.

Every case evaluates a loss and its vector-Jacobian product (a fixed,
non-uniform cotangent) in both libraries, and checks dtypes, shapes and
numbers. The cases of a group of losses are compiled together, as one
program.

Where gradax deliberately returns a finite limit and optax NaN (``-inf``
logits with label 0, infinite logits, ...), optax runs on the same inputs
with the infinities replaced by +-1e4, which has the same limit
(``exp(-1e4)`` is 0 in every float dtype), or on an equivalent formulation.
Every gradax value and gradient must be finite.
"""

from __future__ import annotations

import ast
import functools
import inspect
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.scipy.special import logsumexp

import gradax
from gradax import losses as glosses

ROOT = Path(__file__).resolve().parents[2]
BIG = 1e4  # the finite stand-in for inf in optax's reference inputs


def tolerance(dtype: Any) -> float:
    """Relative and absolute tolerance between the two implementations.

    Both evaluate the same formula in ``dtype`` in different operation orders
    (a gather instead of a one-hot dot product, a log-sum-exp instead of a
    shifted sum, ...). Each operation rounds to within eps/2 and a loss
    chains at most a few dozen of them on O(1) values, so 32 eps bounds the
    difference.
    """
    return 32 * float(jnp.finfo(dtype).eps)


class Case(NamedTuple):
    """One comparison of ``call(gradax.losses, *args)`` with optax's."""

    group: str  # the cases of a group are compiled as one program
    id: str
    call: Callable[..., Any]
    args: tuple
    diff: tuple[int, ...] = (0,)  # the arguments to differentiate
    ref_args: tuple | None = None  # optax's inputs, when they differ
    ref: Callable[..., Any] | None = None  # optax's call, when it differs
    optax_nan: bool = False  # optax gives NaN (compared only where it does not)


def named(name: str, **kwargs: Any) -> Callable[..., Any]:
    """``lambda lib, *args: lib.<name>(*args, **kwargs)``."""

    def call(lib, *args):
        return getattr(lib, name)(*args, **kwargs)

    return call


def finite(*arrays: np.ndarray) -> tuple:
    """The arrays with +-inf replaced by +-BIG, in their own dtypes."""
    out = []
    for a in arrays:
        if np.issubdtype(a.dtype, np.floating) or a.dtype == jnp.bfloat16:
            a = np.where(np.isinf(a), np.sign(a) * BIG, a).astype(a.dtype)
        out.append(a)
    return tuple(out)


_rng = np.random.default_rng(0)


def normal(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (scale * _rng.standard_normal(shape)).astype(np.float32)


def simplex(*shape: int) -> np.ndarray:
    """Probability vectors along the last axis, every entry >= ~0.01."""
    x = _rng.gamma(1.0, size=shape) + 0.05
    return (x / x.sum(-1, keepdims=True)).astype(np.float32)


def one_hot(labels: np.ndarray, num: int) -> np.ndarray:
    return np.eye(num, dtype=np.float32)[labels]


F16, BF16 = np.float16, jnp.bfloat16
LOGITS = normal(4, 5)
LABELS = np.array([0, 3, 1, 4])
ONE_HOT = one_hot(LABELS, 5)
SOFT = simplex(4, 5)
MASK = _rng.random((4, 5)) < 0.6
MASK[:, 0] = MASK[:, 3] = True
MASK[2] = False  # an example with no class left
ROW_MASK = np.array([True, False, True, True])
NEG_INF = LOGITS.copy()
NEG_INF[0, 2] = NEG_INF[1, 4] = NEG_INF[3, 1] = -np.inf  # never on the label
LOGITS3 = normal(3, 4, 5)
SOFT3 = simplex(3, 20).reshape(3, 4, 5)


def _softmax_cases() -> list[Case]:
    ce = "softmax_cross_entropy"
    g = "softmax"
    return [
        Case(g, "sce", named(ce), (LOGITS, ONE_HOT), (0, 1)),
        Case(g, "sce-soft", named(ce), (LOGITS, SOFT), (0, 1)),
        Case(g, "sce-axis0", named(ce, axis=0), (LOGITS.T, SOFT.T)),
        Case(g, "sce-axes", named(ce, axis=(1, 2)), (LOGITS3, SOFT3), (0, 1)),
        Case(g, "sce-axis-none", named(ce, axis=None), (LOGITS, SOFT)),
        Case(
            g,
            "sce-where",
            named(ce, where=MASK),
            (LOGITS, SOFT),
            (0, 1),
            optax_nan=True,
        ),
        # optax: NaN label gradients where the mask leaves classes out.
        Case(
            g,
            "sce-where-rows",
            named(ce, where=ROW_MASK),
            (LOGITS, SOFT),
            (0, 1),
            optax_nan=True,
        ),
        Case(g, "sce-f16", named(ce), (LOGITS.astype(F16), ONE_HOT)),
        Case(g, "sce-bf16", named(ce), (LOGITS.astype(BF16), SOFT.astype(BF16))),
        Case(
            g,
            "sce-smoothed",
            lambda lib, x, y: lib.softmax_cross_entropy(x, lib.smooth_labels(y, 0.1)),
            (LOGITS, ONE_HOT),
            (0, 1),
        ),
        Case(
            g,
            "sce-neginf",
            named(ce),
            (NEG_INF, ONE_HOT),
            (0,),
            finite(NEG_INF, ONE_HOT),
        ),
        Case(
            g,
            "sce-neginf-where",
            named(ce, where=MASK),
            (NEG_INF, ONE_HOT),
            (0,),
            finite(NEG_INF, ONE_HOT),
        ),
        Case(g, "safe", named("safe_" + ce), (LOGITS, SOFT), (0, 1)),
        Case(g, "safe-neginf", named("safe_" + ce), (NEG_INF, ONE_HOT)),
    ]


def _integer_cases() -> list[Case]:
    ce = "softmax_cross_entropy_with_integer_labels"
    g = "integer"
    return [
        Case(g, "int", named(ce), (LOGITS, LABELS)),
        Case(g, "int-axis0", named(ce, axis=0), (LOGITS.T, LABELS)),
        Case(g, "int-axes", named(ce, axis=(1, 2)), (LOGITS3, np.array([0, 7, 19]))),
        Case(
            g, "int-axes-rev", named(ce, axis=(2, 1)), (LOGITS3, np.array([3, 8, 12]))
        ),
        Case(g, "int-where", named(ce, where=MASK), (LOGITS, LABELS)),
        Case(g, "int-where-rows", named(ce, where=ROW_MASK), (LOGITS, LABELS)),
        Case(g, "int-neginf", named(ce), (NEG_INF, LABELS)),
        Case(g, "int-f16", named(ce), (LOGITS.astype(F16), LABELS)),
    ]


def _poly_cases() -> list[Case]:
    poly = "poly_loss_cross_entropy"
    full_rows = np.broadcast_to(ROW_MASK[:, None], LOGITS.shape)
    g = "poly"
    return [
        Case(g, "poly", named(poly), (LOGITS, SOFT), (0, 1)),
        Case(g, "poly-eps", named(poly, epsilon=-1.0), (LOGITS, ONE_HOT)),
        Case(g, "poly-where", named(poly, where=MASK), (LOGITS, SOFT)),
        # optax needs the per-example mask broadcast to the logits' shape.
        Case(
            g,
            "poly-where-rows",
            named(poly, where=ROW_MASK),
            (LOGITS, SOFT),
            ref=named(poly, where=full_rows),
        ),
        Case(g, "poly-f16", named(poly), (LOGITS.astype(F16), SOFT.astype(F16))),
        Case(
            g,
            "poly-neginf",
            named(poly),
            (NEG_INF, ONE_HOT),
            (0,),
            finite(NEG_INF, ONE_HOT),
        ),
    ]


LOG_P = np.log(simplex(4, 5))
LOG_P_INF = LOG_P.copy()
LOG_P_INF[1, 2] = -np.inf
TARGETS_0 = SOFT.copy()
TARGETS_0[1, 2] = TARGETS_0[0, 0] = 0.0  # a zero target, against -inf at [1, 2]
POSITIVE = (_rng.random((4, 5)) + 0.2).astype(np.float32)


def _divergence_cases() -> list[Case]:
    g = "divergence"
    log_targets = np.log(SOFT)
    log_targets_inf = np.where(TARGETS_0 == 0, -np.inf, log_targets).astype(np.float32)

    def convex(lib, *args):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return lib.convex_kl_divergence(*args)

    return [
        Case(g, "kl", named("kl_divergence"), (LOG_P, SOFT), (0, 1)),
        Case(g, "kl-axis0", named("kl_divergence", axis=0), (LOG_P.T, SOFT.T), (0, 1)),
        Case(g, "kl-where", named("kl_divergence", where=MASK), (LOG_P, SOFT), (0, 1)),
        Case(
            g, "kl-f16", named("kl_divergence"), (LOG_P.astype(F16), SOFT.astype(F16))
        ),
        Case(
            g,
            "kl-zero-target",
            named("kl_divergence"),
            (LOG_P_INF, TARGETS_0),
            (0,),
            finite(LOG_P_INF, TARGETS_0),
        ),
        Case(
            g,
            "kl-log",
            named("kl_divergence_with_log_targets"),
            (LOG_P, log_targets),
            (0, 1),
        ),
        Case(
            g,
            "kl-log-bf16",
            named("kl_divergence_with_log_targets"),
            (LOG_P.astype(BF16), log_targets.astype(BF16)),
            (0, 1),
        ),
        Case(
            g,
            "kl-log-neginf",
            named("kl_divergence_with_log_targets"),
            (LOG_P_INF, log_targets_inf),
            (0, 1),
            finite(LOG_P_INF, log_targets_inf),
        ),
        Case(g, "gkl", named("generalized_kl_divergence"), (LOG_P, POSITIVE), (0, 1)),
        Case(
            g,
            "gkl-where",
            named("generalized_kl_divergence", where=MASK, axis=0),
            (LOG_P, POSITIVE),
            (0, 1),
        ),
        Case(g, "convex-kl", convex, (LOG_P, POSITIVE), (0, 1)),
    ]


SCORES = normal(6, 5, scale=2.0)
SCORE_LABELS = np.array([0, 4, 2, 2, 1, 3])
SCORES_INF = SCORES.copy()
SCORES_INF[0, 3] = SCORES_INF[2, 0] = SCORES_INF[5, 4] = -np.inf
BINARY = np.array([[0.0, 1.0, 1.0, 0.0, 1.0]] * 4, np.float32)
SIGNS = np.where(_rng.random((4, 5)) < 0.5, -1.0, 1.0).astype(np.float32)
SATURATED = np.array([[-60.0, 60.0, -30.0, 30.0], [-12.0, 12.0, 0.5, -0.5]], np.float32)
INFINITE = np.array([-np.inf, np.inf, 1.0, -2.0], np.float32)
INF_LABELS = np.array([0.0, 1.0, 1.0, 0.0], np.float32)


def _binary_cases() -> list[Case]:
    bce, focal = "sigmoid_binary_cross_entropy", "sigmoid_focal_loss"
    g = "binary"
    sat_labels = np.array([[0.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.3, 0.7]], np.float32)
    return [
        Case(g, "bce", named(bce), (LOGITS, BINARY.astype(np.int32))),
        Case(g, "bce-soft", named(bce), (LOGITS, SOFT), (0, 1)),
        Case(g, "bce-broadcast", named(bce), (LOGITS, BINARY[0])),
        Case(g, "bce-f16", named(bce), (LOGITS.astype(F16), BINARY)),
        Case(g, "bce-bf16", named(bce), (LOGITS.astype(BF16), SOFT), (0, 1)),
        Case(g, "bce-saturated", named(bce), (SATURATED, sat_labels), (0, 1)),
        Case(
            g,
            "bce-inf",
            named(bce),
            (INFINITE, INF_LABELS),
            (0,),
            finite(INFINITE, INF_LABELS),
        ),
        Case(g, "focal", named(focal), (LOGITS, BINARY)),
        Case(g, "focal-alpha", named(focal, alpha=0.25), (LOGITS, BINARY)),
        Case(g, "focal-gamma", named(focal, gamma=0.5), (LOGITS, SOFT), (0, 1)),
        Case(g, "focal-f16", named(focal, alpha=0.75), (LOGITS.astype(F16), BINARY)),
        Case(g, "focal-saturated", named(focal, gamma=1.5), (SATURATED, sat_labels)),
        Case(
            g,
            "focal-inf",
            named(focal),
            (INFINITE, INF_LABELS),
            (0,),
            finite(INFINITE, INF_LABELS),
        ),
        Case(g, "hinge", named("hinge_loss"), (LOGITS, SIGNS), (0, 1)),
        Case(g, "perceptron", named("perceptron_loss"), (LOGITS, SIGNS), (0, 1)),
        Case(g, "sparsemax", named("sparsemax_loss"), (2.0 * LOGITS, BINARY)),
    ]


def _multiclass_cases() -> list[Case]:
    g = "multiclass"
    hinge, perceptron = "multiclass_hinge_loss", "multiclass_perceptron_loss"
    sparsemax = "multiclass_sparsemax_loss"
    scores3 = normal(2, 3, 5)
    labels3 = np.array([[0, 4, 2], [1, 1, 3]])

    def flat(lib, s, y):
        return lib.multiclass_sparsemax_loss(s.reshape(-1, 5), y.reshape(-1)).reshape(
            2, 3
        )

    def as_f32(lib, s, y):
        return lib.multiclass_sparsemax_loss(s.astype(jnp.float32), y)

    return [
        Case(g, "mc-hinge", named(hinge), (SCORES, SCORE_LABELS)),
        Case(g, "mc-hinge-f16", named(hinge), (SCORES.astype(F16), SCORE_LABELS)),
        Case(
            g,
            "mc-hinge-neginf",
            named(hinge),
            (SCORES_INF, SCORE_LABELS),
            (0,),
            finite(SCORES_INF, SCORE_LABELS),
        ),
        Case(g, "mc-perceptron", named(perceptron), (SCORES, SCORE_LABELS)),
        Case(
            g,
            "mc-perceptron-neginf",
            named(perceptron),
            (SCORES_INF, SCORE_LABELS),
            (0,),
            finite(SCORES_INF, SCORE_LABELS),
        ),
        Case(g, "mc-sparsemax", named(sparsemax), (SCORES, SCORE_LABELS)),
        Case(g, "mc-sparsemax-neginf", named(sparsemax), (SCORES_INF, SCORE_LABELS)),
        # optax supports one batch axis and cannot differentiate float16.
        Case(g, "mc-sparsemax-3d", named(sparsemax), (scores3, labels3), ref=flat),
        Case(
            g,
            "mc-sparsemax-f16",
            named(sparsemax),
            (SCORES.astype(F16), SCORE_LABELS),
            ref=as_f32,
        ),
    ]


def _temperature_max(v, *, temperature=1.0):
    return temperature * logsumexp(v / temperature)


def _fenchel_young_cases() -> list[Case]:
    g = "fenchel_young"

    def fy(max_fun, **kwargs):
        def call(lib, scores, targets):
            return lib.make_fenchel_young_loss(max_fun)(scores, targets, **kwargs)

        return call

    return [
        Case(g, "fy", fy(logsumexp), (LOGITS, SOFT), (0, 1)),
        Case(g, "fy-kwargs", fy(_temperature_max, temperature=0.5), (LOGITS3, SOFT3)),
        Case(
            g,
            "fy-neginf",
            fy(logsumexp),
            (NEG_INF, ONE_HOT),
            (0,),
            finite(NEG_INF, ONE_HOT),
        ),
    ]


CTC_LOGITS = normal(2, 6, 5)
CTC_LOGIT_PAD = np.array([[0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 1, 1]], np.float32)
CTC_LABELS = np.array([[1, 1, 3], [2, 4, 0]])
CTC_LABEL_PAD = np.array([[0, 0, 0], [0, 0, 1]], np.float32)


def _ctc_cases() -> list[Case]:
    g = "ctc"
    forward = "ctc_loss_with_forward_probs"
    inf_logits = CTC_LOGITS.copy()
    inf_logits[:, :, 2] = -np.inf  # never a label of the first sequence
    inf_logits[1, :, 2] = CTC_LOGITS[1, :, 2]
    args = (CTC_LOGITS, CTC_LOGIT_PAD, CTC_LABELS, CTC_LABEL_PAD)
    return [
        Case(g, "ctc-forward", named(forward), args),
        Case(g, "ctc-blank", named("ctc_loss", blank_id=2), args),
        Case(g, "ctc-f16", named(forward), (CTC_LOGITS.astype(F16), *args[1:])),
        Case(
            g,
            "ctc-neginf",
            named(forward),
            (inf_logits, *args[1:]),
            (0,),
            finite(inf_logits, *args[1:]),
        ),
    ]


RANK_LABELS = _rng.integers(0, 4, size=(3, 5)).astype(np.float32)
RANK_MASK = np.array([[1, 1, 1, 0, 0], [0, 0, 0, 0, 0], [1, 1, 0, 1, 1]], bool)
RANK_WEIGHTS = (_rng.random((3, 5)) + 0.5).astype(np.float32)


def _ranking_cases() -> list[Case]:
    g = "ranking"
    rank = "ranking_softmax_loss"
    scores = normal(3, 5)
    return [
        Case(g, "rank", named(rank), (scores, RANK_LABELS)),
        Case(g, "rank-where", named(rank, where=RANK_MASK), (scores, RANK_LABELS)),
        Case(
            g, "rank-weights", named(rank, weights=RANK_WEIGHTS), (scores, RANK_LABELS)
        ),
        Case(
            g,
            "rank-where-none",
            named(rank, where=RANK_MASK, reduce_fn=None),
            (scores, RANK_LABELS),
        ),
        Case(
            g,
            "rank-where-sum",
            named(rank, where=RANK_MASK, reduce_fn=jnp.sum),
            (scores, RANK_LABELS),
        ),
        Case(
            g,
            "rank-all-masked",
            named(rank, where=np.zeros((3, 5), bool)),
            (scores, RANK_LABELS),
        ),
        Case(
            g,
            "rank-f16",
            named(rank, where=RANK_MASK),
            (scores.astype(F16), RANK_LABELS),
        ),
    ]


PRED = normal(4, 6)
TARGET = normal(4, 6)
ERRORS = np.array([[-3.0, -0.7, -0.2, 0.1, 0.6, 2.5]] * 4, np.float32) + TARGET


def _regression_cases() -> list[Case]:
    g = "regression"
    cos = "cosine_similarity"
    where = _rng.random((4, 6)) < 0.7
    where[:, 0] = True
    return [
        Case(g, "squared", named("squared_error"), (PRED, TARGET), (0, 1)),
        Case(g, "squared-none", named("squared_error"), (PRED,)),
        Case(g, "l2", named("l2_loss"), (PRED, TARGET), (0, 1)),
        Case(g, "huber", named("huber_loss"), (ERRORS, TARGET), (0, 1)),
        Case(g, "huber-none", named("huber_loss", delta=0.5), (ERRORS - TARGET,)),
        Case(g, "huber-bf16", named("huber_loss"), ((ERRORS - TARGET).astype(BF16),)),
        Case(g, "log-cosh", named("log_cosh"), (ERRORS, TARGET), (0, 1)),
        Case(g, "log-cosh-big", named("log_cosh"), (100.0 * (ERRORS - TARGET),)),
        Case(g, "log-cosh-bf16", named("log_cosh"), ((ERRORS - TARGET).astype(BF16),)),
        Case(g, "cos", named(cos), (PRED, TARGET), (0, 1)),
        Case(g, "cos-eps", named(cos, epsilon=0.5), (0.3 * PRED, TARGET), (0, 1)),
        Case(g, "cos-axes", named(cos, axis=(0, 1)), (PRED, TARGET), (0, 1)),
        Case(g, "cos-where", named(cos, where=where), (PRED, TARGET), (0, 1)),
        Case(g, "cos-f16", named(cos), (PRED.astype(F16), TARGET.astype(F16))),
        Case(g, "cos-distance", named("cosine_distance"), (PRED, TARGET), (0, 1)),
        Case(
            g,
            "cos-distance-where",
            named("cosine_distance", where=where, epsilon=0.1),
            (PRED, TARGET),
        ),
    ]


SEG_LOGITS = normal(2, 4, 4, 3)
SEG_TARGETS = one_hot(_rng.integers(0, 3, size=(2, 4, 4)), 3)
BIN_LOGITS = normal(2, 4, 4)
BIN_TARGETS = (_rng.random((2, 4, 4)) < 0.5).astype(np.float32)


def _segmentation_cases() -> list[Case]:
    g = "segmentation"
    dice = "dice_loss"
    weights = np.array([0.2, 1.0, 2.0], np.float32)
    return [
        Case(g, "dice", named(dice), (SEG_LOGITS, SEG_TARGETS)),
        Case(
            g,
            "dice-tversky",
            named(dice, alpha=0.3, beta=0.7),
            (SEG_LOGITS, SEG_TARGETS),
        ),
        Case(
            g,
            "dice-weights",
            named(dice, class_weights=weights),
            (SEG_LOGITS, SEG_TARGETS),
        ),
        Case(
            g,
            "dice-sum",
            named(dice, reduction="sum", smooth=0.1),
            (SEG_LOGITS, SEG_TARGETS),
        ),
        Case(g, "dice-none", named(dice, reduction="none"), (SEG_LOGITS, SEG_TARGETS)),
        Case(
            g,
            "dice-background",
            named(dice, ignore_background=True),
            (SEG_LOGITS, SEG_TARGETS),
        ),
        Case(g, "dice-axis", named(dice, axis=(1,)), (SEG_LOGITS, SEG_TARGETS)),
        Case(
            g, "dice-binary-channel", named(dice), (BIN_LOGITS, BIN_TARGETS[..., None])
        ),
        Case(
            g,
            "dice-f16",
            named(dice),
            (SEG_LOGITS.astype(F16), SEG_TARGETS.astype(F16)),
        ),
        Case(
            g,
            "gdice",
            named("multiclass_generalized_dice_loss"),
            (SEG_LOGITS, SEG_TARGETS),
        ),
        Case(
            g,
            "gdice-background",
            named(
                "multiclass_generalized_dice_loss", ignore_background=True, smooth=0.5
            ),
            (SEG_LOGITS, SEG_TARGETS),
        ),
        Case(g, "bdice", named("binary_dice_loss"), (BIN_LOGITS, BIN_TARGETS)),
        # optax checks the probabilities eagerly; gradax under jit as well.
        Case(
            g,
            "bdice-probabilities",
            lambda lib, z, t: lib.binary_dice_loss(
                jax.nn.sigmoid(z), t, apply_sigmoid=False
            ),
            (BIN_LOGITS, BIN_TARGETS),
            ref=named("binary_dice_loss"),
        ),
    ]


EMB = normal(6, 4)
EMB_LABELS = np.array([0, 0, 1, 1, 1, 2])


def _embedding_cases() -> list[Case]:
    g = "embedding"
    triplet = "triplet_margin_loss"
    a, p, n = normal(4, 5), normal(4, 5), normal(4, 5)
    return [
        Case(g, "ntxent", named("ntxent"), (EMB, EMB_LABELS)),
        Case(
            g, "ntxent-temperature", named("ntxent", temperature=0.5), (EMB, EMB_LABELS)
        ),
        Case(
            g,
            "ntxent-f16",
            named("ntxent", temperature=0.5),
            (EMB.astype(F16), EMB_LABELS),
        ),
        Case(g, "ntxent-no-negatives", named("ntxent"), (EMB, np.zeros(6, np.int32))),
        Case(g, "triplet", named(triplet), (a, p, n), (0, 1, 2)),
        Case(
            g,
            "triplet-degree",
            named(triplet, norm_degree=4, margin=2.0),
            (a, p, n),
            (0, 1, 2),
        ),
        Case(
            g, "triplet-axis0", named(triplet, axis=0, eps=1e-3), (a, p, n), (0, 1, 2)
        ),
    ]


def _smoothing_cases() -> list[Case]:
    g = "smoothing"
    where = MASK.copy()
    where[2, 1] = True  # no example without a class here
    return [
        Case(g, "smooth", named("smooth_labels", alpha=0.1), (ONE_HOT,)),
        Case(g, "smooth-axis0", named("smooth_labels", alpha=0.2, axis=0), (ONE_HOT,)),
        # Its own group: optax's answer needs a jnp.size that takes axes.
        Case(
            "smoothing-axes",
            "smooth-axes",
            named("smooth_labels", alpha=0.2, axis=(0, 1)),
            (ONE_HOT,),
        ),
        Case(
            g, "smooth-where", named("smooth_labels", alpha=0.3, where=where), (SOFT,)
        ),
        Case(
            g, "smooth-f16", named("smooth_labels", alpha=0.1), (ONE_HOT.astype(F16),)
        ),
    ]


CASES = [
    *_softmax_cases(),
    *_integer_cases(),
    *_poly_cases(),
    *_divergence_cases(),
    *_binary_cases(),
    *_multiclass_cases(),
    *_fenchel_young_cases(),
    *_ctc_cases(),
    *_ranking_cases(),
    *_regression_cases(),
    *_segmentation_cases(),
    *_embedding_cases(),
    *_smoothing_cases(),
]
assert len({c.id for c in CASES}) == len(CASES), "case ids must be unique"


def _cotangent(x: jax.Array) -> jax.Array:
    """A fixed cotangent with distinct weights in [0.5, 1.5]."""
    weights = jnp.linspace(0.5, 1.5, max(x.size, 1))[: x.size]
    return weights.reshape(x.shape).astype(x.dtype)


def _value_and_vjp(lib, call, args, diff):
    """The loss and the gradients of <cotangent, loss> for ``args[diff]``."""

    def partial(*variables):
        full = list(args)
        for i, v in zip(diff, variables, strict=True):
            full[i] = v
        return call(lib, *full)

    value, vjp = jax.vjp(partial, *(args[i] for i in diff))
    return value, vjp(jax.tree.map(_cotangent, value))


# Compiling is most of this file's time and the programs run once on small
# arrays: no LLVM optimization and XLA's older CPU emitters compile ~3x faster
# (the arithmetic is the same IEEE arithmetic).
_COMPILE_OPTIONS = {
    "xla_backend_optimization_level": 0,
    "xla_cpu_use_fusion_emitters": False,
}


def _compiled(fn: Callable[..., Any], *args: Any) -> Any:
    """``jax.jit(fn)(*args)`` compiled with the options above, on the host.

    Each option this XLA does not know is left out (jaxlib 0.12 dropped the
    emitters switch), the others kept: compiled plainly, at LLVM's default
    optimization, jaxlib 0.12.1's LLVM aborts the process on the poly-f16
    case on an AMD EPYC host ("Cannot select: v16f16 SUBV_BROADCAST_LOAD",
    an instruction-selection bug; optax's own poly loss does not hit it).
    """
    lowered = jax.jit(fn).lower(*args)
    options = dict(_COMPILE_OPTIONS)
    while True:
        try:
            executable = lowered.compile(compiler_options=options)
            break
        except Exception as error:  # noqa: BLE001 - XLA's error for an option
            unknown = [name for name in options if repr(name) in str(error)]
            if not unknown:
                raise
            del options[unknown[0]]
    return jax.device_get(executable(*args))


def _run_group(cases: list[Case]) -> dict[str, Any]:
    """Both libraries on every case of a group, compiled as one program."""

    def run(all_args, all_ref_args):
        out = {}
        for case, args, ref_args in zip(cases, all_args, all_ref_args, strict=True):
            ref_call = case.ref or case.call
            out[case.id] = (
                _value_and_vjp(glosses, case.call, args, case.diff),
                _value_and_vjp(optax.losses, ref_call, ref_args, case.diff),
            )
        return out

    all_args = [tuple(jnp.asarray(a) for a in c.args) for c in cases]
    all_ref = [tuple(jnp.asarray(a) for a in (c.ref_args or c.args)) for c in cases]
    return _compiled(run, all_args, all_ref)


def _compute_dtype(args: tuple) -> Any:
    """The least precise floating dtype among the arguments."""
    dtypes = [a.dtype for a in args if jnp.issubdtype(a.dtype, jnp.floating)]
    return max(dtypes, key=lambda d: float(jnp.finfo(d).eps))


def _as_f64(x: Any) -> np.ndarray:
    return np.asarray(jnp.asarray(x, jnp.float32), np.float64)


def _compare(case: Case, ours: Any, theirs: Any) -> None:
    """Same tree, shapes, dtypes and numbers; gradax finite everywhere."""
    tol = tolerance(_compute_dtype(case.args))
    ours_leaves, ours_tree = jax.tree.flatten(ours)
    theirs_leaves, theirs_tree = jax.tree.flatten(theirs)
    assert ours_tree == theirs_tree
    optax_nans = 0
    for mine, ref in zip(ours_leaves, theirs_leaves, strict=True):
        assert mine.shape == ref.shape
        if case.ref is None:  # an equivalent optax call may compute in another dtype
            assert mine.dtype == ref.dtype, (mine.dtype, ref.dtype)
        mine, ref = _as_f64(mine), _as_f64(ref)
        assert np.all(np.isfinite(mine)), "gradax gave a non-finite number"
        if case.optax_nan:
            optax_nans += np.isnan(ref).sum()
            mine, ref = mine[~np.isnan(ref)], ref[~np.isnan(ref)]
        np.testing.assert_allclose(mine, ref, rtol=tol, atol=tol)
    assert optax_nans or not case.optax_nan, "optax no longer gives NaN here"


def _size_takes_axes() -> bool:
    """Whether ``jnp.size`` takes a tuple of axes; jax 0.5.3 hands ``axis``
    to ``numpy.size``, which with NumPy 2.2 takes one."""
    try:
        return jnp.size(jnp.zeros((2, 3)), axis=(0, 1)) == 6
    except TypeError:
        return False


# optax.smooth_labels counts the classes with jnp.size(labels, axis).
SMOOTHING_AXES = pytest.mark.skipif(
    not _size_takes_axes(),
    reason="optax.smooth_labels(axis=(0, 1)), the reference, needs a jnp.size "
    f"that takes several axes; jax {jax.__version__} with NumPy "
    f"{np.__version__} takes one",
)
GROUPS = [
    pytest.param(g, marks=SMOOTHING_AXES if g == "smoothing-axes" else ())
    for g in sorted({c.group for c in CASES})
]


@pytest.mark.parametrize("group", GROUPS)
def test_matches_optax(group: str):
    """Values and gradients of every case of ``group``; all failures listed."""
    cases = [c for c in CASES if c.group == group]
    results = _run_group(cases)
    failures = []
    for case in cases:
        try:
            _compare(case, *results[case.id])
        except AssertionError as error:
            failures.append(f"{case.id}: {error}")
    assert not failures, "\n\n".join(failures)


OPTAX_NAMES = sorted(n for n in dir(optax.losses) if not n.startswith("_"))


def test_every_optax_loss_exists():
    missing = [n for n in OPTAX_NAMES if not hasattr(glosses, n)]
    assert not missing, f"missing from gradax.losses: {missing}"


def _parameters(fn: Callable[..., Any]) -> list[tuple]:
    return [
        (p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()
    ]


@pytest.mark.parametrize("name", OPTAX_NAMES)
def test_signature_matches_optax(name: str):
    assert _parameters(getattr(glosses, name)) == _parameters(
        getattr(optax.losses, name)
    )


def test_top_level_exports():
    shared = set(dir(optax)) & set(OPTAX_NAMES)
    assert len(shared) >= 19
    for name in shared:
        assert getattr(gradax, name) is getattr(glosses, name), name
    assert gradax.losses is glosses


def test_package_imports_only_jax_numpy_and_the_standard_library():
    allowed = {"jax", "numpy", "__future__", "collections", "functools", "math"}
    allowed |= {"operator", "typing", "warnings"}
    for path in sorted((ROOT / "gradax" / "losses").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                roots = {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: only inside gradax.losses
                    assert node.level == 1, f"{path.name} imports from outside"
                    continue
                roots = {node.module.split(".")[0]}
            else:
                continue
            assert roots <= allowed, f"{path.name} imports {roots - allowed}"


_INT = np.arange(6, dtype=np.int32).reshape(2, 3)
_ERRORS = [
    ("softmax_cross_entropy", (_INT, _INT), {}, TypeError),
    (
        "softmax_cross_entropy_with_integer_labels",
        (LOGITS, LABELS),
        {"axis": None},
        ValueError,
    ),
    ("sigmoid_binary_cross_entropy", (_INT, _INT), {}, TypeError),
    ("kl_divergence", (LOG_P, LABELS), {}, TypeError),
    ("poly_loss_cross_entropy", (LOGITS, ONE_HOT.astype(np.int32)), {}, TypeError),
    ("squared_error", (PRED, TARGET[:, :3]), {}, ValueError),
    ("perceptron_loss", (PRED, TARGET[0]), {}, ValueError),
    ("cosine_similarity", (PRED, _INT), {}, TypeError),
    (
        "ctc_loss",
        (CTC_LOGITS[0], CTC_LOGIT_PAD, CTC_LABELS, CTC_LABEL_PAD),
        {},
        ValueError,
    ),
    (
        "ctc_loss",
        (CTC_LOGITS, CTC_LOGIT_PAD, CTC_LABELS[:1], CTC_LABEL_PAD[:1]),
        {},
        ValueError,
    ),
    ("ntxent", (EMB, EMB_LABELS[:4]), {}, ValueError),
    ("dice_loss", (SEG_LOGITS, SEG_TARGETS), {"reduction": "max"}, ValueError),
    ("dice_loss", (SEG_LOGITS, SEG_TARGETS), {"apply_softmax": False}, ValueError),
    ("dice_loss", (SEG_LOGITS, SEG_TARGETS[..., :2]), {}, ValueError),
    (
        "dice_loss",
        (SEG_LOGITS, SEG_TARGETS),
        {"class_weights": np.ones((1, 3))},
        ValueError,
    ),
    ("triplet_margin_loss", (_INT, _INT, _INT), {}, TypeError),
]


@pytest.mark.parametrize(
    ("name", "args", "kwargs", "error"),
    _ERRORS,
    ids=[f"{e[0]}-{i}" for i, e in enumerate(_ERRORS)],
)
def test_errors_like_optax(name, args, kwargs, error):
    for lib in (optax.losses, glosses):
        with pytest.raises(error):
            getattr(lib, name)(*(jnp.asarray(a) for a in args), **kwargs)


def test_convex_kl_divergence_is_deprecated():
    with pytest.warns(DeprecationWarning, match="generalized_kl_divergence"):
        jax.jit(glosses.convex_kl_divergence)(LOG_P, SOFT)


def _sum_grads(fn: Callable[..., Any], *args: Any) -> tuple:
    return jax.grad(lambda *a: jnp.sum(fn(*a)), argnums=tuple(range(len(args))))(*args)


def test_limits_where_optax_gives_nan():
    """The conventions gradax adds, each checked against its definition."""
    zero_row = jnp.array([[0.0, 0.0], [1.0, 2.0]])
    other = jnp.array([[1.0, 1.0], [3.0, 1.0]])
    rows = jnp.array([[False, False], [True, True]])
    no_pairs = jnp.arange(6)

    def limits(emb, log_p, targets, soft, neg_inf, labels):
        return {
            # Zero vectors (or vectors `where` leaves out) have similarity 0.
            "cos": glosses.cosine_similarity(zero_row, other),
            "cos_ref": optax.losses.cosine_similarity(zero_row[1], other[1]),
            "cos_grads": _sum_grads(glosses.cosine_similarity, zero_row, other),
            "masked_grads": _sum_grads(
                lambda x, y: glosses.cosine_distance(x, y, where=rows), other, other
            ),
            # No positive pair: nothing to average, the loss is 0.
            "ntxent": glosses.ntxent(emb, no_pairs),
            "ntxent_grads": _sum_grads(lambda e: glosses.ntxent(e, no_pairs), emb),
            # A zero target has a finite slope.
            "kl_grads": _sum_grads(glosses.kl_divergence, log_p, targets),
            # Smoothing over no class leaves the labels scaled by 1 - alpha.
            "smooth": glosses.smooth_labels(soft, 0.3, where=MASK),
            "smooth_ref": optax.losses.smooth_labels(soft, 0.3, where=MASK),
            # Second derivatives at masked classes.
            "hessian": jax.hessian(lambda x: glosses.softmax_cross_entropy(x, labels))(
                neg_inf
            ),
        }

    out = _compiled(limits, EMB, LOG_P, TARGETS_0, SOFT, NEG_INF[0], ONE_HOT[0])
    assert out["cos"][0] == 0.0
    np.testing.assert_allclose(out["cos"][1], out["cos_ref"], rtol=1e-6)
    assert out["ntxent"] == 0.0
    finite = ("cos_grads", "masked_grads", "ntxent_grads", "kl_grads", "hessian")
    for leaf in jax.tree.leaves([out[k] for k in finite]):
        assert np.all(np.isfinite(leaf))
    np.testing.assert_allclose(out["smooth"][2], 0.7 * SOFT[2], rtol=1e-6)
    valid = MASK.any(1)
    np.testing.assert_allclose(out["smooth"][valid], out["smooth_ref"][valid])


def test_dice_probabilities_are_checked_eagerly_and_work_under_jit():
    probs = jax.nn.softmax(jnp.asarray(SEG_LOGITS), axis=-1)
    targets = jnp.asarray(SEG_TARGETS)
    expected = optax.losses.dice_loss(probs, targets, apply_softmax=False)
    eager = glosses.dice_loss(probs, targets, apply_softmax=False)
    jitted = jax.jit(functools.partial(glosses.dice_loss, apply_softmax=False))
    for got in (eager, jitted(probs, targets)):
        np.testing.assert_allclose(got, expected, rtol=tolerance(jnp.float32))
