"""Distance over gradients (DoG): a learning-rate-free step size, per leaf."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._core.declarations import ANY, NONNEGATIVE, POSITIVE, hyper
from .._core.numerics import real_dtype
from .._core.protocol import GradientTransformation
from .._core.pytree import static_field


class ScaleByDistanceOverGradientsState(NamedTuple):
    """State of :class:`scale_by_distance_over_gradients`."""

    max_dist: Any  # per leaf, a real scalar: the largest distance travelled
    grad_sum_of_squares: Any  # per leaf, a real array of shape (1,)
    init_params: Any  # the initial params, in param_dtype


def _sum_sq(x: jax.Array) -> jax.Array:
    """Sum of `|x|**2` over all elements, in the real dtype of `x`."""
    if jnp.iscomplexobj(x):
        return (jnp.square(jnp.real(x)) + jnp.square(jnp.imag(x))).sum()
    return jnp.square(x).sum()


def _init_dtype(param_dtype: Any, p: Any) -> Any:
    """`param_dtype` (made complex for complex params), as JAX stores it."""
    if param_dtype is None:
        return p.dtype
    if jnp.iscomplexobj(p):
        param_dtype = jnp.promote_types(param_dtype, jnp.complex64)
    return jax.dtypes.canonicalize_dtype(param_dtype)


def _sum_dtype(p: Any) -> Any:
    """float32, or float64 for float64 (complex128) params."""
    real = real_dtype(p.dtype)
    return jax.dtypes.canonicalize_dtype(jnp.promote_types(jnp.float32, real))


class scale_by_distance_over_gradients(GradientTransformation):
    r"""Distance over gradients (DoG): a step size with no learning rate.

    Per leaf, with :math:`\theta_0` the initial parameter,

    .. math::
      r_t = \max\big(r_{t-1}, \|\theta_t - \theta_0\|\big),\quad
      r_0 = r_\epsilon (1 + \|\theta_0\|),\qquad
      G_t = G_{t-1} + \|g_t\|^2,\qquad
      u_t = s\, \frac{r_t}{\sqrt{G_t + \epsilon}}\, g_t.

    The sign is not flipped: chain `scale_by_learning_rate(1.0)` (or
    `scale(-1.0)`) to descend. `update` needs `params`.

    Differences from optax: a scalar parameter keeps its shape (optax's
    update has shape (1,)); complex parameters use :math:`|\cdot|^2` and keep
    a complex copy of :math:`\theta_0`; the sum of squares is float64 for
    float64 parameters (float32 otherwise, as in optax).

    Args:
      reps_rel: :math:`r_\epsilon > 0`, the relative initial distance.
      eps: :math:`\epsilon \ge 0`, keeps the first steps finite.
      param_dtype: dtype of the stored initial parameters (None: the
        params').
      global_scale: :math:`s`, any real number, multiplies every step (-1
        descends, as `scale(-1.0)` would).

    Returns:
      A transformation whose state is a
      :class:`ScaleByDistanceOverGradientsState`.

    Example:
      >>> import jax.numpy as jnp, gradax
      >>> tx = gradax.chain(
      ...     gradax.scale_by_distance_over_gradients(reps_rel=0.1),
      ...     gradax.scale(-1.0),
      ... )
      >>> params = jnp.array([3.0, 4.0])
      >>> updates, state = tx.update(2 * params, tx.init(params), params)
      >>> [round(float(u), 4) for u in updates]
      [-0.36, -0.48]

    References:
      Ivgi, Hinder and Carmon, DoG is SGD's Best Friend: A Parameter-Free
      Dynamic Step Size Schedule, ICML 2023 (arXiv:2302.12022).
    """

    reps_rel: Any = hyper(default=1e-6, valid=POSITIVE)
    eps: Any = hyper(default=1e-8, valid=NONNEGATIVE)
    param_dtype: Any = static_field(default=jnp.float32)
    global_scale: Any = hyper(default=1.0, valid=ANY)  # optax: typically 1 or -1

    def init_state(self, params):
        reps_rel, param_dtype = self.reps_rel, self.param_dtype
        return ScaleByDistanceOverGradientsState(
            max_dist=jax.tree.map(
                lambda p: reps_rel * (1 + jnp.sqrt(_sum_sq(p))), params
            ),
            grad_sum_of_squares=jax.tree.map(
                lambda p: jnp.zeros(1, _sum_dtype(p)), params
            ),
            # A copy (astype to the same dtype returns `p` itself): a step
            # that donates params and state refuses a buffer given twice.
            init_params=jax.tree.map(
                lambda p: jnp.array(p, _init_dtype(param_dtype, p)), params
            ),
        )

    def update_state(self, updates, state, params=None, **extra_args):
        if params is None:
            raise ValueError(f"{self._public_name()} needs params passed to update")
        max_dist = jax.tree.map(
            lambda r, p, p0: jnp.maximum(r, jnp.sqrt(_sum_sq(p - p0))),
            state.max_dist,
            params,
            state.init_params,
        )
        sums = jax.tree.map(
            lambda s, g: s + _sum_sq(g), state.grad_sum_of_squares, updates
        )
        global_scale, eps = self.global_scale, self.eps

        def step(g, r, s):
            # s has shape (1,); its one element keeps g's shape unchanged.
            return global_scale * (r / jnp.sqrt(s[0] + eps)) * g

        new_updates = jax.tree.map(step, updates, max_dist, sums)
        return new_updates, ScaleByDistanceOverGradientsState(
            max_dist=max_dist, grad_sum_of_squares=sums, init_params=state.init_params
        )
