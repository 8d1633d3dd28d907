"""Adam-mini: Adam with one second-moment value per block of parameters."""

from __future__ import annotations

from dataclasses import KW_ONLY
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .. import tree as gtree
from .._core.declarations import DECAY, LEARNING_RATE, NONNEGATIVE, Shared, hyper
from .._core.numerics import abs_sq, canonical_dtype, real_dtype, safe_increment
from .._core.protocol import Alias, GradientTransformation, zero_count
from .._core.pytree import static_field
from ..combinators.chain import chain
from ..transforms.cautious import decayed_weights
from ..transforms.scaling import scale_by_learning_rate

_NAMED = ("full", "neuron", "rows", "tensor")
# Path fragments the authors' code (zyushun/Adam-mini v1.1.1, adam_mini.py,
# commit 402aadf) reads as embeddings (one rate per token row) and as biases
# (plain Adam); the default partition follows them.
_EMBEDDING_NAMES = ("embed", "embd", "wte")
_BIAS_NAMES = ("bias",)


class ScaleByAdamMiniState(NamedTuple):
    """State of :class:`scale_by_adam_mini`."""

    count: jax.Array  # int32 scalar
    mu: Any  # first moment, like params (mu_dtype)
    nu: Any  # one second moment per block: shapes set by the partition


def _check_label(label: Any, path: str, shape: tuple[int, ...]) -> None:
    if isinstance(label, bool) or not (
        label in _NAMED or isinstance(label, int) and label > 0
    ):
        raise ValueError(
            f"partition{path} must be 'full', 'neuron', 'rows', 'tensor' or a positive "
            f"number of heads, got {label!r}"
        )
    if label in ("neuron", "rows") and len(shape) < 2:
        raise ValueError(
            f"partition{path}={label!r} needs a matrix, got a leaf of shape {shape}"
        )
    if isinstance(label, int):
        if len(shape) < 2 or shape[-1] % label:
            raise ValueError(
                f"partition{path}={label} heads must divide the last axis of a "
                f"matrix, got a leaf of shape {shape}"
            )


