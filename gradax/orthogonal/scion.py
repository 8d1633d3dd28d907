"""Scion: a norm-constrained step per layer type (spectral, row, sign, ...)."""

from __future__ import annotations

import math
import re
from dataclasses import KW_ONLY
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .. import tree as gtree
from .._core.axes import replicate, restore
from .._core.declarations import LEARNING_RATE, NONNEGATIVE, Shared, hyper
from .._core.numerics import safe_increment, work_dtype
from .._core.protocol import Alias, GradientTransformation, zero_count
from .._core.pytree import static_field
from ..combinators.chain import chain
from ..linalg.matrices import full_dimension_numbers, matrix_view
from ..transforms.scaling import scale_by_learning_rate
from ..transforms.weight_decay import add_decayed_weights
from . import _fields as fields
from ._steps import NewtonSchulz
from .coefficients import newton_schulz_table
from .dimensions import shape_scale

LMOS = ("spectral", "row", "column", "sign", "rms")

# Muon's routing names the same leaves (gradax.orthogonal.routing); Scion
# needs the head told apart from the embedding, so the head is matched first.
HEAD = re.compile(r"lm_head|unembed|head|logit|readout", re.IGNORECASE)
EMBEDDING = re.compile(r"embed|wte|wpe|tok|vocab", re.IGNORECASE)


def _is_lmo_leaf(x: Any) -> bool:
    return x is None or isinstance(x, str)


def scion_lmos(params: Any, weight_dimension_numbers: Any = None) -> Any:
    """Scion's default oracle for each parameter, by Muon's routing rules.

    A leaf that Muon would not orthogonalize (not a matrix under
    `weight_dimension_numbers`) gets "rms"; a matrix whose path looks like
    an output head (`lm_head`, `unembed`, `head`, `logit`,
    `readout`) gets "sign"; one that looks like an embedding (`embed`,
    `wte`, `wpe`, `tok`, `vocab`) gets "row"; every other matrix gets
    "spectral".

    Args:
      params: the parameter tree (arrays or ShapeDtypeStructs).
      weight_dimension_numbers: as Muon's `muon_weight_dimension_numbers`:
        None (2-D leaves are matrices), "auto" (also stacked and conv
        weights), dimension numbers, a tree of them or a function.

    Returns:
      A tree of oracle names, to edit and pass as `lmo`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> params = {"embed": jnp.zeros((10, 4)), "w": jnp.zeros((4, 4)),
      ...           "b": jnp.zeros(4), "lm_head": jnp.zeros((4, 10))}
      >>> gradax.scion_lmos(params)
      {'b': 'rms', 'embed': 'row', 'lm_head': 'sign', 'w': 'spectral'}
    """
    dims = full_dimension_numbers(
        weight_dimension_numbers, params, default_2d_only=True
    )

    def name(path, d):
        if d is None:
            return "rms"
        key = jax.tree_util.keystr(path)
        if HEAD.search(key):
            return "sign"
        return "row" if EMBEDDING.search(key) else "spectral"

    # Over the params' structure: a None there is no leaf, where in `dims`
    # it would be one.
    return jax.tree_util.tree_map_with_path(
        lambda path, _, d: name(path, d), params, dims
    )


class ScionState(NamedTuple):
    """State of :class:`scale_by_scion`."""

    count: jax.Array  # int32 scalar
    mu: Any  # momentum, like the params (mu_dtype)


# The norm-ball options scale_by_scion and scion share (the Newton–Schulz
# and momentum ones are the Muon family's, fields.MUON), passed on by name.
_SCION = Shared(
    radius=hyper(default=1.0, valid=NONNEGATIVE),
    embedding_radius=hyper(default=None, valid=NONNEGATIVE),
    head_radius=hyper(default=None, valid=NONNEGATIVE),
    lmo=static_field(default=None),
    weight_dimension_numbers=static_field(default=None),
)


