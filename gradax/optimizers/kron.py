"""PSGD Kron: Kronecker-factored preconditioners fitted on the Lie group."""

from __future__ import annotations

import dataclasses
from dataclasses import KW_ONLY
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import tree as gtree
from .._core.axes import replicate, restore
from .._core.declarations import (
    DECAY,
    LEARNING_RATE,
    NONNEGATIVE,
    NONNEGATIVE_INT,
    POSITIVE,
    UNIT,
    OneOf,
    Range,
    Shared,
    hyper,
)
from .._core.hyper import resolve
from .._core.numerics import canonical_dtype, safe_increment, work_dtype
from .._core.protocol import Alias, GradientTransformation, zero_count
from .._core.pytree import static_field
from ..schedules.psgd import precond_update_prob_schedule
from ..transforms.cautious import decayed_descent
from . import _psgd as psgd

# How often a preconditioner update also balances the factors (psgd-jax).
_BALANCE_PROBABILITY = 0.01
# psgd-jax be95524's cap on each preconditioned leaf's RMS ("the RMS of the
# preconditioned gradient should be 1.0").
_RMS_CAP = 1.1
# psgd-jax be95524's damping scale: sqrt of float32's machine epsilon,
# computed in float32 whatever the working dtype.
_DAMPING = np.sqrt(np.finfo(np.float32).eps, dtype=np.float32)
OUTPUT_CLIPS = ("trust_region", "rms")
PRECOND_UPDATES = ("random", "interval")


class KronState(NamedTuple):
    """State of :class:`scale_by_kron`."""

    count: jax.Array  # int32 scalar: number of updates done
    key: jax.Array  # typed PRNG key: the preconditioner's randomness
    mu: Any  # momentum, like the params (mu_dtype)
    Qs: Any  # noqa: N815 - psgd's name. Per leaf, one factor per axis:
    # (*batch, n, n) upper triangular or (*batch, n) diagonal


class KronIntervalState(NamedTuple):
    """State of :class:`scale_by_kron` with `precond_update="interval"`.

    :class:`KronState`'s fields and a counter, in a class of its own so that
    the default state (and its checkpoints) keep their four fields.
    """

    count: jax.Array  # int32 scalar: number of updates done
    key: jax.Array  # typed PRNG key: the preconditioner's randomness
    mu: Any  # momentum, like the params (mu_dtype)
    Qs: Any  # noqa: N815 - as in KronState
    update_counter: jax.Array  # int32 scalar: steps since the factors' update


def _as_key(key: Any, seed: int) -> jax.Array:
    """A typed PRNG key from a key, raw key data, or the integer seed."""
    if key is None:
        return jax.random.key(seed)
    if isinstance(key, jax.Array):
        if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
            return key
        if key.dtype == jnp.uint32 and key.ndim == 1:
            return jax.random.wrap_key_data(key)
    return jax.random.key(key)


# scale_by_kron's options, declared once: kron takes each field's default and
# valid range from here (in its own signature's order) and passes the values
# on with Alias.part.
_KRON = Shared(
    b1=hyper(default=0.9, valid=DECAY),
    preconditioner_update_probability=hyper(
        default=precond_update_prob_schedule(), valid=UNIT
    ),
    max_size_triangular=hyper(default=8192, valid=NONNEGATIVE_INT, static=True),
    min_ndim_triangular=hyper(default=2, valid=NONNEGATIVE_INT, static=True),
    memory_save_mode=hyper(
        default=None, valid=OneOf(psgd.MEMORY_SAVE_MODES), static=True, allow_none=True
    ),
    mu_dtype=static_field(default=None),
    precond_dtype=static_field(default=None),
    precond_lr=hyper(default=0.1, valid=POSITIVE),
    precond_init_scale=hyper(default=1.0, valid=POSITIVE, schedule=False),
    trust_region_scale=hyper(default=1.5, valid=POSITIVE),
    norm_lower_bound=hyper(
        default="two_step", valid=OneOf(psgd.NORM_LOWER_BOUNDS), static=True
    ),
    output_clip=hyper(default="trust_region", valid=OneOf(OUTPUT_CLIPS), static=True),
    damping=static_field(default=False),
    precond_update=hyper(default="random", valid=OneOf(PRECOND_UPDATES), static=True),
    scanned_layers=static_field(default=None),
    # A key array is data (a leaf), never structure.
    key=dataclasses.field(default=None),
    seed=hyper(default=0, valid=Range(integer=True), static=True),
)


