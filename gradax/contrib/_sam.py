"""Sharpness-aware minimization (SAM) and the normalize step it uses."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .. import tree as gtree
from .._core.declarations import POSITIVE_INT, hyper
from .._core.protocol import (
    EmptyState,
    GradientTransformation,
    TransformationLike,
    transformation_field,
)
from .._core.pytree import static_field
from .._core.updates import apply_updates

NormalizeState = EmptyState


class normalize(GradientTransformation):
    """Divides the updates by their global norm.

    SAM's adversarial step is usually `chain(normalize(), sgd(rho))`: a step
    of length `rho` along the gradient.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.normalize()
      >>> tx.update(jnp.array([3.0, 4.0]), tx.init(None))[0]
      Array([0.6, 0.8], dtype=float32)
    """

    def init_state(self, params):
        del params
        return NormalizeState()

    def update_state(self, updates, state, params=None, **extra_args):
        g_norm = gtree.norm(updates)
        return jax.tree.map(lambda g: g / g_norm, updates), state


class SAMState(NamedTuple):
    """State of :class:`sam`."""

    steps_since_sync: jax.Array  # int32 scalar, in [0, sync_period)
    opt_state: Any  # the outer optimizer's state
    adv_state: Any  # the adversarial optimizer's state
    cache: Any  # params at the last sync (None in opaque mode)


def _pick(condition: jax.Array, if_true: Any, if_false: Any) -> Any:
    return jax.tree.map(lambda a, b: jnp.where(condition, a, b), if_true, if_false)


def _negate(tree: Any) -> Any:
    return jax.tree.map(lambda x: -x, tree)


class sam(GradientTransformation):
    r"""Sharpness-aware minimization: descend from an adversarially moved point.

    Every `sync_period` steps make one outer step. In between, the
    adversarial optimizer takes `sync_period - 1` ascent steps from the
    outer parameters :math:`x`, reaching :math:`\tilde x`; the outer optimizer
    then updates :math:`x` with the gradient at :math:`\tilde x`:

    .. math::
      \tilde x = x + \mathrm{adv}(\nabla f(x)),\qquad
      x \leftarrow x + \mathrm{opt}(\nabla f(\tilde x)),

    e.g. `adv = chain(normalize(), sgd(rho))` gives
    :math:`\tilde x = x + \rho \nabla f / \|\nabla f\|`, the original SAM.

    Two ways to run it:

    - transparent (default): call `update` with the gradient at the current
      params each step, as for any optimizer. The params visit the
      adversarial points; every `sync_period`-th update returns to the
      outer parameters and applies the outer step.
    - `opaque_mode=True`: one `update` does a whole period; it needs
      `grad_fn=` (`grad_fn(params, i)` returns the gradient at params for
      the i-th adversarial step) and returns the outer step only.

    Args:
      optimizer: the outer optimizer (gradax or optax).
      adv_optimizer: the adversarial optimizer; its updates are negated
        (ascent).
      sync_period: adversarial steps per outer step, plus one; >= 1.
      reset_state: re-initialize the adversarial state at every outer step.
      opaque_mode: run a whole period per update (needs `grad_fn=`).
      batch_axis_name: in opaque mode, average the adversarial gradients over
        this mapped axis (`pmean`).

    Returns:
      A gradient transformation whose state is a :class:`SAMState`;
      transparent `update` needs `params`.

    Example:
      >>> import jax, jax.numpy as jnp, gradax
      >>> loss = lambda p: jnp.sum(p**2)
      >>> params = jnp.array([1.0, -2.0])
      >>> adv = gradax.chain(gradax.normalize(), gradax.sgd(0.1))
      >>> tx = gradax.sam(gradax.sgd(0.1), adv)
      >>> state = tx.init(params)
      >>> for _ in range(2):  # one adversarial step, then the outer step
      ...     updates, state = tx.update(jax.grad(loss)(params), state, params)
      ...     params = gradax.apply_updates(params, updates)
      >>> params
      Array([ 0.79..., -1.58...], dtype=float32)

    Differences from optax: states and updates are picked with `where`, so
    an infinite value in the branch not taken does not turn into NaN; extra
    arguments of `update` are passed on to both inner optimizers.

    References:
      Foret et al., Sharpness-Aware Minimization for Efficiently Improving
      Generalization, ICLR 2021 (arXiv:2010.01412).
    """

    optimizer: TransformationLike = transformation_field()
    adv_optimizer: TransformationLike = transformation_field()
    sync_period: int = hyper(default=2, valid=POSITIVE_INT, static=True)
    reset_state: bool = static_field(default=True)
    opaque_mode: bool = static_field(default=False)
    batch_axis_name: str | None = static_field(default=None)

    def init_state(self, params):
        return SAMState(
            steps_since_sync=jnp.zeros([], jnp.int32),
            opt_state=self.optimizer.init(params),
            adv_state=self.adv_optimizer.init(params),
            cache=None if self.opaque_mode else jax.tree.map(jnp.array, params),
        )

    def update_state(self, updates, state, params=None, **extra_args):
        grad_fn = extra_args.pop("grad_fn", None)
        if self.opaque_mode:
            return self._opaque_update(updates, state, params, grad_fn, extra_args)
        if params is None:
            raise ValueError("sam.update needs the current params: pass params=.")
        return self._transparent_update(updates, state, params, extra_args)

    def _transparent_update(self, updates, state, params, extra_args):
        first = state.steps_since_sync == 0
        last = state.steps_since_sync == self.sync_period - 1
        adv_updates, adv_state = self.adv_optimizer.update(
            updates, state.adv_state, params, **extra_args
        )
        adv_updates = _negate(adv_updates)
        opt_updates, opt_state = self.optimizer.update(
            updates, state.opt_state, state.cache, **extra_args
        )
        # The outer step starts from the cached outer parameters.
        opt_updates = jax.tree.map(
            lambda c, p, u: c - p + u, state.cache, params, opt_updates
        )
        cache = _pick(first, params, state.cache)
        new_updates = _pick(last, opt_updates, adv_updates)
        if self.reset_state:
            adv_state = _pick(last, self.adv_optimizer.init(params), adv_state)
        else:
            adv_state = _pick(last, state.adv_state, adv_state)
        opt_state = _pick(last, opt_state, state.opt_state)
        return new_updates, SAMState(
            steps_since_sync=(state.steps_since_sync + 1) % self.sync_period,
            opt_state=opt_state,
            adv_state=adv_state,
            cache=cache,
        )

    def _opaque_update(
        self,
        updates: Any,
        state: SAMState,
        params: Any,
        grad_fn: Callable[[Any, int], Any] | None,
        extra_args: dict[str, Any],
    ):
        if grad_fn is None:
            raise ValueError("sam with opaque_mode=True needs grad_fn= in update.")
        adv_params, adv_updates, adv_state = params, updates, state.adv_state
        for i in range(self.sync_period - 1):
            adv_updates, adv_state = self.adv_optimizer.update(
                adv_updates, adv_state, adv_params, **extra_args
            )
            adv_params = apply_updates(adv_params, _negate(adv_updates))
            adv_updates = grad_fn(adv_params, i)
            if self.batch_axis_name is not None:
                adv_updates = jax.lax.pmean(adv_updates, self.batch_axis_name)
        if self.reset_state:
            adv_state = self.adv_optimizer.init(params)
        new_updates, opt_state = self.optimizer.update(
            adv_updates, state.opt_state, params, **extra_args
        )
        return new_updates, SAMState(
            steps_since_sync=jnp.zeros([], jnp.int32),
            opt_state=opt_state,
            adv_state=adv_state,
            cache=None,
        )
