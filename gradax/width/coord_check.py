r"""The coordinate check: does a parametrization hold as the model widens?

Train the same model at several widths for a few steps and measure, per
layer, the RMS of each activation's change since initialization. Under a
parametrization that transfers (µP, gradax's :class:`width_transfer`) the
change is the same at every width: flat on a log-log plot. A slope of 1 means
the update grows with width (the standard parametrization's output layer
under Adam), so the best learning rate moves. microsoft/mup ships the same
check for torch (Yang et al., Tensor Programs V, arXiv:2203.03466, §D).

matplotlib is imported only by :meth:`CoordCheck.plot`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._core.protocol import as_transformation
from .._core.updates import apply_updates


@dataclasses.dataclass(frozen=True)
class CoordCheck:
    """What :func:`coord_check` measured.

    Attributes:
      widths: the widths, ascending.
      layers: the activations' names, as `loss_fn` returned them.
      rms: array `(len(widths), seeds, steps, len(layers))`: the RMS of
        each activation's change from its value at initialization, after
        each step, on the check's batch.
      examples: how many examples (tokens, for a sequence model) the
        batch's gradient averages over; the tolerance's finite-width part
        grows with it.
    """

    widths: tuple[int, ...]
    layers: tuple[str, ...]
    rms: np.ndarray
    examples: int = 1

    def _log_means(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        """Mean over seeds of log RMS, and its standard error: (widths, layers)."""
        logs = np.log(np.maximum(self.rms[:, :, step, :], np.finfo(np.float64).tiny))
        seeds = logs.shape[1]
        mean = logs.mean(axis=1)
        if seeds < 2:
            return mean, np.full_like(mean, np.nan)
        return mean, logs.std(axis=1, ddof=1) / math.sqrt(seeds)

    def _weights(self) -> np.ndarray:
        """Least-squares weights: slope = sum(weights * y) over the widths."""
        x = np.log(np.asarray(self.widths, np.float64))
        centered = x - x.mean()
        return centered / np.sum(centered**2)

    def slopes(self, step: int = -1) -> dict[str, float]:
        """Per layer, the slope of log(RMS change) against log(width).

        Fitted by least squares over the widths, on the mean over seeds of
        log RMS after `step` (the last by default). 0 is flat.
        """
        mean, _ = self._log_means(step)
        slope = self._weights() @ mean
        return dict(zip(self.layers, map(float, slope), strict=True))

    def tolerance(self, step: int = -1, *, z: float = 4.0) -> dict[str, float]:
        r"""Per layer, how far from 0 a slope may be and still count as flat.

        Two parts, added:

        - the seed noise: the slope is a weighted sum :math:`\sum_i a_i y_i`
          of the widths' mean log RMS (:math:`a_i = (x_i - \bar x) /
          \sum (x - \bar x)^2`, :math:`x = \log` width); with each mean's
          standard error :math:`\sigma_i` measured over the seeds, the
          slope's is :math:`\sqrt{\sum a_i^2 \sigma_i^2}`, times `z`;
        - the finite-width bias: a coordinate's change sums n terms over the
          fan-in. Their coherent part (aligned with the update) adds up as
          n, the part that the k examples of the gradient leave incoherent
          as :math:`\sqrt{n k}`: relative to the limit, the RMS is
          larger by at most :math:`\sqrt{1 + k/n}` (unit weights), a log
          RMS of :math:`\tfrac12 \log(1 + k/w)`, which fits a slope of
          :math:`|\sum_i a_i \tfrac12 \log(1 + k/w_i)|` (k = `examples`;
          0.25 for k = 64 and widths 32, 64, 128; 0.008 for k = 1).

        With one seed the noise part is not known: NaN.
        """
        _, error = self._log_means(step)
        weights = self._weights()
        noise = np.sqrt((weights[:, None] ** 2 * error**2).sum(axis=0))
        widths = np.asarray(self.widths, np.float64)
        bias = abs(float(weights @ (0.5 * np.log1p(self.examples / widths))))
        return dict(zip(self.layers, map(float, z * noise + bias), strict=True))

    def table(self, step: int = -1) -> str:
        """The RMS change per layer (rows) and width (columns), and slopes."""
        mean = np.exp(self._log_means(step)[0])
        slopes, tol = self.slopes(step), self.tolerance(step)
        head = ["layer", *(f"w={w}" for w in self.widths), "slope", "tolerance"]
        rows = [head]
        for j, name in enumerate(self.layers):
            rows.append(
                [
                    name,
                    *(f"{mean[i, j]:.3g}" for i in range(len(self.widths))),
                    f"{slopes[name]:+.3f}",
                    f"{tol[name]:.3f}",
                ]
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        return "\n".join(
            "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
            for r in rows
        )

    def plot(self, path: str | None = None, *, title: str = "") -> Any:
        """RMS change against width, log-log, one panel per step.

        Needs matplotlib (imported here, not with gradax). Saves to `path`
        when given; returns the figure.
        """
        import matplotlib

        if path is not None:
            matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        steps = self.rms.shape[2]
        fig, axes = plt.subplots(
            1, steps, figsize=(3.2 * steps, 3), squeeze=False, sharey=True
        )
        for t, ax in enumerate(axes[0]):
            mean = np.exp(self._log_means(t)[0])
            for j, name in enumerate(self.layers):
                ax.loglog(self.widths, mean[:, j], marker="o", label=name)
            ax.set_title(f"step {t + 1}")
            ax.set_xlabel("width")
        axes[0][0].set_ylabel("RMS of activation change")
        axes[0][-1].legend(fontsize="small")
        if title:
            fig.suptitle(title)
        fig.tight_layout()
        if path is not None:
            fig.savefig(path, dpi=120)
        return fig


def _rms(x: Any) -> jax.Array:
    x = jnp.asarray(x, jnp.float32)
    return jnp.sqrt(jnp.mean(jnp.square(x)))


def coord_check(
    init_fn: Callable[[jax.Array, int], Any],
    loss_fn: Callable[[Any, Any], tuple[Any, dict[str, Any]]],
    widths: Sequence[int],
    tx: Any,
    batch: Any,
    *,
    steps: int = 3,
    seeds: int = 4,
    examples: int | None = None,
    print_table: bool = True,
) -> CoordCheck:
    """Train at each width for a few steps; measure each activation's change.

    At each width, for each seed: `params = init_fn(key, width)`; then
    `steps` optimizer steps on `batch`; after each, the RMS of every
    activation's change from its value at initialization, on the same
    batch. One compiled program per width runs every seed (`vmap`).

    Args:
      init_fn: `(key, width) -> params`, the model's initialization (µP's
        initialization for the check to come out flat; see
        docs/width-transfer.md).
      loss_fn: `(params, batch) -> (loss, activations)`: the scalar loss and
        a dict of the activations to watch (name -> array), e.g. each
        block's output and the logits.
      widths: at least two distinct widths, e.g. (32, 64, 128).
      tx: the optimizer (gradax or optax), the same at every width (a
        :class:`width_transfer` adapts itself to each width), or a function
        `width -> optimizer`.
      batch: the data, given to `loss_fn` at every step.
      steps: optimizer steps, >= 1.
      seeds: initializations per width, >= 1 (the tolerance needs >= 2).
      examples: the examples the loss averages over (tokens for a sequence
        model), for :meth:`CoordCheck.tolerance`; None: the leading axis
        of the batch's first array.
      print_table: print :meth:`CoordCheck.table`.

    Returns:
      A :class:`CoordCheck`: per layer and width the RMS change, slopes
      against width, their tolerance, a table and a plot.

    Raises:
      ValueError: fewer than two distinct widths, `steps` < 1 or
        `seeds` < 1, or `loss_fn` returning no dict of activations.

    Example:
      >>> import jax, jax.numpy as jnp, gradax
      >>> def init_fn(key, width):
      ...     k1, k2 = jax.random.split(key)
      ...     return {"w1": jax.random.normal(k1, (4, width)) / 2,
      ...             "head": jax.random.normal(k2, (width, 1)) / width}
      >>> def loss_fn(params, x):
      ...     h = jnp.tanh(x @ params["w1"])
      ...     out = h @ params["head"]
      ...     return jnp.mean((out - 1.0) ** 2), {"hidden": h, "out": out}
      >>> base = init_fn(jax.random.key(0), 16)
      >>> check = gradax.coord_check(
      ...     init_fn, loss_fn, (16, 64),
      ...     gradax.width_transfer(gradax.adam(1e-2), base),
      ...     jnp.ones((8, 4)), steps=2, seeds=2, print_table=False)
      >>> sorted(check.slopes())
      ['hidden', 'out']
    """
    widths = tuple(sorted(int(w) for w in widths))
    if len(set(widths)) < 2:
        raise ValueError(f"widths must hold at least two distinct widths, got {widths}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be an integer >= 1, got {steps!r}")
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        raise ValueError(f"seeds must be an integer >= 1, got {seeds!r}")
    if examples is None:
        first = jax.tree.leaves(batch)
        examples = int(np.shape(first[0])[0]) if first and np.ndim(first[0]) else 1
    if isinstance(examples, bool) or not isinstance(examples, int) or examples < 1:
        raise ValueError(f"examples must be an integer >= 1, got {examples!r}")
    keys = jax.random.split(jax.random.key(0), seeds)
    layers: tuple[str, ...] | None = None
    results = []
    for width in widths:
        opt = as_transformation(tx(width) if _is_factory(tx) else tx, "tx")

        def run(key, width=width, opt=opt):
            params = init_fn(key, width)
            grad_fn = jax.grad(loss_fn, has_aux=True)
            _, start = loss_fn(params, batch)
            _check_activations(start)

            def step(carry, _, start=start):
                params, state = carry
                grads, _ = grad_fn(params, batch)
                updates, state = opt.update(grads, state, params)
                params = apply_updates(params, updates)
                _, now = loss_fn(params, batch)
                change = {k: _rms(now[k] - start[k]) for k in start}
                return (params, state), change

            # One traced step (a scan), so compiling costs one step's graph.
            _, changes = jax.lax.scan(
                step, (params, opt.init(params)), None, length=steps
            )
            return changes

        changes = jax.jit(jax.vmap(run))(keys)  # name -> (seeds, steps)
        names = tuple(sorted(changes))
        if layers is not None and names != layers:
            raise ValueError(
                f"loss_fn returned activations {names} at width {width}, "
                f"{layers} at width {widths[0]}: they must be the same names"
            )
        layers = names
        results.append(np.stack([np.asarray(changes[k]) for k in names], -1))
    assert layers is not None
    check = CoordCheck(widths, layers, np.stack(results).astype(np.float64), examples)
    if print_table:
        print(check.table())
    return check


def _is_factory(tx: Any) -> bool:
    """A function of the width, not a transformation (which is callable too)."""
    return callable(tx) and not (hasattr(tx, "init") and hasattr(tx, "update"))


def _check_activations(activations: Any) -> None:
    if not isinstance(activations, dict) or not activations:
        raise ValueError(
            "loss_fn must return (loss, activations) with activations a non-empty "
            f"dict of arrays (name -> array), got {type(activations).__name__}"
        )
