"""Tree math and state access: the `optax.tree` surface, for gradax states.

Every function of `optax.tree` is here, with its name, arguments and
numbers. Three groups:

- arithmetic on pytrees of arrays (`add`, `scale`, `norm`, `vdot`, the
  moment updates used by optimizers, ...), mapped leaf by leaf with
  :func:`jax.tree.map`, so `None` is an empty subtree;
- access by name inside nested states (`get`, `get_all_with_path`,
  `set`): a name is a dict key, a NamedTuple field or class name, or an
  attribute of a keyed pytree node such as a registered frozen dataclass;
- `carry_state` (gradax's own): carries a state over to a transformation
  whose state tree differs (a schedule, a clip, a wrapper added or removed).

Its modules shadow the builtins `sum`, `max`, `min` and `set`; inside
them the builtins are reached through :mod:`builtins`.
"""

from __future__ import annotations

from ._access import Filtering as Filtering
from ._access import KeyPath as KeyPath
from ._access import NamedTupleKey as NamedTupleKey
from ._access import get as get
from ._access import get_all_with_path as get_all_with_path
from ._access import map_params as map_params
from ._access import set as set
from ._arithmetic import add as add
from ._arithmetic import add_scale as add_scale
from ._arithmetic import allclose as allclose
from ._arithmetic import batch_shape as batch_shape
from ._arithmetic import clip as clip
from ._arithmetic import conj as conj
from ._arithmetic import div as div
from ._arithmetic import max as max
from ._arithmetic import min as min
from ._arithmetic import mul as mul
from ._arithmetic import norm as norm
from ._arithmetic import real as real
from ._arithmetic import scale as scale
from ._arithmetic import size as size
from ._arithmetic import sub as sub
from ._arithmetic import sum as sum
from ._arithmetic import vdot as vdot
from ._arithmetic import where as where
from ._carry import carry_state as carry_state
from ._construct import cast as cast
from ._construct import cast_like as cast_like
from ._construct import dtype as dtype
from ._construct import full_like as full_like
from ._construct import ones_like as ones_like
from ._construct import random_like as random_like
from ._construct import split_key_like as split_key_like
from ._construct import unwrap_random_key_data as unwrap_random_key_data
from ._construct import zeros_like as zeros_like
from ._moments import bias_correction as bias_correction
from ._moments import update_infinity_moment as update_infinity_moment
from ._moments import update_moment as update_moment
from ._moments import update_moment_per_elem_norm as update_moment_per_elem_norm
