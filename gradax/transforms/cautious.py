r"""Caution: masking update entries whose sign disagrees with another tree.

Two rules from the same group of authors, shared by every optimizer that
offers them (the Adam family and Lion):

- cautious updates (Liang et al., 2024, arXiv:2411.16085): keep an entry of
  the update :math:`u` only where it agrees in sign with the gradient
  :math:`g`, and rescale the kept entries of each leaf (each parameter
  tensor). The authors' released code (github.com/kyleliang919/C-Optim,
  commit 2c0517c) has two rescalings, chosen here by `mask_scale`:

  .. math::
    \phi = \mathbb{1}[u \odot g > 0],\qquad
    u \leftarrow \frac{u \odot \phi}{\max(\mathrm{mean}(\phi), 10^{-3})}
    \ \ (\texttt{"mean"}),\qquad
    u \leftarrow u \odot \phi\, \frac{n}{\textstyle\sum \phi + 1}
    \ \ (\texttt{"numel"}),

  with :math:`n` the number of entries of the leaf. `"mean"` is the rule
  of `c_adamw.py` at that commit (its comments call `"numel"` the
  original implementation, replaced by the mean after timm found it more
  favourable); `"numel"` is the rule of `c_lion.py`, so gradax's Lion
  uses it by default and the Adam family `"mean"`. The paper's Algorithm 1
  divides by :math:`\mathrm{mean}(\phi) + \epsilon` instead. Where no entry
  agrees, the leaf's update is zero under either rule.
- cautious weight decay (Chen et al., 2025, arXiv:2510.12402, Algorithm 1):
  decay a parameter entry only where the optimizer's update :math:`u` and the
  parameter :math:`x` agree in sign,
  :math:`u \leftarrow u + \lambda\, \mathbb{1}[u \odot x \ge 0]\, x`.

For complex entries "agree in sign" means a positive (non-negative for the
decay) real part of :math:`\bar u\, g` (of :math:`\bar u\, x`).
"""

from __future__ import annotations

from dataclasses import KW_ONLY
from typing import Any, ClassVar

import jax
import jax.numpy as jnp

from .._core.declarations import NONNEGATIVE, OneOf, hyper
from .._core.protocol import Alias, GradientTransformation, LearningRateAlias
from .._core.pytree import static_field
from ..combinators.chain import chain
from .scaling import scale_by_learning_rate
from .weight_decay import add_decayed_weights, on_mask

# Floor of the kept fraction: rescaling never multiplies by more than 1000.
CAUTION_MIN_FRACTION = 1e-3

# How caution rescales the kept entries (see the module docstring), declared
# by every optimizer that offers ``mask_scale``.
MASK_SCALES = ("mean", "numel")
MASK_SCALE = OneOf(MASK_SCALES)


def _alignment(a: jax.Array, b: jax.Array) -> jax.Array:
    """`a * b` for real entries, `Re(conj(a) * b)` for complex ones."""
    if jnp.iscomplexobj(a) or jnp.iscomplexobj(b):
        return jnp.real(jnp.conj(a) * b)
    return a * b


def _caution_leaf(u: jax.Array, g: jax.Array, mask_scale: str) -> jax.Array:
    keep = (_alignment(u, g) > 0).astype(jnp.real(u).dtype)
    if mask_scale == "numel":
        # C-Optim c_lion.py: mask * (numel / (sum(mask) + 1)).
        return u * (keep * (keep.size / (jnp.sum(keep) + 1)))
    fraction = jnp.maximum(jnp.mean(keep), CAUTION_MIN_FRACTION)
    # A product, not a select: it keeps the update's sharding on any mesh.
    return u * (keep / fraction)


def caution(updates: Any, grads: Any, *, mask_scale: str = "mean") -> Any:
    """Cautious updates: zero where `updates` and `grads` disagree in sign.

    Kept entries of each leaf are rescaled as in Liang et al. (2024): divided
    by the fraction of entries kept (at least 1e-3), or multiplied by
    `n / (kept + 1)`; see the module docstring.

    Args:
      updates: a tree of proposed updates (the direction, before the learning
        rate).
      grads: the gradients, same structure.
      mask_scale: `"mean"` (C-Optim `c_adamw.py`) or `"numel"` (C-Optim
        `c_lion.py`). Keyword-only.

    Returns:
      A tree like `updates`.

    Example:
      >>> import jax.numpy as jnp
      >>> from gradax.transforms.cautious import caution
      >>> caution(jnp.array([1.0, -2.0, 3.0, 4.0]), jnp.array([1.0, -1.0, 1.0, -1.0]))
      Array([ 1.3333334, -2.6666667,  4.       ,  0.       ], dtype=float32)
      >>> caution(
      ...     jnp.array([1.0, -2.0, 3.0, 4.0]),
      ...     jnp.array([1.0, -1.0, 1.0, -1.0]),
      ...     mask_scale="numel",
      ... )
      Array([ 1., -2.,  3.,  0.], dtype=float32)
    """
    if mask_scale not in MASK_SCALES:
        raise ValueError(f"mask_scale must be one of {MASK_SCALES}, got {mask_scale!r}")
    return jax.tree.map(
        lambda u, g: None if u is None else _caution_leaf(u, g, mask_scale),
        updates,
        grads,
        is_leaf=lambda x: x is None,
    )


