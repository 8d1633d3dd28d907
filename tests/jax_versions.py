"""The supported jax range in tests: names that moved, and version skips.

A feature that needs a newer jax than the floor (gradax/_requirements.py)
raises at use on an older one (gradax._compat.require_jax); its tests carry
``needs_jax(version, feature)``, a skip that says which jax it needs. The
names below are jax's own on newer releases; each says which release made
the fallback unnecessary.
"""

from __future__ import annotations

import jax
import pytest

from gradax._compat import EXPLICIT_MESHES, JAX_VERSION, reshard, shard_map

if JAX_VERSION >= (0, 8, 0):
    enable_x64 = jax.enable_x64
else:  # jax 0.8.0 made it jax.enable_x64
    from jax.experimental import enable_x64

if JAX_VERSION >= (0, 7, 1):
    set_mesh = jax.set_mesh
else:  # jax 0.7.1 added jax.set_mesh, also a context manager
    set_mesh = jax.sharding.use_mesh

P = jax.sharding.PartitionSpec  # jax.P from jax 0.7.0 on


def needs_jax(version: tuple[int, ...], feature: str) -> pytest.MarkDecorator:
    """Skip where the installed jax is older than ``version``, saying why."""
    need = ".".join(map(str, version))
    return pytest.mark.skipif(
        JAX_VERSION < version,
        reason=f"{feature} needs jax {need} or newer; this is jax {jax.__version__}",
    )


# gradax refuses Explicit mesh axes before jax 0.7.0 (gradax._compat).
explicit_axes = needs_jax(EXPLICIT_MESHES, "Explicit mesh axes (sharding in types)")
EXPLICIT_AXES_SUPPORTED = JAX_VERSION >= EXPLICIT_MESHES


def axis_type_params(*kinds: str) -> list:
    """``kinds`` ("Auto", "Explicit") as parameters, Explicit marked
    :data:`explicit_axes`."""
    return [
        pytest.param(kind, marks=explicit_axes if kind == "Explicit" else ())
        for kind in kinds
    ]


__all__ = [
    "EXPLICIT_AXES_SUPPORTED",
    "P",
    "axis_type_params",
    "enable_x64",
    "explicit_axes",
    "needs_jax",
    "reshard",
    "set_mesh",
    "shard_map",
]
