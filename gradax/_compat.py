"""Shims for the oldest Python and jax gradax supports, in one place.

Each shim names the release that makes it unnecessary: when the floor in
gradax/_requirements.py reaches that release, delete the shim and use the
name it stands for. `.ci/jax_names.py` leaves this file out of its static
check (each branch here names what one end of the range has); CI runs it on
the floor's jax and on the newest.

A feature that needs a newer jax than the floor calls :func:`require_jax`
when it is used, never when gradax is imported.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import jax
import jax.numpy as jnp

_T = TypeVar("_T")

if sys.version_info >= (3, 11):
    from typing import Self, dataclass_transform
elif TYPE_CHECKING:  # a checker run for 3.10 must still see the transform
    from typing_extensions import Self, dataclass_transform
else:  # Python 3.11 added both to typing.
    # Only annotations name Self, and they are never evaluated.
    Self = Any

    def dataclass_transform(**_: Any) -> Callable[[_T], _T]:
        """A marker for static tools; it changes nothing at run time."""
        return lambda cls: cls


def _release(version: str) -> tuple[int, ...]:
    """The leading numbers of a version: ``"0.5.3.dev1"`` -> (0, 5, 3)."""
    match = re.match(r"\d+(?:\.\d+)*", version)
    return tuple(int(part) for part in match.group(0).split(".")) if match else ()


JAX_VERSION: tuple[int, ...] = _release(jax.__version__)


def require_jax(version: tuple[int, ...], feature: str) -> None:
    """Raise a RuntimeError naming `version` if the installed jax is older."""
    if JAX_VERSION < version:
        need = ".".join(map(str, version))
        raise RuntimeError(
            f"{feature} needs jax {need} or newer; this environment has jax "
            f"{jax.__version__}: pip install --upgrade 'jax>={need}'."
        )


if JAX_VERSION >= (0, 6, 1):
    shard_map = jax.shard_map
else:  # jax 0.6.1 made shard_map public as jax.shard_map

    def shard_map(f: Callable[..., Any], *, mesh: Any, in_specs: Any, out_specs: Any):
        experimental = importlib.import_module("jax.experimental.shard_map")
        return experimental.shard_map(
            f, mesh=mesh, in_specs=in_specs, out_specs=out_specs
        )


if JAX_VERSION >= (0, 7, 0):
    reshard = jax.sharding.reshard
else:  # jax 0.7.0 moved reshard to jax.sharding (the old module is gone since)
    reshard = importlib.import_module("jax.experimental.shard").reshard


def tree_reduce_associative(
    function: Callable[[Any, Any], Any], tree: Any, *, identity: Any
) -> Any:
    """`jax.tree.reduce_associative`: the leaves combined as a balanced tree."""
    if hasattr(jax.tree, "reduce_associative"):
        return jax.tree.reduce_associative(function, tree, identity=identity)
    # jax 0.7.0 added jax.tree.reduce_associative; the same pairing here.
    values = jax.tree.leaves(tree)
    if not values:
        return identity
    while len(values) > 1:
        paired = [
            function(a, b) for a, b in zip(values[::2], values[1::2], strict=False)
        ]
        values = paired + values[len(paired) * 2 :]
    return values[0]


EXPLICIT_MESHES = (0, 7, 0)  # the first jax gradax supports Explicit mesh axes on


def explicit_meshes_supported() -> bool:
    """Whether this jax is one gradax supports Explicit mesh axes on."""
    return JAX_VERSION >= EXPLICIT_MESHES


def require_explicit_meshes() -> None:
    """Refuse Explicit mesh axes before jax 0.7.0.

    Sharding in types was experimental before: jax 0.5 and 0.6 lack
    `out_sharding` in `jnp.zeros` and `jnp.tensordot`, and a sharding
    rule for scatter (L-BFGS's memory update), which gradax relies on there.
    """
    require_jax(EXPLICIT_MESHES, "A mesh with Explicit axes (sharding in types)")


def tensordot(a: Any, b: Any, *, axes: int, precision: Any, out_sharding: Any) -> Any:
    """`jnp.tensordot`; `out_sharding` (None off Explicit meshes) is
    passed only when given (jax 0.7.0 added the argument)."""
    if out_sharding is None:
        return jnp.tensordot(a, b, axes=axes, precision=precision)
    return jnp.tensordot(
        a, b, axes=axes, precision=precision, out_sharding=out_sharding
    )


def zeros(shape: Any, dtype: Any, *, out_sharding: Any) -> Any:
    """`jnp.zeros(shape, dtype, out_sharding=out_sharding)`."""
    if JAX_VERSION >= EXPLICIT_MESHES:
        return jnp.zeros(shape, dtype, out_sharding=out_sharding)
    # jax 0.7.0 added out_sharding. Before it gradax refuses Explicit axes,
    # and on other meshes the compiler chooses the sharding.
    return jnp.zeros(shape, dtype)


def are_all_axes_explicit(mesh: Any) -> bool:
    """`mesh.are_all_axes_explicit` (public from jax 0.7.1 on); refuses such a
    mesh on a jax older than :data:`EXPLICIT_MESHES`."""
    types = mesh.axis_types
    explicit = bool(types) and all(t == jax.sharding.AxisType.Explicit for t in types)
    if explicit:
        require_explicit_meshes()
    return explicit


def memory_space(name: str) -> Any:
    """`jax.memory.Space.<name>` (`"Host"` or `"Device"`), for offloading.

    jax 0.7.1 added jax.memory.Space; before jax 0.10.2 the CPU backend kept
    state meant for host memory in device memory without a word.
    """
    require_jax((0, 7, 1), "gradax.offload_state (jax.memory.Space)")
    if jax.default_backend() == "cpu":
        require_jax((0, 10, 2), "gradax.offload_state on the CPU backend")
    return getattr(jax.memory.Space, name)


__all__ = [
    "EXPLICIT_MESHES",
    "JAX_VERSION",
    "Self",
    "are_all_axes_explicit",
    "dataclass_transform",
    "explicit_meshes_supported",
    "memory_space",
    "require_explicit_meshes",
    "require_jax",
    "reshard",
    "shard_map",
    "tensordot",
    "tree_reduce_associative",
    "zeros",
]
