"""Shampoo with layer-wise grafting, for matrices, stacked weights and conv kernels."""

from __future__ import annotations

from dataclasses import KW_ONLY
from typing import Any, NamedTuple, cast

import jax
import jax.numpy as jnp

from .._core.axes import match_sharding
from .._core.declarations import (
    DECAY,
    NONNEGATIVE,
    NONNEGATIVE_INT,
    POSITIVE_INT,
    UNIT,
    OneOf,
    hyper,
)
from .._core.numerics import real_dtype, safe_increment, work_dtype
from .._core.protocol import GradientTransformation, LearningRateAlias, zero_count
from .._core.pytree import Module, static_field
from ..combinators.chain import chain
from ..transforms.scaling import scale_by_learning_rate
from ..transforms.weight_decay import add_decayed_weights
from . import _kronecker as kron
from .adam import debiased_first_moment

GRAFTING_TYPES = ("rmsprop", "rmsprop_normalized", "adagrad", "sgd")
# Where the factors start: 0 (gradax's default) or matrix_epsilon * I (the
# reference, google-research scalable_shampoo/optax/distributed_shampoo.py).
START_STATISTICS = ("zero", "matrix_epsilon")
# How the momentum averages the directions: "ema", an exponential average
# divided by 1 - b1^t (gradax's default, optax's); "ema_uncorrected", the
# same average undivided (the reference's default,
# moving_average_for_momentum=True); "sum", b1 m + u (the reference's
# moving_average_for_momentum=False).
MOMENTUM_TYPES = ("ema", "ema_uncorrected", "sum")
# Where shampoo's weight decay enters: "decoupled" (added after the
# momentum, gradax's default) or "coupled" (added to the grafted direction
# before the momentum, the reference's decoupled_weight_decay=False).
WEIGHT_DECAY_MODES = ("decoupled", "coupled")
# The momentum of the updates before start_preconditioning_step: "shared"
# (gradax's: one momentum takes the grafting direction, then Shampoo's) or
# "separate" (the reference's: a momentum of each direction from the first
# update on; the first steps use the grafting one, later steps Shampoo's).
GRAFTING_MOMENTUM = ("shared", "separate")


class ShampooState(NamedTuple):
    """State of :class:`scale_by_shampoo`."""

    count: jax.Array  # int32 scalar
    mu: Any  # momentum, like the params
    nu: Any  # grafting accumulator, like the params (real dtype)
    stats: Any  # per matrix leaf (L, R): (*batch, [nr, nc,] b, b); None elsewhere
    roots: Any  # per matrix leaf the cached (L^{-1/4}, R^{-1/4}); None elsewhere
    # grafting_momentum="separate": the grafting direction's momentum
    graft_mu: Any = None


class _ShampooOptions(Module):
    """The options of scale_by_shampoo and shampoo."""

    _abstract = True

    b1: Any = hyper(default=0.9, valid=DECAY)
    b2: Any = hyper(default=0.999, valid=UNIT)
    eps: Any = hyper(default=1e-8, valid=NONNEGATIVE)
    matrix_epsilon: Any = hyper(default=1e-6, valid=NONNEGATIVE)
    _: KW_ONLY
    block_size: int = hyper(default=128, valid=POSITIVE_INT, static=True, kw_only=True)
    preconditioning_compute_steps: int = hyper(
        default=1, valid=POSITIVE_INT, static=True, kw_only=True
    )
    start_preconditioning_step: int = hyper(
        default=5, valid=NONNEGATIVE_INT, static=True, kw_only=True
    )
    grafting_type: str = hyper(
        default="rmsprop", valid=OneOf(GRAFTING_TYPES), static=True, kw_only=True
    )
    nesterov: bool = static_field(default=False)
    start_statistics: str = hyper(
        default="zero", valid=OneOf(START_STATISTICS), static=True, kw_only=True
    )
    weight_dimension_numbers: Any = static_field(default="auto")
    momentum: str = hyper(
        default="ema", valid=OneOf(MOMENTUM_TYPES), static=True, kw_only=True
    )
    graft_bias_correction: bool = hyper(
        default=True, valid=OneOf((True, False)), static=True, kw_only=True
    )
    precondition_vectors: bool = hyper(
        default=False, valid=OneOf((True, False)), static=True, kw_only=True
    )
    merge_small_dims: int = hyper(
        default=0, valid=NONNEGATIVE_INT, static=True, kw_only=True
    )
    skip_preconditioning_dim_size_gt: Any = hyper(
        default=None, valid=NONNEGATIVE_INT, static=True, kw_only=True
    )
    grafting_momentum: str = hyper(
        default="shared", valid=OneOf(GRAFTING_MOMENTUM), static=True, kw_only=True
    )