class scale_by_scion(GradientTransformation):
    """Scion's direction, `rho * d(M)` per leaf. See :class:`scion`.

    Args:
      beta: momentum decay, in [0, 1) (0: no momentum).
      ns_coeffs: Newton–Schulz coefficients (a preset or rows), as Muon's.
      ns_steps: Newton–Schulz steps, an integer >= 1.
      eps: added to norms before dividing, >= 0.
      radius: :math:`\\rho` of "spectral" and "rms" leaves, >= 0.
      embedding_radius: :math:`\\rho` of "row" and "column" leaves (None:
        `radius`).
      head_radius: :math:`\\rho` of "sign" leaves (None: `radius`).
      lmo: the oracle of each leaf: None (:func:`scion_lmos`), one name for
        every leaf, a tree of names (a prefix of the params) or a function
        of the params returning one.
      weight_dimension_numbers: which axes of a leaf form its matrices, as
        Muon's `muon_weight_dimension_numbers`.
      mu_dtype: dtype of the momentum buffer.
    """

    beta: Any = fields.MUON.field(default=0.9)
    ns_coeffs: Any = fields.MUON.field()
    ns_steps: int = fields.MUON.field()
    eps: Any = fields.MUON.field()
    radius: Any = _SCION.field()
    embedding_radius: Any = _SCION.field()
    head_radius: Any = _SCION.field()
    _: KW_ONLY
    lmo: Any = _SCION.field()
    weight_dimension_numbers: Any = _SCION.field()
    mu_dtype: Any = fields.MUON.field()
    # How the spectral oracle orthogonalizes (built by __check_init__).
    newton_schulz: NewtonSchulz = static_field(
        default_factory=lambda: None, init=False, repr=False
    )

    def __check_init__(self):
        if isinstance(self.lmo, str) and self.lmo not in LMOS:
            raise ValueError(f"lmo must be one of {LMOS}, got {self.lmo!r}")
        # How the spectral oracle orthogonalizes: Muon's defaults, never
        # spread over a mesh (each leaf is orthogonalized where it is). Built
        # once; a table longer than ns_steps fails here.
        built = NewtonSchulz(
            self.ns_coeffs,
            self.ns_steps,
            distributed=False,
            owner=self._public_name(),
        )
        object.__setattr__(self, "newton_schulz", built)

    def lmo_tree(self, tree: Any) -> Any:
        """The oracle name of each leaf of `tree`.

        Args:
          tree: the parameters or updates (arrays or shapes).
        """
        spec = self.lmo
        if spec is None:
            return scion_lmos(tree, self.weight_dimension_numbers)
        if callable(spec):
            spec = spec(tree)
        if isinstance(spec, str):
            return jax.tree.map(lambda _: spec, tree)
        return jax.tree.map(
            lambda n, sub: jax.tree.map(lambda _: n, sub),
            spec,
            tree,
            is_leaf=_is_lmo_leaf,
        )

    def init_state(self, params):
        return ScionState(zero_count(), gtree.zeros_like(params, dtype=self.mu_dtype))

    def update_state(self, updates, state, params=None, **extra_args):
        mu = gtree.update_moment(updates, state.mu, self.beta, 1)
        names = self.lmo_tree(updates)
        dims = full_dimension_numbers(
            self.weight_dimension_numbers, updates, default_2d_only=True
        )
        # The updates' own structure: a None there (an equinox-filtered
        # model) is no leaf, where in `names` and `dims` it would be one.
        treedef = jax.tree.structure(updates)
        flat_names = treedef.flatten_up_to(names)
        flat_dims = treedef.flatten_up_to(dims)
        flat_mu = treedef.flatten_up_to(mu)
        out = [
            self._leaf(n, d, m)
            for n, d, m in zip(flat_names, flat_dims, flat_mu, strict=True)
        ]
        return jax.tree.unflatten(treedef, out), ScionState(
            safe_increment(state.count), mu
        )

    def _radius(self, name: str) -> Any:
        if name in ("row", "column") and self.embedding_radius is not None:
            return self.embedding_radius
        if name == "sign" and self.head_radius is not None:
            return self.head_radius
        return self.radius

    def _leaf(self, name: str, dims: Any, m: jax.Array) -> jax.Array:
        if name not in LMOS:
            raise ValueError(
                f"lmo must name one of {LMOS} for every leaf, got {name!r}"
            )
        if m.size == 0:  # no entries: no direction (and no matrix to read)
            return m
        x, sharding = replicate(m)
        x = x.astype(work_dtype(x.dtype))
        if name == "rms":
            rms = jnp.sqrt(jnp.mean(jnp.abs(x) ** 2))
            direction = x / (rms + self.eps).astype(x.dtype)
        else:
            if dims is None:
                raise ValueError(
                    f"lmo {name!r} needs a matrix, got a leaf of shape {m.shape} "
                    "with no dimension numbers (use 'rms', or give "
                    "weight_dimension_numbers)"
                )
            view = matrix_view(x.shape, dims)
            direction = view.from_matrices(
                self._matrix_lmo(name, view.to_matrices(x), view.fan_in, view.fan_out)
            )
        direction = self._radius(name) * direction
        return restore(direction.astype(m.dtype), sharding)

    def _matrix_lmo(self, name, x, fan_in, fan_out):
        eps = self.eps
        if name == "spectral":
            o = self.newton_schulz.orthogonalize_matrices(x, eps)
            return o * shape_scale(fan_in, fan_out, "spectral")
        if name == "sign":
            return jnp.sign(x) / fan_in
        squares = jnp.abs(x) ** 2
        if name == "row":
            rms = jnp.sqrt(jnp.sum(squares, axis=-1, keepdims=True) / fan_out)
            return x / (rms + eps).astype(x.dtype)
        norm = jnp.sqrt(jnp.sum(squares, axis=-2, keepdims=True))
        return x / (norm * math.sqrt(fan_in) + eps).astype(x.dtype)


