"""Aggregators (per-element updates in, one update out) and `process`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import jax
import jax.numpy as jnp

from ... import tree as gtree
from ..._core.declarations import static_field
from ..._core.protocol import (
    EmptyState,
    FunctionTransformation,
    GradientTransformation,
    zero_count,
)

PerElementUpdates = Any
"""A pytree of per-element updates: each leaf ``[*batch_shape, *param_shape]``."""

AggregatedUpdates = Any
"""A pytree of updates shaped like the parameters, made from per-element ones."""

MaybeAxis = int | Sequence[int] | None
"""Batch axis (or axes) of per-element updates; None when there is none."""


def canonical_axis(axis: Any) -> Any:
    """An axis argument as JAX reductions take it (a list becomes a tuple)."""
    return tuple(axis) if isinstance(axis, list) else axis


# The micro-batch accumulators' states are `(micro_step, ready, *statistics)`:
# microbatches seen in this round, whether the last update completed one, and
# the running statistics (trees like the params).


def accumulation_start(
    state_type: Any, accumulation_steps: int, params: Any, statistics: int
) -> Any:
    """The state before the first microbatch (EmptyState when not accumulating)."""
    if accumulation_steps == 1:
        return EmptyState()
    zeros = [gtree.zeros_like(params) for _ in range(statistics)]
    return state_type(zero_count(), jnp.asarray(False), *zeros)


def accumulation_step(
    state_type: Any,
    step: jax.Array,
    accumulation_steps: int,
    outputs: Any,
    statistics: tuple[Any, ...],
) -> tuple[Any, Any]:
    """`outputs` and a fresh round when `step` completes one, else zeros.

    Until the round is complete the statistics are kept and the outputs are
    zeros, so an update applied every microbatch moves nothing.
    """
    done = state_type(zero_count(), jnp.asarray(True), *gtree.zeros_like(statistics))
    pending = state_type(step, jnp.asarray(False), *statistics)
    return gtree.where(
        step == accumulation_steps,
        (outputs, done),
        (gtree.zeros_like(outputs), pending),
    )


# A leaf without a shape, which the base's shape check skips.
_SHAPELESS = object()


class AggregatorUpdateFn(Protocol):
    """The `update` of an aggregator: per-element updates to one update."""

    def __call__(
        self,
        per_elt_updates: PerElementUpdates,
        state: Any,
        params: Any | None = None,
        **extra_args: Any,
    ) -> tuple[AggregatedUpdates, Any]:
        """Returns the aggregated update and the new state."""


class Aggregator(GradientTransformation):
    r"""A transformation from per-element updates to one aggregated update.

    A usual transformation maps the (batch-averaged) gradient to an update of
    the same shape. An aggregator instead receives the gradients of each
    element of a batch, leaves of shape `[*batch_shape, *param_shape]`
    (from `jax.vmap(jax.grad(loss), (None, 0))`), and returns an update of
    shape `param_shape`: an average, a robust mean, a sum of clipped
    gradients, ... Code that feeds a transformation checks
    `isinstance(tx, Aggregator)` to know which gradients to compute.

    Subclass it, or build one from two functions as in optax:
    `Aggregator(init=init_fn, update=update_fn)`, where `update_fn` has
    the form of :class:`AggregatorUpdateFn` (extra keyword arguments reach it
    only when it accepts `**kwargs`).

    Example:
      >>> import jax.numpy as jnp
      >>> from gradax.experimental import aggregating
      >>> mean = aggregating.Aggregator(
      ...     init=lambda params: (),
      ...     update=lambda g, state, params=None: (g.mean(axis=0), state))
      >>> mean.update(jnp.array([[1.0, 2.0], [3.0, 4.0]]), ())[0]
      Array([2., 3.], dtype=float32)
    """

    # A base whose subclasses write the hooks: gradax's kind, not a
    # NamedTuple of two functions (see GradientTransformation).
    _abstract = True

    def __new__(cls, *args: Any, **kwargs: Any) -> Aggregator:
        # ``Aggregator(init, update)`` itself builds the function-backed kind;
        # subclasses are built as usual.
        if cls is Aggregator:
            return _FunctionAggregator.__new__(_FunctionAggregator)
        return super().__new__(cls)

    _per_example_updates = True

    def _params_like_updates(self, params):
        # Per-element updates have batch axes that the params lack: ``update``
        # compares their trees, not their leaf shapes.
        return jax.tree.map(lambda _: _SHAPELESS, params)


class _FunctionAggregator(Aggregator, FunctionTransformation):
    """An aggregator made of an `init` and an `update` function."""

    def __init__(self, init: Callable[[Any], Any], update: Callable[..., Any]):
        FunctionTransformation.__init__(self, init, update)

    def _public_name(self) -> str:
        return "Aggregator"


# ``Aggregator(init, update)`` builds a _FunctionAggregator: report that
# signature for the base class too.
Aggregator._call_signature_from = _FunctionAggregator.__init__  # type: ignore[attr-defined]


class _ProcessBase(GradientTransformation):
    """What :func:`process` builds; see there."""

    _abstract = True

    preprocessor: GradientTransformation
    aggregator: GradientTransformation
    postprocessor: GradientTransformation
    aggregator_has_aux: bool = static_field(default=False)

    def _public_name(self) -> str:
        return "process"

    def init_state(self, params):
        return (
            self.preprocessor.init(params),
            self.aggregator.init(params),
            self.postprocessor.init(params),
        )

    def update_state(self, updates, state, params=None, **extra_args):
        pre_state, agg_state, post_state = state
        # Per-element updates have batch axes the params lack, and a gradax
        # preprocessor checks their shapes against the params': it gets none.
        pre_params = None if isinstance(self, Aggregator) else params
        updates, pre_state = self.preprocessor.update(
            updates, pre_state, pre_params, **extra_args
        )
        aggregated, agg_state = self.aggregator.update(
            updates, agg_state, params, **extra_args
        )
        if self.aggregator_has_aux:
            aggregated, aux = aggregated
            extra_args = {**extra_args, **aux}
        # An accumulating aggregator says in its state when a full update is
        # ready; until then the postprocessor is skipped and zeros go out.
        ready = gtree.get(agg_state, "ready", True)

        def run(u, s, p, kwargs):
            return self.postprocessor.update(u, s, p, **kwargs)

        def skip(u, s, p, kwargs):
            del p, kwargs
            return gtree.zeros_like(u), s

        updates, post_state = jax.lax.cond(
            ready, run, skip, aggregated, post_state, params, extra_args
        )
        return updates, (pre_state, agg_state, post_state)


class _Process(_ProcessBase):
    """:func:`process` of a plain transformation as the aggregator."""


class _AggregatorProcess(Aggregator, _ProcessBase):
    """:func:`process` around an aggregator: itself an aggregator."""


def process(
    preprocessor: Any,
    aggregator: Any,
    postprocessor: Any,
    aggregator_has_aux: bool = False,
) -> GradientTransformation:
    r"""Per-element updates through a preprocessor, an aggregator and a postprocessor.

    .. math::
      u = \text{post}\big(\text{agg}(\text{pre}(g_1, \dots, g_B))\big)

    The postprocessor (typically an optimizer) runs only when the
    aggregator's state has no `ready` entry or it is true, so an
    aggregator that accumulates microbatches holds the optimizer back (and
    zeros come out) until it has a full update.

    `params` passed to `update` reach the aggregator and the
    postprocessor. When `aggregator` is an :class:`Aggregator` the
    preprocessor works on per-element updates, whose leaves have batch axes
    that the parameters lack, and it is given `params=None` (optax passes
    the parameters on; gradax transformations check that updates and
    parameters have the same shapes).

    Args:
      preprocessor: transformation of the per-element updates (e.g. a
        per-example clipping), or `identity()`.
      aggregator: maps per-element updates to one update (an
        :class:`Aggregator`), or accumulates already aggregated updates.
      postprocessor: transformation of the aggregated update.
      aggregator_has_aux: the aggregator returns `(update, aux)` with a dict
        `aux` of extra keyword arguments for the postprocessor.

    Returns:
      A transformation with state `(pre_state, agg_state, post_state)`;
      an :class:`Aggregator` when `aggregator` is one.

    Example:
      >>> import jax, jax.numpy as jnp, gradax
      >>> from gradax.experimental import aggregating
      >>> tx = aggregating.process(
      ...     gradax.identity(), aggregating.average_per_element_updates(),
      ...     gradax.sgd(0.1))
      >>> per_example = jnp.array([[1.0, 2.0], [3.0, 4.0]])
      >>> tx.update(per_example, tx.init(jnp.zeros(2)))[0]
      Array([-0.2, -0.3], dtype=float32)
    """
    kind = _AggregatorProcess if isinstance(aggregator, Aggregator) else _Process
    return kind(preprocessor, aggregator, postprocessor, aggregator_has_aux)