def _block_mean(squares: jax.Array, label: Any) -> jax.Array:
    """Mean of `|g|**2` over each block (the shape the state keeps)."""
    if label == "full":
        return squares
    if label == "tensor":
        return jnp.mean(squares)
    if label == "neuron":  # output neurons: the last axis (``x @ W``)
        return jnp.mean(squares, axis=-2)
    if label == "rows":  # one per row: a token of a (vocab, dim) embedding
        return jnp.mean(squares, axis=-1)
    heads = squares.reshape((*squares.shape[:-1], label, squares.shape[-1] // label))
    return jnp.mean(heads, axis=(-3, -1))


def _expand(nu: jax.Array, label: Any, shape: tuple[int, ...]) -> jax.Array:
    """The block values broadcast back to a parameter's shape."""
    if label in ("full", "tensor"):
        return nu
    if label == "neuron":
        return nu[..., None, :]
    if label == "rows":
        return nu[..., None]
    per_head = jnp.broadcast_to(
        nu[..., None, :, None], (*shape[:-1], label, shape[-1] // label)
    )
    return per_head.reshape(shape)


def _default_label(path: Any, p: Any) -> Any:
    """The authors' rule where a leaf's path names an embedding or a bias;
    otherwise "neuron" for a matrix and "tensor" for the rest."""
    name = jax.tree_util.keystr(path).lower()
    matrix = jnp.ndim(p) >= 2
    if matrix and any(n in name for n in _EMBEDDING_NAMES):
        return "rows"
    if any(n in name for n in _BIAS_NAMES):
        return "full"
    return "neuron" if matrix else "tensor"


# scale_by_adam_mini's options, declared once: it and the optimizers that
# build it take each field from here and pass the values on with Alias.part.
_ADAM_MINI = Shared(
    b1=hyper(default=0.9, valid=DECAY),
    b2=hyper(default=0.999, valid=DECAY),
    eps=hyper(default=1e-8, valid=NONNEGATIVE),
    mu_dtype=static_field(default=None),
    partition=static_field(default=None),
)


class scale_by_adam_mini(GradientTransformation):
    """Rescales updates by Adam-mini's moments (no learning rate).

    See :class:`adam_mini` for the update rule and the partition.

    Args:
      b1: decay of the first moment, in [0, 1).
      b2: decay of the block second moments, in [0, 1).
      eps: added to the denominator, >= 0.
      mu_dtype: dtype (or storage spec, e.g. :class:`gradax.int8_blockwise`)
        of the first moment.
      partition: the blocks, as in :class:`adam_mini`.
    """

    b1: Any = _ADAM_MINI.field()
    b2: Any = _ADAM_MINI.field()
    eps: Any = _ADAM_MINI.field()
    mu_dtype: Any = _ADAM_MINI.field()
    _: KW_ONLY
    partition: Any = _ADAM_MINI.field()

    def _labels(self, params: Any) -> Any:
        """One label per leaf of `params` (the partition, checked)."""
        labels = self.partition(params) if callable(self.partition) else self.partition
        if labels is None:
            return jax.tree_util.tree_map_with_path(_default_label, params)
        # A label may stand for a whole subtree of params (a prefix tree).
        labels = jax.tree.map(
            lambda label, sub: jax.tree.map(lambda _: label, sub), labels, params
        )
        for (path, label), p in zip(
            jax.tree_util.tree_leaves_with_path(labels),
            jax.tree.leaves(params),
            strict=True,
        ):
            _check_label(label, jax.tree_util.keystr(path), tuple(jnp.shape(p)))
        return labels

    def init_state(self, params):
        labels = self._labels(params)

        def nu(label: Any, p: Any) -> jax.Array:
            if label == "full":  # shaped (and sharded) like the parameter
                return jnp.zeros_like(p, dtype=real_dtype(p.dtype))
            like = jax.ShapeDtypeStruct(p.shape, real_dtype(p.dtype))
            shape = jax.eval_shape(lambda x: _block_mean(x, label), like).shape
            return jnp.zeros(shape, real_dtype(p.dtype))

        return ScaleByAdamMiniState(
            count=zero_count(),
            mu=gtree.zeros_like(params, canonical_dtype(self.mu_dtype)),
            nu=jax.tree.map(nu, labels, params),
        )

    def update_state(self, updates, state, params=None, **extra_args):
        b1, b2, eps = self.b1, self.b2, self.eps
        labels = self._labels(updates)
        count = safe_increment(state.count)
        mu = gtree.update_moment(updates, state.mu, b1, 1)
        block_squares = jax.tree.map(
            lambda label, g: _block_mean(abs_sq(g), label), labels, updates
        )
        nu = gtree.update_moment(block_squares, state.nu, b2, 1)
        mu_hat = gtree.bias_correction(mu, b1, count)
        nu_hat = gtree.bias_correction(nu, b2, count)
        direction = jax.tree.map(
            lambda label, m, v: m / (jnp.sqrt(_expand(v, label, m.shape)) + eps),
            labels,
            mu_hat,
            nu_hat,
        )
        return direction, ScaleByAdamMiniState(count=count, mu=mu, nu=nu)


class adam_mini(Alias):
    r"""Adam-mini: Adam with one second-moment value per block.

    The parameters are cut into blocks :math:`B` (see `partition`); each
    keeps one second moment, the moving average of the block's mean squared
    gradient, in place of Adam's one per element. With gradient :math:`g_t`:

    .. math::
      m_t = b_1 m_{t-1} + (1 - b_1) g_t,\quad
      v_{B,t} = b_2 v_{B,t-1} + (1 - b_2)\,\mathrm{mean}_{i \in B}\, g_{t,i}^2,\\
      u_{t,i} = -\eta_t \Big(\frac{m_{t,i} / (1 - b_1^t)}
          {\sqrt{v_{B(i),t} / (1 - b_2^t)} + \epsilon} + \lambda \theta_{t-1,i}\Big).

    The second moments take a few floats per matrix instead of one per
    parameter: the state is about half of AdamW's (the first moment), a
    quarter of it with `mu_dtype=gradax.int8_blockwise()`.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule.
      b1: decay of the first moment, in [0, 1).
      b2: decay of the block second moments, in [0, 1).
      eps: :math:`\epsilon`, >= 0.
      weight_decay: :math:`\lambda \ge 0` (decoupled, as in AdamW).
      mask: a tree of booleans like the params (or a function of the params
        returning one) selecting the leaves that decay.
      mu_dtype: dtype (or storage spec) of the first moment.
      partition: the blocks of each leaf, a tree of labels like the params
        (a label may stand for a whole subtree), or a function of the params
        returning one. Labels: `"neuron"`, one value per output neuron of a
        matrix (its last axis, in the `x @ W` layout; a stacked leading axis
        keeps its own values), the paper's rule for value, attention-output and
        MLP matrices; `"rows"`, one value per row of a matrix (per token
        of a `(vocab, dim)` embedding, the authors' code's rule for
        embeddings); an integer `h`, one value per head of a matrix whose
        last axis holds `h` heads (the paper's rule for queries and keys);
        `"full"`, one value per element (plain Adam, the paper's first
        choice for embeddings and the output layer); `"tensor"`, one for
        the whole leaf. Default (None), as the authors' code
        (zyushun/Adam-mini v1.1.1, commit 402aadf) names leaves: `"rows"`
        for a matrix whose path contains "embed", "embd" or "wte";
        `"full"` for a leaf whose path contains "bias"; otherwise
        `"neuron"` for leaves with two or more axes and `"tensor"` for the
        others. The authors' code also finds queries and keys by name and
        gives them one value per head; here give their head count as an
        integer label. It gives a matrix whose name it does not know one
        value for the whole tensor, where the default here is `"neuron"`.

    Returns:
      The optimizer, a gradient transformation.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> params = {"embed": jnp.ones((8, 4)), "q": jnp.ones((4, 4))}
      >>> tx = gradax.adam_mini(1e-3, partition={"embed": "full", "q": 2})
      >>> state = tx.init(params)
      >>> state[0].nu["embed"].shape, state[0].nu["q"].shape
      ((8, 4), (2,))

    References:
      Zhang et al., Adam-mini: Use Fewer Learning Rates To Gain More, 2024
      (arXiv:2406.16793).
    """

    learning_rate: Any = hyper(valid=LEARNING_RATE)
    b1: Any = _ADAM_MINI.field()
    b2: Any = _ADAM_MINI.field()
    eps: Any = _ADAM_MINI.field()
    weight_decay: Any = hyper(default=0.0, valid=NONNEGATIVE)
    mask: Any = static_field(default=None)
    mu_dtype: Any = _ADAM_MINI.field()
    _: KW_ONLY
    partition: Any = _ADAM_MINI.field()

    def build(self):
        return chain(
            self.part(scale_by_adam_mini),
            decayed_weights(self.weight_decay, self.mask, cautious=False),
            scale_by_learning_rate(self.learning_rate),
        )
