"""Newton–Schulz coefficient schemes, and the Polar Express generator.

A scheme is a (T, 3) table of quintic coefficients (a, b, c): step t maps
`X -> a X + (b A + c A^2) X` with `A = X X^T`, i.e. applies the odd
polynomial `p(s) = a s + b s^3 + c s^5` to every singular value. All tables
are NumPy float64 arrays, built without touching a device.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from .._core.declarations import OneOf

# Keller Jordan's coefficients, used at every step (KellerJordan/Muon,
# torch.optim.Muon, optax's default).
KELLER = ((3.4445, -4.7750, 2.0315),)

# Jiacheng You's five-step table (optax's 'dion' preset).
YOU5 = (
    (4.0848, -6.8946, 2.9270),
    (3.9505, -6.3029, 2.6377),
    (3.7418, -5.5913, 2.3037),
    (2.8769, -3.1427, 1.2046),
    (2.8366, -3.0525, 1.2012),
)

# Jiacheng You's six-step table, in units of 1/1024.
JIACHENG6 = tuple(
    tuple(v / 1024 for v in row)
    for row in (
        (3955, -8306, 5008),
        (3735, -6681, 3463),
        (3799, -6499, 3211),
        (4019, -6385, 2906),
        (2677, -3029, 1162),
        (2172, -1833, 682),
    )
)

POLAR_EXPRESS_CUSHION = 0.02407327424182761

# The five fixed Polar Express rows of the Dion2 reference code
# (microsoft/dion, dion/polar_express.py, ``_POLAR_EXPRESS_COEFFS``, commit
# 0a059a4542e5aa74b40dcd1dce363836c7afcd48), used with a safety factor of
# 1.02 on the Frobenius norm; that file says they match KellerJordan's and
# karpathy's (modded-nanogpt, nanochat). They differ from gradax's generated
# "polar_express" table (:func:`polar_express_coefficients`, safety 1.01).
POLAR_EXPRESS_FIXED5 = (
    (8.156554524902461, -22.48329292557795, 15.878769915207462),
    (4.042929935166739, -2.808917465908714, 0.5000178451051316),
    (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
    (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
    (2.3465413258596377, -1.7097828382687081, 0.42323551169305323),
)

# Presets: (table, default number of steps, factor on the Frobenius norm).
# Polar Express normalizes by 1.01 * ||G||_F, matching its safety factor;
# "polar_express_fixed5" by 1.02 * ||G||_F, as the Dion2 reference does.
PRESETS: dict[str, tuple[tuple[tuple[float, ...], ...], int, float]] = {
    "keller": (KELLER, 5, 1.0),
    "standard": (KELLER, 5, 1.0),  # optax's name for the same scheme
    "you5": (YOU5, 5, 1.0),
    "dion": (YOU5, 5, 1.0),  # optax's name for You's table
    "jiacheng6": (JIACHENG6, 6, 1.0),
    "polar_express_fixed5": (POLAR_EXPRESS_FIXED5, 5, 1.02),
}


# Every name ``ns_coeffs`` (and ``orthogonalize``'s ``coefficients``) accepts.
PRESET_NAMES = (*PRESETS, "polar_express")


def is_coefficient_table(value: Any) -> bool:
    """Whether `value` is explicit coefficients: finite, of shape (3,) or (T, 3)."""
    if isinstance(value, (str, bool)):
        return False
    try:
        table = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    shaped = table.shape == (3,) or (
        table.ndim == 2 and table.shape[0] >= 1 and table.shape[1] == 3
    )
    return shaped and bool(np.all(np.isfinite(table)))


# The valid values of ``ns_coeffs``, declared by every member of the family.
NS_COEFFS = OneOf(
    PRESET_NAMES,
    also=is_coefficient_table,
    also_text="finite coefficients (a, b, c) of shape (3,) or (T, 3)",
)


def _quintic(coeffs: np.ndarray, x: Any) -> Any:
    a, b, c = coeffs
    return a * x + b * x**3 + c * x**5


def _minimax_quintic(lo: float, hi: float, iterations: int = 100) -> np.ndarray:
    """The odd quintic minimizing `max |1 - p(x)|` on `[lo, hi]` (Remez).

    The optimum equioscillates at four points: `lo`, the two interior
    extrema of `p` (where `p'(x) = a + 3 b x^2 + 5 c x^4 = 0`) and `hi`,
    with errors `-E, +E, -E, +E`.
    """
    points = np.array([lo, lo + (hi - lo) / 3, lo + 2 * (hi - lo) / 3, hi])
    coeffs = np.zeros(3)
    for _ in range(iterations):
        # Solve p(x_i) + (-1)^i E = 1 for (a, b, c, E).
        signs = np.array([1.0, -1.0, 1.0, -1.0])
        system = np.stack([points, points**3, points**5, signs], axis=1)
        solution = np.linalg.solve(system, np.ones(4))
        coeffs = solution[:3]
        a, b, c = coeffs
        # Interior extrema: roots in x^2 of 5c y^2 + 3b y + a = 0.
        roots = np.roots([5 * c, 3 * b, a])
        roots = np.sort(np.real(roots[np.isreal(roots) & (np.real(roots) > 0)]))
        interior = np.sqrt(roots)
        interior = interior[(interior > lo) & (interior < hi)]
        if interior.size != 2:
            break
        new_points = np.array([lo, interior[0], interior[1], hi])
        if np.allclose(new_points, points, rtol=0, atol=1e-15):
            break
        points = new_points
    return coeffs


@functools.lru_cache(maxsize=64)
def _polar_express_table(
    steps: int, lower: float, safety: float, cushion: float
) -> tuple[tuple[float, ...], ...]:
    lo, hi = lower, 1.0
    rows = []
    for step in range(steps):
        if hi - lo <= 5e-6 * hi:
            # Converged: the classical Newton–Schulz quintic, rescaled to hi.
            coeffs = np.array([15 / 8 / hi, -10 / 8 / hi**3, 3 / 8 / hi**5])
        else:
            coeffs = _minimax_quintic(max(lo, cushion * hi), hi)
            # Recentre on the true interval: p(lo) + p(hi) = 2.
            coeffs = coeffs * 2 / (_quintic(coeffs, lo) + _quintic(coeffs, hi))
        new_lo = float(_quintic(coeffs, lo))
        lo, hi = new_lo, 2 - new_lo
        if step < steps - 1:
            coeffs = coeffs / np.array([safety, safety**3, safety**5])
        rows.append(tuple(map(float, coeffs)))
    return tuple(rows)


def polar_express_coefficients(
    steps: int = 5,
    *,
    lower: float = 1e-3,
    safety: float = 1.01,
    cushion: float = POLAR_EXPRESS_CUSHION,
) -> np.ndarray:
    """Per-step minimax-optimal quintic coefficients (Polar Express).

    Step `t` uses the odd quintic that minimizes `max |1 - p(x)|` over the
    interval where the singular values can be, `[max(l_t, cushion u_t),
    u_t]`, recentred so `p(l_t) + p(u_t) = 2`; the interval then becomes
    `[p(l_t), 2 - p(l_t)]`. Every step but the last is made safe for
    rounding by evaluating `p(x / safety)`.

    Args:
      steps: number of steps, >= 1.
      lower: smallest singular value to map to 1 (after normalization), in
        (0, 1).
      safety: rounding margin, >= 1 (1.0 reproduces the published table).
      cushion: smallest ratio `l_t / u_t` the design interval may have.

    Returns:
      A NumPy array of shape `(steps, 3)`.

    Example:
      >>> import gradax
      >>> gradax.polar_express_coefficients(2, safety=1.0).round(4)
      array([[  8.2872, -23.5959,  17.3004],
             [  4.1071,  -2.9478,   0.5448]])

    References:
      Amsel, Persson, Musco and Gower, The Polar Express: Optimal Matrix Sign
      Methods and Their Application to the Muon Algorithm, 2025
      (arXiv:2505.16932).
    """
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"steps must be an integer >= 1, got {steps!r}")
    if not 0 < lower < 1:
        raise ValueError(f"lower must be in (0, 1), got {lower!r}")
    if not safety >= 1:
        raise ValueError(f"safety must be >= 1, got {safety!r}")
    if not 0 < cushion < 1:
        raise ValueError(f"cushion must be in (0, 1), got {cushion!r}")
    table = _polar_express_table(
        int(steps), float(lower), float(safety), float(cushion)
    )
    return np.array(table)


def resolve_coefficients(
    coefficients: Any, steps: int | None
) -> tuple[np.ndarray, float]:
    """The (steps, 3) table and the normalization factor for a scheme.

    A preset name, "polar_express", a single row (a, b, c) repeated, or a
    (T, 3) table. A table shorter than `steps` repeats its last row; a
    longer one is cut to its first `steps` rows.
    """
    norm_factor = 1.0
    if isinstance(coefficients, str):
        if coefficients == "polar_express":
            count = 5 if steps is None else steps
            return polar_express_coefficients(count), 1.01
        if coefficients not in PRESETS:
            names = sorted(PRESET_NAMES)
            raise ValueError(
                f"coefficients must be one of {names} or a (T, 3) array, "
                f"got {coefficients!r}"
            )
        rows, default_steps, norm_factor = PRESETS[coefficients]
        table = np.array(rows, dtype=np.float64)
        steps = default_steps if steps is None else steps
    else:
        table = np.asarray(coefficients, dtype=np.float64)
        single_row = table.ndim == 1
        if single_row:
            table = table[None]
        if table.ndim != 2 or table.shape[-1] != 3 or table.shape[0] == 0:
            raise ValueError(
                "coefficients must be a preset name or an array of shape (3,) "
                f"or (T, 3), got shape {table.shape}"
            )
        if steps is None:
            # One row is used at every step, five times like Keller's.
            steps = 5 if single_row else table.shape[0]
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"steps must be an integer >= 1, got {steps!r}")
    if table.shape[0] < steps:
        extra = np.repeat(table[-1:], steps - table.shape[0], axis=0)
        table = np.concatenate([table, extra])
    return table[:steps], norm_factor


def newton_schulz_table(ns_coeffs: Any, ns_steps: int) -> tuple[Any, int]:
    """The one rule of the Muon family: `(ns_coeffs, ns_steps)` to iterations.

    optax's rule, for every member that orthogonalizes (muon, normuon,
    adamuon, dion2, scion): a preset name runs `ns_steps` steps of its
    table (:func:`resolve_coefficients`: a short table repeats its last row);
    one row `(a, b, c)` runs `ns_steps` times; a table of `T > 1` rows
    runs whole, once each, and must not have more rows than `ns_steps`.

    Args:
      ns_coeffs: a preset name, or coefficients of shape (3,) or (T, 3).
      ns_steps: the number of steps, an integer >= 1.

    Returns:
      `(coefficients, steps)` for :func:`gradax.orthogonalize`: the preset
      name or the rows as a tuple of `(a, b, c)` floats, and the number of
      steps it runs.

    Raises:
      ValueError: if a table has more rows than `ns_steps`.

    Example:
      >>> from gradax.orthogonal.coefficients import newton_schulz_table
      >>> newton_schulz_table(((3.0, -3.0, 1.0), (2.0, -1.5, 0.5)), 5)[1]
      2
      >>> newton_schulz_table((3.4445, -4.775, 2.0315), 5)[1]
      5
    """
    if isinstance(ns_coeffs, str):
        return ns_coeffs, ns_steps
    rows = coefficient_rows(ns_coeffs)
    if len(rows) == 1:
        return rows, ns_steps
    if ns_steps < len(rows):
        raise ValueError(
            f"ns_coeffs has {len(rows)} rows but ns_steps is {ns_steps}: a table "
            "must not have more rows than steps"
        )
    return rows, len(rows)


def coefficient_rows(ns_coeffs: Any) -> tuple[tuple[float, ...], ...]:
    """Explicit coefficients as a tuple of (a, b, c) rows of Python floats."""
    table = np.atleast_2d(np.asarray(ns_coeffs, dtype=np.float64))
    return tuple(tuple(map(float, row)) for row in table)
