r"""Connectionist temporal classification (CTC): the forward algorithm in log space.

The alignment lattice of a label sequence :math:`y_1 \dots y_N` alternates
blank states and label states. Two arrays carry the forward log-probabilities
through time:

- `blank[n]` (`n = 0..N`): the first `n` labels are emitted and the
  current frame is a blank (`blank[0]` is also the start state);
- `label[n]` (`n = 0..N-1`): the first `n + 1` labels are emitted and
  the current frame emits label `n`.

Forbidden transitions (skipping the blank between two equal labels) get the
log-weight `log_epsilon`, a finite stand-in for :math:`\log 0`.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from ._utils import check_rank, check_same_shape, default_float


def _emission_log_probs(log_probs: jax.Array, labels: jax.Array) -> jax.Array:
    """`log_probs[b, t, labels[b, n]]` as `[B, T, N]`; 0 for an unknown class.

    A gather, not a product with one-hot vectors: a `-inf` log-probability
    of another class does not become `0 * -inf`.
    """
    num_classes = log_probs.shape[-1]
    valid = (labels >= 0) & (labels < num_classes)
    index = jnp.where(valid, labels, 0)[:, None, :]  # [B, 1, N]
    index = jnp.broadcast_to(index, log_probs.shape[:2] + labels.shape[1:])
    picked = jnp.take_along_axis(log_probs, index, axis=2)
    return jnp.where(valid[:, None, :], picked, jnp.zeros_like(picked))


def _add_after_label(blank: jax.Array, extra: jax.Array) -> jax.Array:
    """`blank[:, n + 1] (+) extra[:, n]` in log space; `blank[:, 0]` as is."""
    return jnp.concatenate([blank[:, :1], jnp.logaddexp(blank[:, 1:], extra)], axis=1)


def ctc_loss_with_forward_probs(
    logits: Any,
    logit_paddings: Any,
    labels: Any,
    label_paddings: Any,
    *,
    blank_id: int = 0,
    log_epsilon: Any = -1e5,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    r"""CTC loss and the forward log-probabilities of the alignment lattice.

    The loss of a sequence is the negative log of the total probability of
    the frame-level paths :math:`\pi` that collapse (merge repeats, drop
    blanks :math:`\phi`) to the labels :math:`y`:

    .. math::
      \ell = -\log \sum_{\pi \in \mathcal{B}^{-1}(y)} \prod_t p_t(\pi_t),

    computed by the forward recursion. The auxiliary outputs are, for every
    frame :math:`t` and label count :math:`n`,

    .. math::
      \alpha_\phi(t, n) = \log P(\text{first } n \text{ labels emitted},\
        \pi_t = \phi), \qquad
      \alpha_y(t, n) = \log P(\text{first } n + 1 \text{ labels emitted},\
        \pi_t = y_{n+1}).

    Differences from optax: a `-inf` logit gives finite values and
    gradients (optax: NaN).

    Args:
      logits: `[B, T, K]` logits over `K` classes including the blank.
      logit_paddings: `[B, T]`, 1 for a padded frame and 0 otherwise.
      labels: `[B, N]` integer label sequences.
      label_paddings: `[B, N]`, 1 for a padded label; padding must be on
        the right (zeros then ones).
      blank_id: the class index of the blank. Keyword-only.
      log_epsilon: the finite stand-in for :math:`\log 0`. Keyword-only.

    Returns:
      `(loss, log_alpha_blank, log_alpha_label)`: `[B]` losses, and the
      `[T, B, N + 1]` and `[T, B, N]` forward log-probabilities above.

    Raises:
      ValueError: on wrong ranks or mismatched shapes.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> logits = jnp.zeros((1, 3, 3))  # uniform over {blank, a, b}
      >>> loss, _, _ = gradax.losses.ctc_loss_with_forward_probs(
      ...     logits, jnp.zeros((1, 3)), jnp.array([[1, 2]]), jnp.zeros((1, 2)))
      >>> loss  # 5 of the 27 paths collapse to "ab"
      Array([1.6863...], dtype=float32)

    References:
      Graves et al., Connectionist Temporal Classification: Labelling
      Unsegmented Sequence Data with Recurrent Neural Networks, ICML 2006.
    """
    fn = "ctc_loss_with_forward_probs"
    logits, labels = jnp.asarray(logits), jnp.asarray(labels)
    check_rank(logits, 3, "logits", fn)
    check_rank(labels, 2, "labels", fn)
    check_same_shape(labels, label_paddings, fn)
    check_same_shape(logits[..., 0], logit_paddings, fn)
    batch = logits.shape[0]
    if labels.shape[0] != batch:
        raise ValueError(
            f"{fn}: labels have batch size {labels.shape[0]}, logits {batch}"
        )
    return _forward(
        logits,
        jnp.asarray(logit_paddings),
        labels,
        jnp.asarray(label_paddings),
        log_epsilon,
        blank_id=blank_id,
    )


# Compiled once per shape: eager calls would otherwise retrace the scan.
@functools.partial(jax.jit, static_argnames="blank_id")
def _forward(logits, logit_paddings, labels, label_paddings, log_epsilon, *, blank_id):
    """The forward recursion of `ctc_loss_with_forward_probs` (checked inputs)."""
    batch, max_labels = labels.shape
    dtype = jnp.result_type(logits.dtype, default_float())
    log_probs = jax.nn.log_softmax(logits).astype(dtype)
    # -inf (a masked class) becomes log_epsilon, as a forbidden transition.
    log_probs = jnp.where(jnp.isneginf(log_probs), log_epsilon, log_probs)
    label_lengths = max_labels - jnp.sum(label_paddings, axis=1).astype(jnp.int32)

    # repeated[b, n]: label n equals label n + 1 (never for the last one).
    repeated = jnp.pad(labels[:, :-1] == labels[:, 1:], ((0, 0), (0, 1)))
    skip_weight = jnp.where(repeated, log_epsilon, 0.0).astype(dtype)
    stay_weight = jnp.where(repeated, 0.0, log_epsilon).astype(dtype)

    blank_steps = jnp.transpose(log_probs[:, :, blank_id : blank_id + 1], (1, 0, 2))
    label_steps = jnp.transpose(_emission_log_probs(log_probs, labels), (1, 0, 2))
    pad_steps = jnp.transpose(logit_paddings != 0)[..., None]

    def step(carry, frame):
        blank, label = carry
        emit, blank_log_prob, padded = frame
        # Leave label n for the position before label n + 1 without a frame,
        # unless the two labels are equal (a blank must separate them).
        reachable = _add_after_label(blank, label + skip_weight)
        new_label = jnp.logaddexp(reachable[:, :-1] + emit, label + emit)
        new_blank = _add_after_label(
            reachable + blank_log_prob, label + blank_log_prob + stay_weight
        )
        new_blank = jnp.where(padded, blank, new_blank)
        new_label = jnp.where(padded, label, new_label)
        return (new_blank, new_label), (new_blank, new_label)

    start_blank = jnp.full((batch, max_labels + 1), log_epsilon, dtype)
    start_blank = start_blank.at[:, 0].set(0.0)
    start_label = jnp.full((batch, max_labels), log_epsilon, dtype)
    _, (log_alpha_blank, log_alpha_label) = jax.lax.scan(
        step, (start_blank, start_label), (label_steps, blank_steps, pad_steps)
    )
    # After the last frame, a sequence may also end on its last label.
    final_blank = _add_after_label(log_alpha_blank[-1], log_alpha_label[-1])
    log_alpha_blank = log_alpha_blank.at[-1].set(final_blank)
    end = jnp.take_along_axis(final_blank, label_lengths[:, None], axis=1)
    return -end[:, 0], log_alpha_blank, log_alpha_label


def ctc_loss(
    logits: Any,
    logit_paddings: Any,
    labels: Any,
    label_paddings: Any,
    *,
    blank_id: int = 0,
    log_epsilon: Any = -1e5,
) -> jax.Array:
    r"""CTC loss of each sequence in a batch.

    The first output of :func:`ctc_loss_with_forward_probs`, which has the
    formula and the details of the arguments.

    Args:
      logits: `[B, T, K]` logits over `K` classes including the blank.
      logit_paddings: `[B, T]`, 1 for a padded frame and 0 otherwise.
      labels: `[B, N]` integer label sequences.
      label_paddings: `[B, N]`, 1 for a padded label (right padding).
      blank_id: the class index of the blank. Keyword-only.
      log_epsilon: the finite stand-in for :math:`\log 0`. Keyword-only.

    Returns:
      The `[B]` losses.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> logits = jnp.zeros((1, 3, 3))
      >>> gradax.losses.ctc_loss(
      ...     logits, jnp.zeros((1, 3)), jnp.array([[1, 1]]), jnp.zeros((1, 2)))
      Array([3.2958...], dtype=float32)

    References:
      Graves et al., Connectionist Temporal Classification: Labelling
      Unsegmented Sequence Data with Recurrent Neural Networks, ICML 2006.
    """
    loss, _, _ = ctc_loss_with_forward_probs(
        logits,
        logit_paddings,
        labels,
        label_paddings,
        blank_id=blank_id,
        log_epsilon=log_epsilon,
    )
    return loss