class _cautious_decay(GradientTransformation):
    """The stage add_cautious_decayed_weights builds (without its mask)."""

    weight_decay: Any = hyper(valid=NONNEGATIVE)

    def update_state(self, updates, state, params=None, **extra_args):
        if params is None:
            raise ValueError(
                "add_cautious_decayed_weights needs params passed to update"
            )
        wd = self.weight_decay

        def decay(u, p):
            agree = (_alignment(u, p) >= 0).astype(jnp.real(u).dtype)
            return u + wd * (agree * p)

        updates = jax.tree.map(
            lambda u, p: None if u is None else decay(u, p),
            updates,
            params,
            is_leaf=lambda x: x is None,
        )
        return updates, state


class add_cautious_decayed_weights(Alias):
    r"""Cautious weight decay: adds `weight_decay * params` where signs agree.

    With incoming update :math:`u`, parameters :math:`x` and rate
    :math:`\lambda`: :math:`u + \lambda\, \mathbb{1}[u \odot x \ge 0]\, x`,
    element-wise. Put it where :class:`add_decayed_weights` would go: after
    the optimizer's direction, before the learning rate.

    Differences from optax: not in optax.

    Args:
      weight_decay: :math:`\lambda >= 0`, a number, an array or a schedule.
      mask: a tree of booleans like the params (or a function of the params
        returning one); only True leaves decay.

    Returns:
      A transformation with the state of :class:`add_decayed_weights`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.add_cautious_decayed_weights(0.5)
      >>> p = jnp.array([1.0, 1.0, -2.0])
      >>> tx.update(jnp.array([1.0, -1.0, -1.0]), tx.init(p), p)[0]
      Array([ 1.5, -1. , -2. ], dtype=float32)

    References:
      Chen et al., Cautious Weight Decay, 2025 (arXiv:2510.12402).
    """

    weight_decay: Any = hyper(default=0.0, valid=NONNEGATIVE)
    mask: Any = static_field(default=None)

    def build(self):
        return on_mask(_cautious_decay(self.weight_decay), self.mask)


def decayed_weights(
    weight_decay: Any, mask: Any, *, cautious: bool
) -> GradientTransformation:
    """The weight-decay stage of an optimizer: plain or cautious."""
    if cautious:
        return add_cautious_decayed_weights(weight_decay, mask)
    return add_decayed_weights(weight_decay, mask)


def decayed_descent(
    direction: Any,
    weight_decay: Any,
    mask: Any,
    learning_rate: Any,
    *,
    cautious: bool = False,
) -> GradientTransformation:
    """AdamW's shape: `direction`, then decoupled weight decay, then -lr.

    The composition most optimizers with a `weight_decay` build (optax's
    `adamw`, `lion`, `adan`, ...): the decay is added to the direction, not to
    the gradient, and both are scaled by the learning rate.
    """
    return chain(
        direction,
        decayed_weights(weight_decay, mask, cautious=cautious),
        scale_by_learning_rate(learning_rate),
    )


class DecoupledWeightDecay(LearningRateAlias):
    """An optimizer of AdamW's shape: its direction, weight decay, then -lr.

    A subclass names its direction transformation in `_direction`; the build
    passes it the optimizer's fields of the same names (:meth:`part`). Name
    this base first, the direction's options next and `LearningRateAlias`
    last, `class adamaxw(CautiousDecoupledWeightDecay, _AdamaxOptions,
    LearningRateAlias)`: the signature reads `learning_rate`, the options,
    then `weight_decay` and `mask`. A subclass may change `weight_decay`'s
    default (`weight_decay: Any = 0.0` keeps its declaration).
    """

    _abstract = True

    _direction: ClassVar[type[GradientTransformation]]

    weight_decay: Any = hyper(default=0.0001, valid=NONNEGATIVE)
    mask: Any = static_field(default=None)

    def _decays_cautiously(self) -> bool:
        """Whether the decay is cautious (see :class:`add_cautious_decayed_weights`)."""
        return False

    def build(self):
        return decayed_descent(
            self.part(self._direction),
            self.weight_decay,
            self.mask,
            self.learning_rate,
            cautious=self._decays_cautiously(),
        )


class CautiousDecoupledWeightDecay(DecoupledWeightDecay):
    """:class:`DecoupledWeightDecay` with the keyword-only `cautious_weight_decay`."""

    _abstract = True

    _: KW_ONLY
    cautious_weight_decay: bool = static_field(default=False)

    def _decays_cautiously(self) -> bool:
        return self.cautious_weight_decay
