"""`optax.tree_utils`: the functions of :mod:`gradax.tree` under their
older `tree_`-prefixed names (`tree_utils.tree_get` is `tree.get`).

Kept so code written against `optax.tree_utils` runs unchanged; new code
should use :mod:`gradax.tree`.
"""

import functools
import warnings
from collections.abc import Callable
from typing import Any

from ._core.pytree import user_stacklevel
from .tree import NamedTupleKey as NamedTupleKey
from .tree import add as tree_add
from .tree import add_scale as tree_add_scale
from .tree import allclose as tree_allclose
from .tree import batch_shape as tree_batch_shape
from .tree import bias_correction as tree_bias_correction
from .tree import cast as tree_cast
from .tree import cast_like as tree_cast_like
from .tree import clip as tree_clip
from .tree import conj as tree_conj
from .tree import div as tree_div
from .tree import dtype as tree_dtype
from .tree import full_like as tree_full_like
from .tree import get as tree_get
from .tree import get_all_with_path as tree_get_all_with_path
from .tree import map_params as tree_map_params
from .tree import max as tree_max
from .tree import min as tree_min
from .tree import mul as tree_mul
from .tree import norm as tree_norm
from .tree import ones_like as tree_ones_like
from .tree import random_like as tree_random_like
from .tree import real as tree_real
from .tree import scale as tree_scale
from .tree import set as tree_set
from .tree import size as tree_size
from .tree import split_key_like as tree_split_key_like
from .tree import sub as tree_sub
from .tree import sum as tree_sum
from .tree import unwrap_random_key_data as tree_unwrap_random_key_data
from .tree import update_infinity_moment as tree_update_infinity_moment
from .tree import update_moment as tree_update_moment
from .tree import update_moment_per_elem_norm as tree_update_moment_per_elem_norm
from .tree import vdot as tree_vdot
from .tree import where as tree_where
from .tree import zeros_like as tree_zeros_like

__all__ = [
    "NamedTupleKey",
    "tree_add",
    "tree_add_scale",
    "tree_allclose",
    "tree_batch_shape",
    "tree_bias_correction",
    "tree_cast",
    "tree_cast_like",
    "tree_clip",
    "tree_conj",
    "tree_div",
    "tree_dtype",
    "tree_full_like",
    "tree_get",
    "tree_get_all_with_path",
    "tree_map_params",
    "tree_max",
    "tree_min",
    "tree_mul",
    "tree_norm",
    "tree_ones_like",
    "tree_random_like",
    "tree_real",
    "tree_scale",
    "tree_set",
    "tree_size",
    "tree_split_key_like",
    "tree_sub",
    "tree_sum",
    "tree_unwrap_random_key_data",
    "tree_update_infinity_moment",
    "tree_update_moment",
    "tree_update_moment_per_elem_norm",
    "tree_vdot",
    "tree_where",
    "tree_zeros_like",
]


# Names optax 0.2.8 still serves from ``optax.tree_utils`` with a
# DeprecationWarning on each access (its module ``__getattr__``). Each entry:
# the message (it names the replacement) and what the name returns, which
# computes what optax's does.
def _deprecated_names() -> dict[str, tuple[str, Callable[..., Any]]]:
    inf_norm = functools.partial(tree_norm, ord="inf")
    return {
        "tree_scalar_mul": (
            "gradax.tree_utils.tree_scalar_mul is deprecated: use"
            " gradax.tree_utils.tree_scale (gradax.tree.scale).",
            tree_scale,
        ),
        "tree_add_scalar_mul": (
            "gradax.tree_utils.tree_add_scalar_mul is deprecated: use"
            " gradax.tree_utils.tree_add_scale (gradax.tree.add_scale).",
            tree_add_scale,
        ),
        "tree_l1_norm": (
            "gradax.tree_utils.tree_l1_norm is deprecated: use"
            " gradax.tree_utils.tree_norm(..., ord=1).",
            functools.partial(tree_norm, ord=1),
        ),
        "tree_l2_norm": (
            "gradax.tree_utils.tree_l2_norm is deprecated: use"
            " gradax.tree_utils.tree_norm (ord=2 is its default).",
            functools.partial(tree_norm, ord=2),
        ),
        "tree_linf_norm": (
            "gradax.tree_utils.tree_linf_norm is deprecated: use"
            " gradax.tree_utils.tree_norm(..., ord=jnp.inf).",
            inf_norm,
        ),
    }


def __getattr__(name: str) -> object:
    entry = _deprecated_names().get(name)
    if entry is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    message, function = entry
    # The user's line, also when gradax wraps this __getattr__ (None: read
    # from inside a gradax update, which the warning does not concern).
    level = user_stacklevel()
    if level is not None:
        warnings.warn(message, DeprecationWarning, stacklevel=level)
    return function