class scale_by_kron(GradientTransformation):
    """PSGD Kron's preconditioned direction. See :class:`kron`.

    Args:
      b1: momentum decay, in [0, 1).
      preconditioner_update_probability: the probability of updating the
        preconditioner at a step, in [0, 1]: a number or a schedule (read
        at the step number counted from 1, as psgd-jax does).
      max_size_triangular: axes longer than this get a diagonal factor.
      min_ndim_triangular: tensors of lower rank get diagonal factors only.
      memory_save_mode: None, "one_diag", "smart_one_diag" or "all_diag".
      mu_dtype: dtype of the momentum buffer.
      precond_dtype: dtype of the factors (None: at least float32).
      precond_lr: the factors' step size, > 0.
      precond_init_scale: the initial preconditioner is this times I, > 0.
      trust_region_scale: the soft clip's scale, > 0.
      norm_lower_bound: the factor step's spectral-norm bound, "two_step"
        (psgd-jax's) or "one_step" (gradax's earlier rule).
      output_clip: "trust_region" (psgd-jax 39d4620's soft clip) or "rms"
        (each preconditioned leaf scaled to an RMS of at most 1.1, psgd-jax
        be95524).
      damping: add `sqrt(eps_float32) * mean|m| * v` to the factors' input
        `m` (psgd-jax be95524).
      precond_update: "random" (update the factors with probability
        p(t)) or "interval" (when the steps since the last update reach
        1 / p(t), psgd-jax be95524; the state is then a :class:`KronIntervalState`).
      scanned_layers: which leaves are stacks of layers along their first
        axis (each slice gets its own factors): None, a tree of bools (a
        prefix of the params) or a function of the params returning one.
      key: a PRNG key (or raw key data, or an integer seed); None: `seed`.
      seed: the integer seed used when `key` is None.
    """

    b1: Any = _KRON.field()
    preconditioner_update_probability: Any = _KRON.field()
    max_size_triangular: int = _KRON.field()
    min_ndim_triangular: int = _KRON.field()
    memory_save_mode: Any = _KRON.field()
    mu_dtype: Any = _KRON.field()
    precond_dtype: Any = _KRON.field()
    _: KW_ONLY
    precond_lr: Any = _KRON.field()
    precond_init_scale: Any = _KRON.field()
    trust_region_scale: Any = _KRON.field()
    norm_lower_bound: str = _KRON.field()
    output_clip: str = _KRON.field()
    damping: bool = _KRON.field()
    precond_update: str = _KRON.field()
    scanned_layers: Any = _KRON.field()
    key: Any = _KRON.field()
    seed: int = _KRON.field()

    # Read at the step counted from 1, as psgd-jax reads it.
    _self_resolved = ("preconditioner_update_probability",)

    def _scanned(self, tree: Any) -> list[bool]:
        spec = self.scanned_layers
        if callable(spec):
            spec = spec(tree)
        leaves, treedef = jax.tree.flatten(tree)
        if spec is None:
            return [False] * len(leaves)
        full = jax.tree.map(
            lambda s, sub: jax.tree.map(lambda _: bool(s), sub), spec, tree
        )
        return treedef.flatten_up_to(full)

    def _layout(self, shape: tuple[int, ...], scanned: bool):
        """The tensor's shape (batch axis removed) and its diagonal axes."""
        if scanned and not shape:
            raise ValueError("scanned_layers marks a scalar leaf as a stack")
        tensor = shape[1:] if scanned else shape
        tensor = tensor or (1,)  # a scalar is a one-element vector
        diagonal = psgd.diagonal_axes(
            tensor,
            self.max_size_triangular,
            self.min_ndim_triangular,
            self.memory_save_mode,
        )
        return tensor, diagonal

    def _precond_dtype(self, leaf: Any) -> Any:
        if self.precond_dtype is None:
            return work_dtype(leaf.dtype)
        dtype = canonical_dtype(self.precond_dtype)
        if jnp.issubdtype(leaf.dtype, jnp.complexfloating):
            # A complex gradient needs complex factors (Hermitian P).
            dtype = jnp.promote_types(dtype, leaf.dtype)
        return dtype

    def init_state(self, params):
        leaves, treedef = jax.tree.flatten(params)
        factors = []
        for leaf, scanned in zip(leaves, self._scanned(params), strict=True):
            shape, diagonal = self._layout(tuple(leaf.shape), scanned)
            qs = psgd.init_factors(
                shape, diagonal, self.precond_init_scale, self._precond_dtype(leaf)
            )
            if scanned:
                qs = tuple(jnp.broadcast_to(q, (leaf.shape[0], *q.shape)) for q in qs)
            factors.append(qs)
        state = KronState(
            count=zero_count(),
            key=_as_key(self.key, self.seed),
            mu=gtree.zeros_like(params, dtype=self.mu_dtype),
            Qs=jax.tree.unflatten(treedef, factors),
        )
        if self.precond_update == "interval":
            return KronIntervalState(*state, update_counter=zero_count())
        return state

    def update_state(self, updates, state, params=None, **extra_args):
        count = safe_increment(state.count)
        probability = resolve(self.preconditioner_update_probability, count)
        mu = gtree.update_moment(updates, state.mu, self.b1, 1)
        momentum = gtree.bias_correction(mu, self.b1, count)
        leaves, treedef = jax.tree.flatten(momentum)
        scanned = self._scanned(updates)
        factors = treedef.flatten_up_to(state.Qs)
        key, draw_key, update_key = jax.random.split(state.key, 3)

        def refit(qs_all):
            balance_key, noise_key = jax.random.split(update_key)
            rebalance = jax.random.uniform(balance_key) < _BALANCE_PROBABILITY
            out = []
            for i, (m, qs, s) in enumerate(zip(leaves, qs_all, scanned, strict=True)):
                qs = jax.lax.cond(rebalance, self._balance(s), lambda q: q, qs)
                v_key = jax.random.fold_in(noise_key, i)
                out.append(self._refit_leaf(m, qs, s, v_key))
            return out

        counter = None
        if self.precond_update == "interval":
            # psgd-jax be95524: update when the steps since the last update
            # reach 1 / p (never for p = 0), then count again from 0.
            counter = safe_increment(state.update_counter)
            do_update = counter.astype(jnp.float32) >= 1 / jnp.asarray(
                probability, jnp.float32
            )
            counter = jnp.where(do_update, jnp.zeros_like(counter), counter)
        else:
            do_update = jax.random.uniform(draw_key) < probability
        factors = jax.lax.cond(do_update, refit, lambda qs: list(qs), factors)
        direction = [
            self._precondition_leaf(m, qs, s)
            for m, qs, s in zip(leaves, factors, scanned, strict=True)
        ]
        new_state = KronState(
            count=count, key=key, mu=mu, Qs=jax.tree.unflatten(treedef, factors)
        )
        if counter is not None:
            new_state = KronIntervalState(*new_state, update_counter=counter)
        return jax.tree.unflatten(treedef, direction), new_state

    def _balance(self, scanned: bool):
        return jax.vmap(psgd.balance) if scanned else psgd.balance

    def _work(self, m: jax.Array, qs: tuple[jax.Array, ...]) -> Any:
        return work_dtype(jnp.result_type(m.dtype, *[q.dtype for q in qs]))

    def _refit_leaf(self, m, qs, scanned, v_key):
        if m.size == 0:  # no entries: nothing to fit (and no side to divide by)
            return qs
        dtype = self._work(m, qs)
        x, _ = replicate(m)
        x = x.astype(dtype)
        v = jax.random.normal(v_key, x.shape, dtype)
        if self.damping:
            x = x + _DAMPING.astype(dtype) * jnp.mean(jnp.abs(x)) * v
        shape, _ = self._layout(tuple(m.shape), scanned)
        work = tuple(q.astype(dtype) for q in qs)

        def one(x, v, work):
            x = x.reshape(shape)
            v = v.reshape(shape)
            return psgd.update_factors(
                work, x, v, self.precond_lr, self.norm_lower_bound
            )

        new = jax.vmap(one)(x, v, work) if scanned else one(x, v, work)
        return tuple(q.astype(old.dtype) for q, old in zip(new, qs, strict=True))

    def _precondition_leaf(self, m, qs, scanned):
        if m.size == 0:
            return m
        dtype = self._work(m, qs)
        x, sharding = replicate(m)
        shape, _ = self._layout(tuple(m.shape), scanned)
        work = tuple(q.astype(dtype) for q in qs)

        def one(x, work):
            return psgd.precondition(work, x.astype(dtype).reshape(shape))

        out = jax.vmap(one)(x, work) if scanned else one(x, work)
        out = out.reshape(m.shape)
        if self.output_clip == "rms":
            rms = jnp.sqrt(jnp.mean(jnp.abs(out) ** 2))
            out = out / jnp.maximum(1.0, rms / _RMS_CAP).astype(out.dtype)
        else:
            out = psgd.trust_region(out, self.trust_region_scale)
        return restore(out.astype(m.dtype), sharding)