class scale_by_shampoo(_ShampooOptions, GradientTransformation):
    """Shampoo's grafted, momentum-averaged direction. See :class:`shampoo`.

    Args:
      b1: momentum decay, in [0, 1).
      b2: decay of the factors and the grafting accumulator, in [0, 1]
        (1: sums, as in the original Shampoo and AdaGrad).
      eps: the grafting optimizer's epsilon, >= 0.
      matrix_epsilon: damping relative to the largest eigenvalue, >= 0.
      block_size: sides longer than this are cut into blocks of this size,
        an integer >= 1.
      preconditioning_compute_steps: recompute the inverse roots every this
        many updates (cached in between), an integer >= 1.
      start_preconditioning_step: updates up to this one use the grafting
        direction; later ones Shampoo's. An integer >= 0.
      grafting_type: "rmsprop" (Adam's denominator), "rmsprop_normalized"
        (of the gradient divided by its norm), "adagrad" or "sgd".
      nesterov: Nesterov momentum (NAdam's form).
      start_statistics: "zero" or "matrix_epsilon" (the factors start at
        `matrix_epsilon * I`, as the reference does).
      weight_dimension_numbers: which leaves are (stacks of) matrices, as in
        :class:`gradax.scale_by_muon`: "auto" (2-D; 3-D as stacked; 4-D as
        conv), None (2-D only), dimension numbers, a tree or a function.
      momentum: "ema" (an average divided by 1 - b1^t), "ema_uncorrected"
        (undivided) or "sum" (b1 m + u).
      graft_bias_correction: divide the "rmsprop" grafting accumulator by
        1 - b2^t (False: the reference's undivided accumulator).
      precondition_vectors: give a vector a full statistic (exponent 2, cut
        into blocks of `block_size`) instead of the grafting direction.
      merge_small_dims: if > 0, lay each leaf out as its shape with adjacent
        axes merged while their product stays <= this (the reference's
        `merge_small_dims_block_size`): a vector, a matrix, or a tensor with
        a factor per axis (rank k >= 3, roots of exponent 2k); 0 keeps
        `weight_dimension_numbers`' layout.
      skip_preconditioning_dim_size_gt: a leaf with an axis longer than
        this takes the grafting direction (None: none is skipped).
      grafting_momentum: "shared" (one momentum) or "separate" (a momentum
        of each direction, the grafting one used up to
        `start_preconditioning_step`).
      weight_decay: coupled weight decay, >= 0: `weight_decay * params` is
        added to the direction before the momentum (needs params).
    """

    weight_decay: Any = hyper(default=0.0, valid=NONNEGATIVE, kw_only=True)

    def _plans(self, tree):
        return kron.plans(
            self.weight_dimension_numbers,
            tree,
            block_size=self.block_size,
            vector=self.precondition_vectors,
            merge_small_dims=self.merge_small_dims,
            skip_larger_than=self.skip_preconditioning_dim_size_gt,
        )

    def init_state(self, params):
        plans, treedef = self._plans(params)
        stats = kron.factor_tree(plans, treedef, params)
        if self.start_statistics == "matrix_epsilon":
            # Padding rows of a last block get it too: their gradient rows
            # are 0, so they stay apart from the real ones.
            eps = self.matrix_epsilon
            stats = jax.tree.map(
                lambda s: s + (eps * jnp.eye(s.shape[-1])).astype(s.dtype), stats
            )
        return ShampooState(
            zero_count(),
            jax.tree.map(jnp.zeros_like, params),
            jax.tree.map(lambda p: jnp.zeros_like(p, real_dtype(p.dtype)), params),
            stats,
            kron.factor_tree(plans, treedef, params),
            jax.tree.map(jnp.zeros_like, params)
            if self.grafting_momentum == "separate"
            else None,
        )

    def update_state(self, updates, state, params=None, **extra_args):
        plans, treedef = self._plans(updates)
        count = safe_increment(state.count)
        columns = zip(
            plans,
            treedef.flatten_up_to(updates),
            treedef.flatten_up_to(state.nu),
            treedef.flatten_up_to(state.stats),
            treedef.flatten_up_to(state.roots),
            strict=True,
        )
        outs = [self._leaf(*c, state.count) for c in columns]
        # Five trees from per-leaf rows (a tree with no leaves has no rows).
        new = [jax.tree.unflatten(treedef, [o[i] for o in outs]) for i in range(5)]
        graft, pre, nu, stats, roots = new
        use = state.count >= self.start_preconditioning_step
        wd = self.weight_decay
        decays = not (isinstance(wd, (int, float)) and wd == 0)
        if decays and params is None:
            raise ValueError(
                "scale_by_shampoo(weight_decay=...) needs params: pass them to update"
            )

        def decayed(direction):
            if not decays:
                return direction
            return jax.tree.map(
                lambda u, p: u + (wd * p).astype(u.dtype), direction, params
            )

        def pick(shampoo_tree, graft_tree):
            return jax.tree.map(
                lambda p, g: jnp.where(use, p, g), shampoo_tree, graft_tree
            )

        if self.grafting_momentum == "shared":
            out, mu = self._momentum(decayed(pick(pre, graft)), state.mu, count)
            return out, ShampooState(count, mu, nu, stats, roots)
        pre_out, mu = self._momentum(decayed(pre), state.mu, count)
        graft_out, graft_mu = self._momentum(decayed(graft), state.graft_mu, count)
        return pick(pre_out, graft_out), ShampooState(
            count, mu, nu, stats, roots, graft_mu
        )

    def _momentum(self, direction, mu, count):
        """The momentum's output and new state for `direction`."""
        b1 = self.b1
        # The reference's averages weigh the new direction by 1 - b1 ("ema"
        # forms) or 1 ("sum"); only "ema" divides by 1 - b1^t.
        w = 1 if self.momentum == "sum" else 1 - b1
        new_mu = jax.tree.map(lambda m, u: b1 * m + w * u, mu, direction)
        new_mu = jax.tree.map(match_sharding, new_mu, mu)
        if self.momentum == "ema":
            out = debiased_first_moment(new_mu, direction, b1, count, self.nesterov)
        elif self.nesterov:
            # the reference's look-ahead: w u + b1 m_t, undivided
            out = jax.tree.map(lambda m, u: b1 * m + w * u, new_mu, direction)
        else:
            out = new_mu
        return out, new_mu

    def _graft(self, g, nu, count, axes):
        """The grafting direction and accumulator (float32 or wider)."""
        b2, kind = self.b2, self.grafting_type
        if kind == "sgd":
            return g, nu
        if kind == "rmsprop_normalized":
            norm = jnp.sqrt(jnp.sum(jnp.abs(g) ** 2, axis=axes, keepdims=True))
            g = g / jnp.where(norm > 0, norm, 1).astype(g.dtype)
        if kind == "adagrad":
            nu = nu + jnp.abs(g) ** 2
            correction = 1.0
        else:
            sums = b2 == 1
            nu = b2 * nu + jnp.where(sums, 1, 1 - b2) * jnp.abs(g) ** 2
            # In the leaf's precision (float64 for float64 leaves, as Adam's).
            t = (count + 1).astype(real_dtype(work_dtype(g.dtype)))
            correction = jnp.where(sums, 1, 1 - b2**t)
            if not self.graft_bias_correction:
                correction = 1.0
        denominator = jnp.sqrt(nu / correction) + self.eps
        return g / denominator.astype(g.dtype), nu

    def _accumulate(self, stat, gram):
        """The factor's running average (a sum with b2 = 1)."""
        b2 = self.b2
        return b2 * stat + jnp.where(b2 == 1, 1, 1 - b2) * gram

    def _roots(self, stats, roots, count):
        """Inverse roots of the factors (None stays None), cached in between."""
        exponent = 2 * sum(s is not None for s in stats)

        def computed():
            return tuple(
                None
                if s is None
                else match_sharding(
                    kron.inverse_root(s, exponent, self.matrix_epsilon), r
                )
                for s, r in zip(stats, roots, strict=True)
            )

        if self.preconditioning_compute_steps == 1:
            return computed()
        due = count % self.preconditioning_compute_steps == 0
        return jax.lax.cond(due, computed, lambda: roots)

    def _leaf(self, plan, g, nu, stats, roots, count):
        if isinstance(plan, kron.TensorPlan):
            return self._tensor_leaf(plan, g, nu, stats, roots, count)
        dtype = work_dtype(g.dtype)
        (gm, sharding), (nu_m, _) = kron.gather(g, plan), kron.gather(nu, plan)
        gm = plan.to_matrices(gm).astype(dtype)
        nu_m = plan.to_matrices(nu_m).astype(real_dtype(dtype))
        axes = (-2, -1) if plan.factored else None
        graft, nu_m = self._graft(gm, nu_m, count, axes)
        new_nu = match_sharding(kron.ungather(plan.from_matrices(nu_m), sharding), nu)
        if not plan.factored:
            return graft, graft, new_nu, stats, roots
        blocks = kron.to_blocks(gm, plan)
        sides = ("left", "right")
        stats = tuple(
            None if s is None else self._accumulate(s, kron.gram(blocks, side))
            for s, side in zip(stats, sides, strict=True)
        )
        roots = self._roots(stats, roots, count)
        left, right = roots
        pre = blocks
        if left is not None:
            pre = kron.mm("...ij,...jk->...ik", left, pre)
        if right is not None:
            pre = kron.mm("...ij,...jk->...ik", pre, right)
        pre = _grafted(kron.from_blocks(pre, plan), graft, axes=(-2, -1))
        graft, pre = (
            kron.ungather(plan.from_matrices(d), sharding) for d in (graft, pre)
        )
        return graft, pre, new_nu, stats, roots

    def _tensor_leaf(self, plan, g, nu, stats, roots, count):
        """A leaf merged to rank k >= 3: a factor per axis, roots of -1/(2k)."""
        dtype = work_dtype(g.dtype)
        (gt, sharding), (nu_t, _) = kron.gather(g, plan), kron.gather(nu, plan)
        gt = gt.reshape(plan.merged).astype(dtype)
        nu_t = nu_t.reshape(plan.merged).astype(real_dtype(dtype))
        graft, nu_t = self._graft(gt, nu_t, count, None)
        new_nu = match_sharding(kron.ungather(nu_t.reshape(g.shape), sharding), nu)
        blocks = kron.tensor_to_blocks(gt, plan)
        stats = tuple(
            self._accumulate(s, kron.axis_gram(blocks, axis))
            for axis, s in enumerate(stats)
        )
        roots = self._roots(stats, roots, count)
        pre = blocks
        for axis, root in enumerate(roots):  # no None: every axis has a factor
            pre = kron.apply_on_axis(pre, cast(jax.Array, root), axis)
        pre = _grafted(kron.tensor_from_blocks(pre, plan), graft, axes=None)
        graft, pre = (kron.ungather(d.reshape(g.shape), sharding) for d in (graft, pre))
        return graft, pre, new_nu, stats, roots