class scion(Alias):
    r"""Scion: a step along each layer's linear minimization oracle.

    With momentum :math:`M_t = \beta M_{t-1} + (1 - \beta) G_t` and, per
    leaf, the oracle's direction :math:`d(M) = \arg\max_{\|D\| \le 1}
    \langle M, D \rangle` for the leaf's norm (below), the step is

    .. math::
      W_t = W_{t-1} - \eta_t \rho\, d(M_t) \quad\text{(unconstrained)},\qquad
      W_t = (1 - \eta_t) W_{t-1} - \eta_t \rho\, d(M_t)
      \quad\text{(constrained)},

    the constrained form being a Frank–Wolfe step that keeps the weights in
    the ball of radius :math:`\rho` (for :math:`\eta_t \le 1`). For a leaf
    seen as `(fan_in, fan_out)` matrices (Muon's dimension numbers):

    - "spectral" (hidden matrices): :math:`\sqrt{n_{out}/n_{in}}\,
      \mathrm{NS}(M)`, the polar factor by gradax's Newton–Schulz iteration;
    - "row" (embeddings, one row per token): each row divided by its RMS;
    - "column": each column divided by its norm times
      :math:`\sqrt{n_{in}}`;
    - "sign" (the output head): :math:`\mathrm{sign}(M) / n_{in}`;
    - "rms" (vectors, scalars, anything else): :math:`M / \mathrm{RMS}(M)`.

    The oracles are the reference's (LIONS-EPFL/scion `scion.py`, commit
    f58a393) `Spectral`, `ColNorm` (transposed,
    for an embedding stored `(vocab, dim)`), `RowNorm` (normalized),
    `Sign` (normalized) and `BiasRMS`, written for gradax's
    `(fan_in, fan_out)` layout. Which leaf gets which is
    :func:`scion_lmos`'s rule unless `lmo` says otherwise. The reference's
    `momentum` is :math:`1 - \beta`.

    A conv kernel under "auto" dimension numbers is one `(h w c_in,
    c_out)` matrix, so "spectral" scales it by `sqrt(c_out / (h w
    c_in))`; the reference's `SpectralConv` uses `sqrt(c_out / c_in) / (h
    w)`, `sqrt(h w)` times smaller: pass `radius / k` for k x k kernels
    (then 2.8e-8 from it; 9e-2 for Scion and 2.0 for uScion at the same
    radius). A 3-D leaf is a stack of matrices here, a Conv1d kernel there.

    Args:
      learning_rate: :math:`\eta`, a number or schedule (at most 1 in
        the constrained form).
      beta: :math:`\beta`, momentum decay in [0, 1).
      radius: :math:`\rho` of "spectral" and "rms" leaves, >= 0.
      embedding_radius: :math:`\rho` of "row" and "column" leaves (None:
        `radius`).
      head_radius: :math:`\rho` of "sign" leaves (None: `radius`).
      unconstrained: take the unconstrained step (uScion) instead of the
        Frank–Wolfe one.
      ns_coeffs: Newton–Schulz coefficients, as Muon's.
      ns_steps: Newton–Schulz steps, an integer >= 1.
      eps: added to norms before dividing, >= 0.
      lmo: the oracle of each leaf ("spectral", "row", "column", "sign",
        "rms"): None (:func:`scion_lmos`), one name, a tree of names or a
        function of the params.
      weight_dimension_numbers: as Muon's `muon_weight_dimension_numbers`.
      mu_dtype: dtype of the momentum buffer.

    Returns:
      The optimizer, a gradient transformation.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> params = {"w": jnp.ones((4, 4)), "b": jnp.zeros(4)}
      >>> tx = gradax.scion(0.1, radius=2.0, unconstrained=True)
      >>> grads = {"w": jnp.eye(4), "b": jnp.ones(4)}
      >>> updates, _ = tx.update(grads, tx.init(params), params)
      >>> [round(float(u), 4) for u in updates["b"]]
      [-0.2, -0.2, -0.2, -0.2]

    References:
      Pethick et al., Training Deep Learning Models with Norm-Constrained
      LMOs, 2025 (arXiv:2502.07529).
    """

    learning_rate: Any = hyper(valid=LEARNING_RATE)
    beta: Any = fields.MUON.field(default=0.9)
    radius: Any = _SCION.field()
    embedding_radius: Any = _SCION.field()
    head_radius: Any = _SCION.field()
    _: KW_ONLY
    unconstrained: bool = static_field(default=False)
    ns_coeffs: Any = fields.MUON.field()
    ns_steps: int = fields.MUON.field()
    eps: Any = fields.MUON.field()
    lmo: Any = _SCION.field()
    weight_dimension_numbers: Any = _SCION.field()
    mu_dtype: Any = fields.MUON.field()

    def __check_init__(self):
        # A table longer than ns_steps fails here, not at the first update.
        newton_schulz_table(self.ns_coeffs, self.ns_steps)
        lr = self.learning_rate
        if not self.unconstrained and isinstance(lr, (int, float)) and lr > 1:
            raise ValueError(
                f"learning_rate must be at most 1 in the constrained form (a "
                f"Frank-Wolfe step mixes (1 - learning_rate) W), got {lr!r}; "
                "pass unconstrained=True for larger steps"
            )

    def build(self):
        direction = self.part(scale_by_scion)
        if self.unconstrained:
            return chain(direction, scale_by_learning_rate(self.learning_rate))
        return chain(
            direction,
            add_decayed_weights(1.0),
            scale_by_learning_rate(self.learning_rate),
        )