class kron(Alias):
    r"""PSGD Kron: SGD preconditioned by Kronecker-factored triangular matrices.

    For each parameter tensor of rank :math:`r` (each slice of a stacked
    one), with momentum :math:`m_t = \beta_1 m_{t-1} + (1 - \beta_1) g_t`
    and :math:`\hat m_t = m_t / (1 - \beta_1^t)`, the preconditioner
    :math:`P = Q^H Q` has one factor :math:`Q_i` per axis (upper triangular,
    or diagonal for axes longer than `max_size_triangular`, tensors of rank
    below `min_ndim_triangular` and the axes of `memory_save_mode`), and
    :math:`Q` multiplies each axis of a tensor by its factor. With probability
    :math:`p(t)` the factors take one step towards the minimum of
    :math:`E[\hat m^H P \hat m + v^H P^{-1} v]`, :math:`v \sim N(0, I)`, which
    is :math:`P = (E[\hat m \hat m^H])^{-1/2}`:

    .. math::
      A = Q \hat m_t,\quad B = Q^{-H} v,\quad
      Q_i \leftarrow Q_i - \frac{\eta_Q}{\|A_i A_i^H + B_i B_i^H\|}
        \mathrm{triu}(A_i A_i^H - B_i B_i^H)\, Q_i

    (:math:`X_i` is :math:`X` unfolded along axis :math:`i`; the norm is a
    cheap lower bound of the spectral norm, the largest entry for a diagonal
    factor, whose step is the diagonal's). For a triangular factor the bound
    of :math:`M = A_i A_i^H + B_i B_i^H` is, from :math:`x` the column of
    :math:`M` with the largest norm, :math:`\|M M x\| / \|M x\|` (two power
    steps, psgd-jax's and kron_torch's; `norm_lower_bound="two_step"`) or
    :math:`\|M x\| / \|x\|` (`"one_step"`, gradax's rule before it
    followed psgd-jax here: up to a few percent lower, so a slightly larger
    step). Then

    .. math::
      u_t = -\eta_t \big(\tau(P \hat m_t) + \lambda \theta_{t-1}\big),\quad
      \tau(x) = s\,\mathrm{sign}(x)\big(0.1 \log(1 + |x|/s)
        + 0.9 \tanh(|x|/s)\big).

    With probability 0.01 an update of the factors first rescales them to
    equal largest entries (:math:`Q` unchanged). The random draws come from
    `key` (or `seed`), kept and split in the state: a run is
    reproducible, and no global random state is read.

    gradax follows psgd-jax's `kron.py` at commit `39d4620` (2024-11-09,
    github.com/evanatyourservice/psgd_jax), the last with this trust region,
    except that psgd-jax also clips the trust region's output to [-2, 2]
    (reached only for entries of :math:`P \hat m` past about 110). psgd-jax
    has since (`e462796`, `be95524`) replaced the trust region by
    scaling each preconditioned tensor to an RMS of at most 1.1, added a
    small damping of the preconditioner's input (:math:`\hat m +
    \sqrt{\epsilon_{32}}\,\mathrm{mean}|\hat m|\, v`), and updates the
    factors every :math:`1/p(t)` steps instead of with probability
    :math:`p(t)`, with the schedule's flat start at 500 steps instead of
    250. gradax keeps the earlier rules by default; `output_clip="rms"`,
    `damping=True`, `precond_update="interval"` and
    `preconditioner_update_probability=precond_update_prob_schedule(
    flat_start=500)` give be95524's (2024-12-31), the newest commit.

    Args:
      learning_rate: :math:`\eta`, a number or schedule.
      b1: :math:`\beta_1`, momentum decay in [0, 1).
      weight_decay: :math:`\lambda \ge 0`.
      weight_decay_mask: which leaves decay (a tree of bools or a function).
      preconditioner_update_probability: :math:`p(t)` in [0, 1], a number or
        a schedule (default :class:`precond_update_prob_schedule`: 1 for 250
        steps, then decaying to 0.03).
      max_size_triangular: axes longer than this get diagonal factors, an
        integer >= 0.
      min_ndim_triangular: tensors of lower rank get diagonal factors only,
        an integer >= 0 (2: vectors are diagonal).
      memory_save_mode: None (triangular where allowed), "one_diag" (the
        largest axis of each tensor diagonal), "smart_one_diag" (the largest
        axis diagonal when it is strictly the largest) or "all_diag".
      mu_dtype: dtype of the momentum.
      precond_dtype: dtype of the factors (None: the parameter's, at least
        float32; complex for complex parameters); arithmetic runs in at
        least float32.
      precond_lr: :math:`\eta_Q > 0` (psgd-jax: 0.1).
      precond_init_scale: the initial :math:`P` is this times I, > 0.
      trust_region_scale: :math:`s > 0`.
      norm_lower_bound: the triangular factors' norm bound, "two_step"
        (default, psgd-jax's) or "one_step" (gradax's earlier rule).
      output_clip: "trust_region" (:math:`\tau` above, the default) or
        "rms" (each preconditioned leaf divided by :math:`\max(1,
        \mathrm{RMS}/1.1)`, psgd-jax be95524).
      damping: add :math:`\sqrt{\epsilon_{32}}\,\mathrm{mean}|\hat m|\, v`
        to the factors' input (psgd-jax be95524); default False.
      precond_update: "random" (with probability :math:`p(t)`, the
        default) or "interval" (when the steps since the last update reach
        :math:`1/p(t)`, psgd-jax be95524; the state is then a
        :class:`KronIntervalState`, with `update_counter`).
      scanned_layers: leaves that are stacks of layers along their first
        axis (a tree of bools, a prefix of the params, or a function of
        them); each slice gets its own factors.
      key: a PRNG key, raw key data or an integer; None: `seed`.
      seed: the integer seed used when `key` is None.

    Returns:
      The optimizer, a gradient transformation.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> params = {"w": jnp.ones((3, 4)), "b": jnp.zeros(4)}
      >>> tx = gradax.kron(1e-3, seed=0)
      >>> state = tx.init(params)
      >>> [q.shape for q in state[0].Qs["w"]], [q.shape for q in state[0].Qs["b"]]
      ([(3, 3), (4, 4)], [(4,)])
      >>> updates, state = tx.update(params, state, params)

    References:
      Li, Preconditioned Stochastic Gradient Descent, 2015 (arXiv:1512.04202);
      Li, Preconditioner on Matrix Lie Group for SGD, 2018 (arXiv:1809.10232);
      psgd-jax (Evan Walters), `kron.py`.
    """

    learning_rate: Any = hyper(default=0.001, valid=LEARNING_RATE)
    b1: Any = _KRON.field()
    weight_decay: Any = hyper(default=0.0, valid=NONNEGATIVE)
    weight_decay_mask: Any = static_field(default=None)
    preconditioner_update_probability: Any = _KRON.field()
    max_size_triangular: int = _KRON.field()
    min_ndim_triangular: int = _KRON.field()
    memory_save_mode: Any = _KRON.field()
    mu_dtype: Any = _KRON.field()
    precond_dtype: Any = _KRON.field()
    _: KW_ONLY
    precond_lr: Any = _KRON.field()
    precond_init_scale: Any = _KRON.field()
    trust_region_scale: Any = _KRON.field()
    norm_lower_bound: str = _KRON.field()
    output_clip: str = _KRON.field()
    damping: bool = _KRON.field()
    precond_update: str = _KRON.field()
    scanned_layers: Any = _KRON.field()
    key: Any = _KRON.field()
    seed: int = _KRON.field()

    def build(self):
        return decayed_descent(
            self.part(scale_by_kron),
            self.weight_decay,
            self.weight_decay_mask,
            self.learning_rate,
        )