def _grafted(pre, graft, axes):
    """`pre` rescaled to the grafting direction's norm (over `axes`)."""

    def norm(x):
        return jnp.sqrt(jnp.sum(jnp.abs(x) ** 2, axis=axes, keepdims=True))

    return pre * (norm(graft) / (norm(pre) + 1e-16)).astype(pre.dtype)


class shampoo(_ShampooOptions, LearningRateAlias):
    r"""Shampoo: Kronecker-factored preconditioning, grafted to a diagonal method.

    For each matrix :math:`G_t` (fan-in x fan-out; each slice of a stacked
    weight, and each block of a matrix whose side exceeds `block_size`, has
    its own factors):

    .. math::
      L_t = \beta_2 L_{t-1} + (1 - \beta_2) G_t G_t^H,\quad
      R_t = \beta_2 R_{t-1} + (1 - \beta_2) G_t^H G_t,\\
      P_t = \tilde L^{-1/4} G_t \tilde R^{-1/4},\quad
      \tilde S = S + \epsilon_m \lambda_{\max}(S) I,\\
      U_t = P_t \frac{\|D_t\|_F}{\|P_t\|_F},\quad
      M_t = \beta_1 M_{t-1} + (1 - \beta_1) U_t,\quad
      u_t = -\eta_t \Big(\frac{M_t}{1 - \beta_1^t} + \lambda \theta_{t-1}\Big),

    with :math:`D_t` the grafting optimizer's direction: for "rmsprop",
    :math:`D_t = G_t / (\sqrt{A_t / (1 - \beta_2^t)} + \epsilon)`,
    :math:`A_t = \beta_2 A_{t-1} + (1 - \beta_2) G_t^2` (Adam's denominator,
    so learning rates carry over from Adam). With :math:`\beta_2 = 1` the
    factors are sums (the original Shampoo). The inverse roots come from
    `eigh` in float32 (or wider), with the damping relative to the largest
    eigenvalue as in the distributed Shampoo reference (its default
    `relative_matrix_epsilon=True` at commit 01aac34); they are recomputed
    every `preconditioning_compute_steps` updates (the first included) and
    cached in the state in between. Updates `t <= start_preconditioning_step`
    use :math:`D_t` instead of :math:`U_t`, as do leaves that are not
    matrices (vectors, scalars). A side longer than `block_size` is cut
    into blocks (the last one zero-padded), each with its own factors; the
    grafted norm is taken per matrix.

    Differences from the reference (distributed Shampoo, Anil et al.,
    `scalable_shampoo/optax/distributed_shampoo.py` of
    google-research/google-research at commit 01aac34; compared here with
    its copy in mlcommons/algorithmic-efficiency at 2c90454), each with a
    keyword option that gives the reference's rule:

    - the momentum is an exponential average divided by
      :math:`1 - \beta_1^t`; the reference's default
      (`moving_average_for_momentum=True`) leaves it undivided
      (`momentum="ema_uncorrected"`), its other choice is the sum
      :math:`M_t = \beta_1 M_{t-1} + U_t` (`momentum="sum"`); with
      `nesterov` both take its look-ahead
      :math:`\beta_1 M_t + w U_t` (:math:`w = 1 - \beta_1`, or 1 for
      the sum);
    - the weight decay is decoupled; the reference's default
      (`decoupled_weight_decay=False`) adds :math:`\lambda \theta` to
      the grafted direction :math:`U_t` before the momentum
      (`weight_decay_mode="coupled"`);
    - "rmsprop" grafting divides :math:`A_t` by :math:`1 - \beta_2^t`;
      the reference's does not (`graft_bias_correction=False`);
    - the factors start at 0, the reference's at :math:`\epsilon_m I`
      (`start_statistics="matrix_epsilon"`; it matters on a near-singular
      block preconditioned from the first step);
    - one momentum takes the grafting direction up to
      `start_preconditioning_step`, then Shampoo's; the reference keeps a
      momentum of each from the first update on and switches between them
      (`grafting_momentum="separate"`, which adds `graft_mu` to the state;
      with momentum 0.9 and a start at 3, "shared" is 0.10 to 0.14 off
      over 20 steps);
    - a vector takes the grafting direction; the reference gives it a full
      statistic of its own (exponent 2, in blocks of `block_size`:
      `precondition_vectors=True`; 0.31 to 0.35 apart);
    - each leaf keeps the layout `weight_dimension_numbers` gives it; the
      reference first merges adjacent axes while their product stays <=
      `merge_small_dims_block_size` (4096; `merge_small_dims=4096`), so
      that, for example, an 8x5 matrix becomes a vector of 40 and a
      (3, 3, 64, 128) conv kernel a 576x128 matrix (0.26 to 0.32 apart on
      small leaves made vectors). A leaf that merges to rank k >= 3 gets a
      factor per axis (each cut into blocks of `block_size`), with inverse
      roots of exponent 2k, as the reference does (a (3, 3, 512, 512)
      kernel at 4096 is (9, 512, 512); 0.13 to 0.20 apart from gradax's
      conv layout, on a (3, 3, 6, 8) kernel merged to (9, 6, 8));
    - every leaf is preconditioned, its long sides in blocks; the
      reference's `skip_preconditioning_dim_size_gt` (4096) gives a leaf
      with a longer axis the grafting direction
      (`skip_preconditioning_dim_size_gt=4096`).

    With these set, gradax follows the reference to float32's rounding
    over 20 steps: 4e-7 relative on matrices and tensors with a factor per
    axis (with momentum 0.9 and weight decay on, also in blocks, whose last
    one the reference leaves short and gradax zero-pads), 2e-5 to 4e-5 on
    vectors and leaves merged to vectors,
    whose statistics are rank-deficient for the first steps so that
    float32 rounding is amplified more (the reference keeps its statistics
    in float32).

    Args:
      learning_rate: :math:`\eta`, a number or schedule.
      b1: :math:`\beta_1`, momentum decay in [0, 1).
      b2: :math:`\beta_2` in [0, 1].
      eps: :math:`\epsilon` of the grafting optimizer, >= 0.
      matrix_epsilon: :math:`\epsilon_m` >= 0.
      weight_decay: :math:`\lambda` >= 0.
      block_size: the largest side of a factor, an integer >= 1.
      preconditioning_compute_steps: how often to recompute inverse roots, an
        integer >= 1.
      start_preconditioning_step: the last update that uses :math:`D_t`, an
        integer >= 0.
      grafting_type: "rmsprop", "rmsprop_normalized", "adagrad" or "sgd".
      nesterov: Nesterov momentum (NAdam's form).
      start_statistics: "zero" (default) or "matrix_epsilon", the
        reference's :math:`\epsilon_m I`; keyword-only.
      momentum: "ema" (default), "ema_uncorrected" (the reference's
        default) or "sum"; keyword-only.
      graft_bias_correction: True (default) or False (the reference's
        "rmsprop"); keyword-only.
      weight_decay_mode: "decoupled" (default) or "coupled" (the
        reference's default); keyword-only.
      precondition_vectors: False (default: vectors take the grafting
        direction) or True (a full statistic, as the reference); keyword-only.
      merge_small_dims: 0 (default: no merging) or the largest product of
        merged adjacent axes (the reference: 4096); keyword-only.
      skip_preconditioning_dim_size_gt: None (default) or the longest axis
        a preconditioned leaf may have (the reference: 4096); keyword-only.
      grafting_momentum: "shared" (default) or "separate" (the
        reference's); keyword-only.
      weight_dimension_numbers: which leaves are (stacks of) matrices:
        "auto" (2-D matrices, 3-D stacks along the first axis, 4-D conv
        kernels `(h, w, c_in, c_out)`), None (2-D only), or dimension numbers
        as :class:`gradax.muon` takes them.

    Returns:
      The optimizer, a gradient transformation.

    Example:
      >>> import jax, jax.numpy as jnp, gradax
      >>> params = {"w": jnp.ones((3, 4)), "b": jnp.zeros(4)}
      >>> tx = gradax.shampoo(1e-2, start_preconditioning_step=0)
      >>> state = tx.init(params)
      >>> grads = {"w": jnp.arange(12.0).reshape(3, 4), "b": jnp.ones(4)}
      >>> updates, state = tx.update(grads, state, params)
      >>> [r.shape for r in state[0].roots["w"]]
      [(3, 3), (4, 4)]

    References:
      Gupta, Koren and Singer, Shampoo: Preconditioned Stochastic Tensor
      Optimization, 2018 (arXiv:1802.09568); Anil et al., Scalable Second
      Order Optimization for Deep Learning, 2020 (arXiv:2002.09018).
    """

    weight_decay: Any = hyper(default=0.0, valid=NONNEGATIVE)
    _: KW_ONLY
    weight_decay_mode: str = hyper(
        default="decoupled",
        valid=OneOf(WEIGHT_DECAY_MODES),
        static=True,
        kw_only=True,
    )

    def build(self):
        # Both modes build the same chain, so the state tree (and a
        # checkpoint) does not depend on the mode.
        coupled = self.weight_decay_mode == "coupled"
        return chain(
            self.part(
                scale_by_shampoo, weight_decay=self.weight_decay if coupled else 0.0
            ),
            add_decayed_weights(0.0 if coupled else self.weight_decay),
            scale_by_learning_rate(self.learning_rate),
        )
