"""What the registry files share: the entry types and the constants.

Each package's entries are in ``tests/<package>/registry_<package>.py`` (see
``registry.py``); a constant or helper that more than one of them uses is
here, once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
import pytest
from jax_versions import needs_jax

import gradax
from gradax._compat import JAX_VERSION


@dataclasses.dataclass(frozen=True)
class Entry:
    """One transformation under test.

    Attributes:
      name: the public gradax name (and the optax name, unless ``optax_name``).
      kwargs: small arguments for both gradax and optax.
      optimizer: a full optimizer (descends on its own): gets convergence checks.
      schedule_arg: a numeric argument to give as a schedule, or None.
      complex_ok: runs on complex parameters.
      optax_name: optax attribute path when it differs; "" for no optax twin.
      converge_kwargs: arguments for the convergence checks (default: kwargs).
      rosenbrock_steps: steps allowed on Rosenbrock (0: parabola only).
      injectable: can be wrapped by inject_hyperparams.
      build_fn: builds the transformation when it is not ``gradax.<name>(**kwargs)``.
      optax_build_fn: same for the optax twin.
      rtol: tolerance against optax (float32 over the test's steps).
      requires: ``(version, feature)`` where the entry needs a jax newer than
        the floor: every test of it is skipped on an older jax, saying why
        (``marks``, applied by tests/conftest.py).
    """

    name: str
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    optimizer: bool = False
    schedule_arg: str | None = None
    complex_ok: bool = True
    optax_name: str | None = None
    converge_kwargs: dict[str, Any] | None = None
    rosenbrock_steps: int = 0
    injectable: bool = True
    build_fn: Callable[..., Any] | None = None
    optax_build_fn: Callable[..., Any] | None = None
    rtol: float = 1e-5
    requires: tuple[tuple[int, ...], str] | None = None

    @property
    def runs_here(self) -> bool:
        """Whether the installed jax is new enough for this entry."""
        return self.requires is None or JAX_VERSION >= self.requires[0]

    @property
    def marks(self) -> tuple[pytest.MarkDecorator, ...]:
        """The skip of an entry that needs a newer jax (``requires``)."""
        return () if self.requires is None else (needs_jax(*self.requires),)

    @property
    def factory(self) -> Any:
        return getattr(gradax, self.name)

    def build(self, **overrides: Any) -> Any:
        kwargs = {**self.kwargs, **overrides}
        if self.build_fn is not None:
            return self.build_fn(**kwargs)
        return self.factory(**kwargs)

    def build_optax(self) -> Any | None:
        if self.optax_build_fn is not None:
            return self.optax_build_fn(**self.kwargs)
        name = self.name if self.optax_name is None else self.optax_name
        if not name:
            return None
        target = optax
        for part in name.split("."):
            target = getattr(target, part)
        return target(**self.kwargs)

    def __str__(self) -> str:
        return self.name


# The small learning rate most optimizer entries take.
LR = dict(learning_rate=0.05)

# The parameter tree the checks use has leaves "s", "v", "m", "t"
# (conformance_base.make_params): a mask and labels over it.
MASK = {"s": False, "v": True, "m": True, "t": False}
LABELS = {"s": "a", "v": "b", "m": "a", "t": "b"}

# 8-bit blockwise moments in blocks of 4 elements, so that the suite's small
# parameters (up to 2x6x8) are really quantized; leaves with fewer than 4
# elements stay float32, which the suite's scalar leaf covers.
Q8 = gradax.int8_blockwise(block_size=4)


# The objective of the entries whose update needs more than gradients.
def loss_fn(params):
    """A real quadratic around 0.5 (complex leaves count by their modulus)."""
    total = 0.0
    for x in jax.tree.leaves(params):
        weights = 1.0 + jnp.arange(x.size, dtype=jnp.float32).reshape(x.shape) / x.size
        total = total + jnp.sum(weights * jnp.abs(x - 0.5) ** 2)
    return total


def grad_fn(params, i):
    del i
    return jax.grad(loss_fn)(params)


@dataclasses.dataclass(frozen=True)
class ExtraArgCase:
    """A transformation whose ``update`` needs ``value``, ``obj_fn`` or ``grad_fn``.

    The generic checks cannot call it; contrib/test_contrib_extra_args.py runs
    them with ``extra(params, value)`` supplied (``loss_fn`` is the objective).
    """

    name: str
    build: Callable[..., Any]
    build_optax: Callable[[], Any] | None
    kwargs: dict[str, Any]
    needs: tuple[str, ...]  # extra arguments of update: value, obj_fn, grad_fn
    schedule_arg: str | None = None
    injectable: bool = True
    complex_ok: bool = True
    rtol: float = 1e-5
    requires: tuple[tuple[int, ...], str] | None = None

    @property
    def runs_here(self) -> bool:
        """Whether the installed jax is new enough for this entry."""
        return self.requires is None or JAX_VERSION >= self.requires[0]

    @property
    def marks(self) -> tuple[pytest.MarkDecorator, ...]:
        """The skip of an entry that needs a newer jax (``requires``)."""
        return () if self.requires is None else (needs_jax(*self.requires),)

    def make(self, **overrides):
        return self.build(**{**self.kwargs, **overrides})

    def extra(self, params, value):
        out = {}
        if "value" in self.needs:
            out["value"] = value
        if "obj_fn" in self.needs:
            out["obj_fn"] = loss_fn
        if "grad_fn" in self.needs:
            out["grad_fn"] = grad_fn
        return out

    def __str__(self):
        return self.name


def entry_id(entry: Entry) -> str:
    suffix = "-".join(f"{k}" for k in entry.kwargs if k != "learning_rate")
    return f"{entry.name}[{suffix}]" if suffix else entry.name


def settling(learning_rate: float, steps: int = 3000) -> Any:
    """A learning rate that decays over a Rosenbrock run (cosine, to 1%).

    Some adaptive methods at a constant rate hover around Rosenbrock's valley
    floor instead of settling: adamax, adamaxw, adan and optimistic_adam_v2
    had losses that jumped by orders of magnitude (up to 0.7) over their last
    150 steps, so whether the last one was below the bound depended on the
    compiler's rounding (optimistic_adam_v2 ended at 5e-4 with XLA's default
    options and at 9e-3 with the suite's, tests/conftest.py). With a decaying rate
    the last step's loss is a stable measure.
    """
    return gradax.cosine_decay_schedule(learning_rate, steps, alpha=0.01)
